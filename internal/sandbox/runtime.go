package sandbox

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/userns"
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
	// Start runs the agent. It returns once the sandbox's PID 1 runs its
	// program (corral-init or the agent), and fails with the reason when
	// PID 1 exited instead; the agent may still be starting (callers wait
	// on AgentAddr).
	Start(ctx context.Context, id string) error
	// Stop sends SIGTERM to the sandbox's processes and SIGKILL after grace.
	// Stopping a stopped sandbox is success.
	Stop(ctx context.Context, id string, grace time.Duration) error
	// Delete stops the sandbox if needed and removes all it owns. It is
	// idempotent: a missing sandbox is success.
	Delete(ctx context.Context, id string) error
	// State reports the sandbox's status (with State.Reason for a stopped
	// one, when known); errdefs.ErrNotFound when unknown.
	State(ctx context.Context, id string) (State, error)
	// AgentAddr is the agent's address, "unix:///run/corral/<id>/agent.sock"
	// or "vsock://<cid>:1024".
	AgentAddr(id string) string
}

// Statser is implemented by runtimes that can read a sandbox's resource use.
type Statser interface {
	Usage(ctx context.Context, id string) (Usage, error)
}

// AgentResumer is implemented by runtimes whose boxes' agents are host
// processes. ResumeAgent finds the agent of running sandbox id stopped
// (SIGSTOP from inside the box: under corral-init the agent is not the
// box's PID 1, which alone the kernel protects from its own box's signals)
// and resumes it with SIGCONT; it reports whether it did. It never kills
// the agent: its commands and their streams would go with it.
type AgentResumer interface {
	ResumeAgent(ctx context.Context, id string) (bool, error)
}

// UserNSRuntime is implemented by runtimes that can run a sandbox in a user
// namespace of its own (Spec.UserNS). UserNS reports whether new
// sandboxes of this runtime get one: the Manager then gives each a range
// of host ids from ManagerConfig.IDRanges.
type UserNSRuntime interface {
	UserNS() bool
}

// NSPreparer is a Runtime that can make a sandbox's namespaces before the
// sandbox exists, off the critical path of its create (see Manager's
// namespace pool).
type NSPreparer interface {
	// PrepareNS makes, under key (a name of the form of a sandbox ID that
	// no sandbox has), the network namespace of a future sandbox, owned
	// by a user namespace with range u when u is set. A Create whose
	// Spec.Premade is key takes them over with u as its Spec.UserNS;
	// Delete(key) removes them, and List reports key until then, so that a
	// restarted daemon's Recover removes what a killed one left. It fails
	// with errdefs.ErrNotImplemented when the runtime cannot (gVisor).
	PrepareNS(ctx context.Context, key string, u *userns.Range) error
}

// IDRanges hands out the host id ranges of sandboxes' user namespaces, one
// per sandbox ID (implemented by userns.Allocator). The ranges are kept in
// the records (Spec.UserNS): Recover reserves them again before it
// creates anything.
type IDRanges interface {
	Allocate(owner string) (userns.Range, error)
	Reserve(owner string, r userns.Range) error
	Release(owner string)
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
	// DiskBytes is the hard size limit of the writable layer. With
	// FromDisk or FromActive it must be zero or equal to the source disk's
	// size: a cloned disk keeps its size.
	DiskBytes int64
	// FromDisk, when set, starts the writable layer as a copy of the saved
	// disk with that name (see DiskSaver) instead of an empty one.
	FromDisk string
	// FromActive, when set, starts the writable layer as a copy of the
	// writable layer with that key, whose sandbox must be frozen and its
	// file system synced (see Pauser and Syncer). Fork uses it.
	FromActive string
}

// LayerMounter is implemented by layer stores that can return the mounts of
// an existing writable layer again (to resume a suspended sandbox on the
// writable layer it had).
type LayerMounter interface {
	// Mounts returns the mounts of writable layer key as Prepare did;
	// errdefs.ErrNotFound when there is no such layer.
	Mounts(ctx context.Context, key string) ([]mount.Mount, error)
}

// DiskFlusher is implemented by layer stores whose writable layers' disks
// are not flushed to the host's disk while mounted (see the overlay store's
// DiskFlush): Suspend flushes a suspended sandbox's disk, which must
// outlive the box.
type DiskFlusher interface {
	// FlushDisk makes what was written to writable layer key's disk
	// durable on the host's disk. The disk must be unmounted.
	FlushDisk(ctx context.Context, key string) error
}

// DiskSaver is implemented by layer stores that can keep a writable layer's
// disk as a named, read-only saved disk (a snapshot), cheaply: a reflink
// clone where the file system allows it (constant time), a sparse copy
// otherwise.
type DiskSaver interface {
	// SaveDisk copies writable layer key's disk to the saved disk name. The
	// layer's sandbox must be frozen and its file system synced.
	// errdefs.ErrAlreadyExists when name exists.
	SaveDisk(ctx context.Context, key, name string) (SavedDisk, error)
	// RemoveDisk removes a saved disk; a missing one is success.
	RemoveDisk(ctx context.Context, name string) error
	// Disks lists the saved disks.
	Disks(ctx context.Context) ([]SavedDisk, error)
}

