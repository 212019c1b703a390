package sandbox

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/internal/mount"
)

// Runtime runs sandboxes. Exec and file operations do NOT go through it:
// every backend starts the in-box agent ("corral agent") as the sandbox's
// PID 1 and exposes it at AgentAddr.
//
// Lifecycle: Create -> Start -> (Stop) -> Delete. Create may leave host
// resources behind only until Delete, which removes everything the backend
// made for id (mounts, cgroups, processes, sockets, bundle files), also after
// a partial Create or a daemon crash. Every method may be called again after
// a daemon restart with only the id: backends keep what they need on disk.
//
// Errors: State returns errdefs.ErrNotFound for an unknown id; Create returns
// errdefs.ErrAlreadyExists when id exists; Start on a running sandbox returns
// errdefs.ErrFailedPrecondition. Implementations must be safe for
// concurrent use on different ids.
type Runtime interface {
	// Create prepares the sandbox (root file system mounted, limits set, the
	// agent's listening socket made) without running anything yet.
	Create(ctx context.Context, id string, spec *Spec) error
	// Start runs the agent. It returns once the sandbox is running; the
	// agent may still be starting (callers wait on AgentAddr).
	Start(ctx context.Context, id string) error
	// Stop sends SIGTERM to the sandbox's processes and SIGKILL after grace.
	// Stopping a stopped sandbox is success.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Delete stops the sandbox if needed and removes all it owns. It is
	// idempotent: a missing sandbox is success.
	Delete(ctx context.Context, id string) error
	// State reports the sandbox's status; errdefs.ErrNotFound when unknown.
	State(ctx context.Context, id string) (State, error)
	// AgentAddr is the agent's address, "unix:///run/corral/<id>/agent.sock"
	// or "vsock://<cid>:1024".
	AgentAddr(id string) string
}

// Statser is implemented by runtimes that can read a sandbox's resource use.
type Statser interface {
	Usage(ctx context.Context, id string) (Usage, error)
}

// Lister is implemented by runtimes that can list the sandboxes they know
// of, so that a restarted daemon can remove those it has no record of.
type Lister interface {
	List(ctx context.Context) ([]string, error)
}

// LayerStore prepares and removes sandbox root file systems. It is a trimmed
// containerd Snapshotter: it returns mounts and never mounts on a caller's
// behalf, and it does not decide policy.
//
// Keys are sandbox IDs or layer names (identifiers). Prepare of an existing
// key returns errdefs.ErrAlreadyExists; Remove of a missing key is success.
type LayerStore interface {
	// Prepare makes a new writable layer named key on top of the image
	// parent, limited to opts.DiskBytes, and returns the mounts that make
	// the root file system (lower layers read-only, the writable layer on
	// top).
	Prepare(ctx context.Context, key, parent string, opts PrepareOpts) ([]mount.Mount, error)
	// Remove deletes the writable layer key and everything that backs it.
	// The mounts returned by Prepare must have been unmounted.
	Remove(ctx context.Context, key string) error
}

// PrepareOpts tune Prepare.
type PrepareOpts struct {
	// DiskBytes is the hard size limit of the writable layer.
	DiskBytes int64
}
