package sandbox

import (
	"github.com/corral-sandbox/corral/internal/netpolicy"

	"context"
	"time"
)

// RecordState is a sandbox's lifecycle state as the Manager records it.
type RecordState string

const (
	// StateCreating is written before any resource is made, so a crash
	// mid-create leaves a record that Recover removes with what it owns.
	StateCreating RecordState = "creating"
	StateRunning  RecordState = "running"
	// StateDeleting is written before teardown starts.
	StateDeleting RecordState = "deleting"
	// StatePaused sandboxes are frozen (no CPU) and keep their memory.
	StatePaused RecordState = "paused"
	// StateSuspending is written before a suspend starts: a restarted
	// daemon finds out how far it got.
	StateSuspending RecordState = "suspending"
	// StateSuspended sandboxes have no process and no mount: their writable
	// layer (and, with memory state, their checkpoint) wait on disk.
	StateSuspended RecordState = "suspended"
	// StateResuming is written before a resume starts.
	StateResuming RecordState = "resuming"
	// StateError marks a sandbox whose teardown failed, or whose runtime
	// was missing or refused when the daemon started (Record.Error says
	// which); Delete removes it.
	StateError RecordState = "error"
	// StateExited marks a sandbox whose PID 1 (its init) ended on its own
	// while it was running: it can run nothing more, Record.Exited says
	// why, and only Delete applies.
	StateExited RecordState = "exited"
)

// Record is the persistent description of one sandbox. It holds everything
// needed to find and remove what the sandbox owns after a daemon restart:
// the runtime that made it and its layer key (its ID).
type Record struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Image   string `json:"image"`
	Runtime string `json:"runtime"`
	// Tier is the isolation tier (TierContainer, TierGVisor); empty in
	// records written before tiers, which are containers (see TierOf).
	Tier      string            `json:"tier,omitempty"`
	State     RecordState       `json:"state"`
	Resources Resources         `json:"resources"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	User      string            `json:"user,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Created   time.Time         `json:"created"`
	// Deadline is when the sandbox's timeout removes it; zero means never.
	Deadline time.Time `json:"deadline,omitzero"`
	// AgentAddr is the runtime's address of the sandbox's agent.
	AgentAddr string `json:"agent_addr,omitempty"`
	// Ephemeral sandboxes belong to an operation of the daemon (a build
	// step): a restarted daemon removes them instead of recovering them.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Network is the box's egress settings; nil means mode none.
	Network *netpolicy.Settings `json:"network,omitempty"`
	// Timeout is the lifetime asked at create; keep-alive extends the
	// deadline by it when given no other duration.
	Timeout time.Duration `json:"timeout,omitempty"`
	// IdleTimeout suspends or removes (IdleAction) the sandbox after that
	// long without exec, file or network activity; 0 = never.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	IdleAction  IdleAction    `json:"idle_action,omitempty"`
	// Suspended describes the saved state of a suspended sandbox.
	Suspended *Suspension `json:"suspended,omitempty"`
	// ProcessesLost is set when a resume could not bring the saved
	// processes back and started a fresh agent on the saved files instead;
	// a later resume that brings them back clears it.
	ProcessesLost *ProcessesLost `json:"processes_lost,omitempty"`
	// Exited says when the daemon found the sandbox's init gone, and why
	// it ended (state StateExited).
	Exited *Exited `json:"exited,omitempty"`
	// Volumes are the named volumes the sandbox mounts, each time it
	// starts (create, resume); a fork mounts them too.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Origin is the sandbox this one was forked from, or the snapshot it
	// was created from.
	Origin string `json:"origin,omitempty"`
	// Layer is the layer store key of the image layer under the writable
	// layer (the image's top layer at create).
	Layer string `json:"layer,omitempty"`
	// Spec is what the runtime was given (without Rootfs), kept to resume,
	// fork and snapshot the sandbox without the image record.
	Spec *Spec `json:"spec,omitempty"`
	// Pool is the warm pool a ready, not yet handed out sandbox belongs to.
	Pool string `json:"pool,omitempty"`
	// Error says why the sandbox is in state error.
	Error string `json:"error,omitempty"`
	// ErrorFrom is the state a sandbox was in when a daemon started without
	// its runtime (binary missing, or refused for its version): its
	// processes may still run, so it is kept in state error rather than
	// removed, and a daemon that has the runtime again recovers it from
	// this state. Empty for any other error.
	ErrorFrom RecordState `json:"error_from,omitempty"`
	// AccessToken is a random secret made at create: a request that names
	// the sandbox by header (the E2B data plane) without the daemon's
	// token must carry it. The API never lists it.
	AccessToken string `json:"access_token,omitempty"`
	// TimeoutAction is what the deadline does: remove (the default) or
	// pause the sandbox.
	TimeoutAction TimeoutAction `json:"timeout_action,omitempty"`
	// E2B holds the settings of a sandbox made through E2B's API; nil for
	// others.
	E2B *E2BSettings `json:"e2b,omitempty"`
}