// SavedDisk describes a saved disk.
type SavedDisk struct {
	Name string `json:"name"`
	// Parent is the layer key of the image the disk's changes sit on.
	Parent string `json:"parent,omitempty"`
	// DiskBytes is the disk's size limit.
	DiskBytes int64 `json:"disk_bytes"`
	// UsedBytes is the bytes its data use on the host (before sharing).
	UsedBytes int64     `json:"used_bytes"`
	Created   time.Time `json:"created"`
	// Reflinked is true when the copy shares blocks with its source.
	Reflinked bool `json:"reflinked,omitempty"`
}

// Pauser is implemented by runtimes that can freeze a sandbox's processes
// (cgroup freezer): a paused sandbox uses no CPU and keeps its memory.
// Pause of a paused sandbox and Unpause of a running one are success.
type Pauser interface {
	Pause(ctx context.Context, id string) error
	Unpause(ctx context.Context, id string) error
}

// Syncer is implemented by runtimes that can flush a sandbox's root file
// system to its disk (syncfs), so that the disk can be copied.
type Syncer interface {
	Sync(ctx context.Context, id string) error
}

// Checkpointer is implemented by runtimes that can save a running
// sandbox's processes (memory, files, sockets) to disk and bring them back,
// with CRIU.
type Checkpointer interface {
	// Checkpoint saves the processes of running sandbox id into dir, a new
	// empty directory. With leaveRunning the sandbox keeps running (fork);
	// otherwise its processes are gone when it returns (suspend) and the
	// caller deletes it from the runtime. A sandbox whose state cannot be
	// saved gets an error wrapping ErrCheckpoint that says why (for
	// example an established TCP connection), and keeps running.
	Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error
	// Restore creates sandbox id (which must not exist in the runtime) from
	// spec as Create does, and resumes the processes saved in dir instead
	// of starting a new agent. id may differ from the checkpointed
	// sandbox's (fork): the restored box gets spec's hostname, cgroup and
	// limits. On error it leaves nothing, as Create.
	Restore(ctx context.Context, id string, spec *Spec, dir string) error
	// EndStray ends a checkpoint or restore of sandbox id that a previous
	// daemon started and did not see end (it was killed): such a CRIU may
	// still hold the box's processes. No such operation is success.
	EndStray(ctx context.Context, id string) error
}

// FilesOnly is implemented by runtimes that are Checkpointers in type
// but whose sandboxes cannot have their memory saved (a tier with no
// working checkpoint on this host). FilesOnly says why, "" when they can:
// suspend then needs filesystem only, and fork cannot copy memory state.
type FilesOnly interface {
	FilesOnly() string
}

// checkpointer returns rt's Checkpointer, or why it has none.
func checkpointer(rt Runtime, name string) (Checkpointer, string) {
	if f, ok := rt.(FilesOnly); ok {
		if why := f.FilesOnly(); why != "" {
			return nil, why
		}
	}
	ck, ok := rt.(Checkpointer)
	if !ok {
		return nil, "runtime " + name + " cannot save memory state"
	}
	return ck, ""
}

// ErrCheckpoint wraps the reasons a sandbox's memory state cannot be
// saved or restored.
var ErrCheckpoint = fmt.Errorf("memory state cannot be saved: %w", errdefs.ErrFailedPrecondition)

// LayerViewer is implemented by layer stores that can show the files of a
// writable layer, a saved disk or a committed layer read-only, for a diff.
// Every view is closed by its Close.
type LayerViewer interface {
	// ViewActive returns a view of a copy of writable layer key's disk,
	// taken when it is called: the layer's sandbox must be frozen and its
	// file system synced (or the disk unmounted) until it returns, and may
	// run again after. errdefs.ErrNotFound when there is no such layer.
	ViewActive(ctx context.Context, key string) (*LayerView, error)
	// ViewDisk returns a view of the saved disk name; errdefs.ErrNotFound
	// when there is none.
	ViewDisk(ctx context.Context, name string) (*LayerView, error)
	// ViewLayer returns a view of the committed layer key and its parents
	// (Upper is nil); errdefs.ErrNotFound when there is none.
	ViewLayer(ctx context.Context, key string) (*LayerView, error)
}

// LayerView is a read-only view of a writable layer on its committed
// layers. Its files must not be written.
type LayerView struct {
	// Upper is the writable layer's upper directory in overlayfs form
	// (whiteouts, opaque directories), nil for a committed layer alone.
	Upper *os.Root
	// Keys and Dirs are the committed layers beneath, top first: their
	// keys and their directories.
	Keys, Dirs []string
}

// Close releases the view.
func (v *LayerView) Close() error {
	if v == nil || v.Upper == nil {
		return nil
	}
	return v.Upper.Close()
}