// E2BSettings are what E2B's API asks of a sandbox beyond Corral's own
// settings: how its data plane and its ports answer (internal/httpapi).
type E2BSettings struct {
	// AutoResume resumes the paused sandbox on a data-plane or port
	// request (E2B's autoResume); without it a paused sandbox answers 502
	// until connect resumes it.
	AutoResume bool `json:"auto_resume,omitempty"`
	// TrafficToken, when set, must be sent as E2B-Traffic-Access-Token on
	// requests to the sandbox's ports by host name (E2B's
	// allowPublicTraffic false); empty leaves them public.
	TrafficToken string `json:"traffic_token,omitempty"`
	// MaskRequestHost replaces the Host header of requests to the
	// sandbox's ports; "${PORT}" in it becomes the port.
	MaskRequestHost string `json:"mask_request_host,omitempty"`
}

// Clone returns a copy of s (nil for nil).
func (s *E2BSettings) Clone() *E2BSettings {
	if s == nil {
		return nil
	}
	c := *s
	return &c
}

// TimeoutAction is what happens to a sandbox at its deadline.
type TimeoutAction string

const (
	TimeoutRemove TimeoutAction = "remove" // the default
	// TimeoutPause freezes the sandbox at its deadline; it keeps its
	// memory and files until resumed or removed.
	TimeoutPause TimeoutAction = "pause"
)

// IdleAction is what happens to an idle sandbox.
type IdleAction string

const (
	IdleSuspend IdleAction = "suspend" // the default
	IdleRemove  IdleAction = "remove"
)

// Suspension is the saved state of a suspended sandbox.
type Suspension struct {
	Time time.Time `json:"time"`
	// Memory is true when the processes were saved (CRIU) and resume brings
	// them back; false when only the file system was kept and resume
	// starts a fresh agent on it.
	Memory bool `json:"memory"`
	// MemoryBytes is the size of the checkpoint images on disk.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// Exited says when a sandbox's init was found gone and why it ended.
type Exited struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
}

// ProcessesLost says when and why a resume lost the saved processes.
type ProcessesLost struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
}

// CreateRequest asks for a new sandbox. Zero fields take the Manager's
// defaults.
type CreateRequest struct {
	Image string
	// Snapshot, instead of Image, names a snapshot to create from; an
	// image that is not a snapshot is refused.
	Snapshot  string
	Name      string
	Resources Resources
	Env       map[string]string
	Workdir   string
	User      string
	Labels    map[string]string
	// Timeout removes the sandbox that long after creation; 0 = never.
	Timeout time.Duration
	// TimeoutAction is what the timeout does ("" is TimeoutRemove).
	TimeoutAction TimeoutAction
	// E2B: see Record.
	E2B     *E2BSettings
	Runtime string
	// Tier is the isolation tier; empty means the tier of Runtime (or of
	// the default runtime), or a snapshot's own tier. A tier that is not
	// available fails with errdefs.ErrFailedPrecondition.
	Tier string

	// Base, when set, is the image to use instead of looking Image up
	// (Image is then only the name recorded). Builds use it for their
	// intermediate steps; the API never sets it.
	Base *Image
	// Ephemeral marks a sandbox that lives only as long as the daemon's
	// operation that made it (see Record.Ephemeral). Builds set it.
	Ephemeral bool
	// HostNetwork shares the host's network namespace instead of giving
	// the sandbox a loopback-only one. Only builds set it (their steps
	// fetch packages); the API never does.
	HostNetwork bool
	// Network is the box's egress policy, limits and secrets; nil means
	// mode none (loopback only).
	Network *netpolicy.Settings
	// IdleTimeout and IdleAction: see Record.
	IdleTimeout time.Duration
	IdleAction  IdleAction
	// NoPool never hands out a warm pool's sandbox for this request.
	NoPool bool
	// Volumes are named volumes to mount (see VolumeMount); a sandbox
	// with volumes is never taken from a warm pool.
	Volumes []VolumeMount
}

// Store persists sandbox records (implemented by internal/meta). Writes are
// durable when they return.
type Store interface {
	// PutSandbox creates or replaces the record with rec.ID.
	PutSandbox(ctx context.Context, rec *Record) error
	// DeleteSandbox removes the record; a missing record is success.
	DeleteSandbox(ctx context.Context, id string) error
	// ListSandboxes returns every record.
	ListSandboxes(ctx context.Context) ([]*Record, error)
}

// ImageStore is what the Manager needs from the image store.
type ImageStore interface {
	// Get returns the image name; errdefs.ErrNotFound when unknown.
	Get(ctx context.Context, name string) (Image, error)
	// List returns every image (used to name the known ones in errors).
	List(ctx context.Context) ([]Image, error)
}

// LayerLister is implemented by layer stores that can list their writable
// (prepared, not committed) layers, so that Recover can remove those that
// no sandbox record owns.
type LayerLister interface {
	Active(ctx context.Context) ([]string, error)
}
