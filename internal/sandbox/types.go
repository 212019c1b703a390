package sandbox

import (
	"slices"
	"time"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/userns"
)

// Resources are the hard limits of one sandbox. Zero means "the daemon's
// default", never "unlimited": every sandbox gets finite pids, memory and
// disk limits.
type Resources struct {
	// CPUs is the CPU quota in cores (1.5 = 150 ms of CPU every 100 ms).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryBytes is the memory limit; swap is never allowed beyond it.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// DiskBytes is the size of the writable layer; writes past it fail with
	// ENOSPC.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Pids is the maximum number of tasks (processes and threads).
	Pids int64 `json:"pids,omitempty"`
}

// Bind is a host path mounted into the sandbox. Binds are decided by the
// daemon (an image's host view, the agent binary), never by a request.
type Bind struct {
	Source   string `json:"source"`
	Target   string `json:"target"` // absolute path inside the sandbox
	Readonly bool   `json:"readonly"`
	// Hide are paths under Target, relative to it, that the sandbox does
	// not see: the runtime covers each one that exists with an empty
	// read-only directory (or an empty file). The host image hides the
	// site configuration kept under the host's /usr.
	Hide []string `json:"hide,omitempty"`
}

// Spec is everything a runtime backend needs to create a sandbox.
type Spec struct {
	// Rootfs are the mounts that make the root file system, in order, as
	// returned by the layer store. A Mount with an empty Target goes on the
	// root; others carry absolute host targets (for example the disk that
	// holds the writable layer).
	Rootfs []mount.Mount `json:"rootfs"`
	// Binds are extra read-only or read-write host paths (for the built-in
	// host image: the host's /usr, read-only).
	Binds []Bind `json:"binds,omitempty"`
	// Env is KEY=VALUE for the agent, which hands it to every command as
	// its default environment.
	Env []string `json:"env,omitempty"`
	// Workdir is the default working directory of commands.
	Workdir string `json:"workdir,omitempty"`
	// User is the default user of commands ("root" when empty).
	User string `json:"user,omitempty"`
	// Hostname is the sandbox's UTS host name.
	Hostname string `json:"hostname,omitempty"`
	// Resources are the limits, already defaulted by the Manager.
	Resources Resources `json:"resources"`
	// HostNetwork runs the sandbox in the host's network namespace (build
	// steps only); otherwise it gets its own, with loopback only.
	HostNetwork bool `json:"host_network,omitempty"`
	// AgentBinary is the host path of the static corral binary that runs as
	// PID 1 ("corral agent") inside the sandbox, bind-mounted read-only.
	AgentBinary string `json:"agent_binary"`
	// InitBinary is the host path of corral-init, bind-mounted read-only
	// and run as PID 1: it starts the agent on the first connection and
	// again after the agent exited when idle. Empty runs the agent itself
	// as PID 1, for the sandbox's whole life.
	InitBinary string `json:"init_binary,omitempty"`
	// StartAgent makes corral-init start the first agent at once rather
	// than on the first connection: for a sandbox whose creation talks to
	// its agent (to install its CA certificate), so that the agent starts
	// while the daemon wires the network.
	StartAgent bool `json:"start_agent,omitempty"`
	// AgentIdleExit is how long an agent under InitBinary stays without
	// requests, commands or watchers before it exits (0 = never).
	AgentIdleExit time.Duration `json:"agent_idle_exit,omitempty"`
	// OutputBuffer is how many bytes of each command's output the agent
	// keeps for replay (0: the agent's default, DefaultOutputBuffer;
	// negative: none).
	OutputBuffer int `json:"output_buffer,omitempty"`
	// Warm marks a warm pool's sandbox: its agent's idle clock starts only
	// with its first real request, after the hand-out.
	Warm bool `json:"warm,omitempty"`
	// Premade, when set, is the key of namespaces the runtime made ahead
	// (NSPreparer.PrepareNS) with this spec's UserNS: Create takes them
	// over instead of making new ones. Not kept in the record.
	Premade string `json:"-"`
	// UserNS, when set, runs the sandbox in a user namespace whose root is
	// host uid and gid UserNS.HostID, with every mount of its root file
	// system idmapped so that the files keep their ids on disk. Set by the
	// Manager (from its IDRanges) for runtimes that support it; nil runs
	// box root as host root.
	UserNS *userns.Range `json:"userns,omitempty"`
	// AllowPrivilegeEscalation runs the sandbox without the no_new_privs
	// flag, so that set-user-ID programs (sudo) work: from an image whose
	// spec opts in. The zero value, and every record made before the
	// field, keeps the flag.
	AllowPrivilegeEscalation bool `json:"allow_privilege_escalation,omitempty"`
}

// Status is a sandbox's lifecycle state as the runtime sees it.
type Status string

const (
	StatusCreated Status = "created" // created, not started
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped" // its processes are gone
	StatusUnknown Status = "unknown"
)

// State is what a runtime reports about one sandbox.
type State struct {
	Status Status `json:"status"`
	// Pid is the host PID of the agent (the sandbox's PID 1), 0 if none
	// (or when the box's processes are not host processes, as in a VM).
	Pid int `json:"pid,omitempty"`
	// NetNS is the network namespace the sandbox's network lives in, as a
	// path the daemon can open and join (setns): where the daemon places
	// the box on the network (the egress proxy's listeners, tunnels). A
	// container's is its own namespace (a bind mount that outlives any
	// pid), a microVM's the namespace that holds its TAP device. Set for a
	// running or paused sandbox; "" when there is none.
	NetNS string `json:"netns,omitempty"`
	// Reason says why PID 1 of a stopped sandbox ended, when the runtime
	// can tell (the end of its log).
	Reason string `json:"reason,omitempty"`
}

// Usage is the resource use of a sandbox read from its cgroup.
type Usage struct {
	CPUNanos         uint64    `json:"cpu_ns"`
	MemoryBytes      uint64    `json:"memory_bytes"`
	MemoryPeakBytes  uint64    `json:"memory_peak_bytes,omitempty"`
	MemoryLimitBytes uint64    `json:"memory_limit_bytes,omitempty"`
	Pids             uint64    `json:"pids"`
	PidsLimit        uint64    `json:"pids_limit,omitempty"`
	OOMKills         uint64    `json:"oom_kills"`
	DiskBytes        uint64    `json:"disk_bytes,omitempty"`
	DiskLimitBytes   uint64    `json:"disk_limit_bytes,omitempty"`
	Time             time.Time `json:"time"`
}

// Image is what the Manager needs from the image store to create a sandbox.
type Image struct {
	Name string `json:"name"`
	// TopLayer is the layer store key of the image's top layer; the store
	// knows its chain of parents.
	TopLayer string `json:"top_layer"`
	// Env, Workdir and User are the image's defaults for commands.
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
	// Binds are host paths the image needs mounted (only built-in images
	// have any: the host image binds the host's /usr read-only).
	Binds   []Bind    `json:"binds,omitempty"`
	Created time.Time `json:"created"`
	// Size is the bytes used by the image's own layers on disk.
	Size int64 `json:"size"`
	// Layers is the number of read-only layers: filled by the image store's
	// List and imports, not by Get (the create path), and never stored.
	Layers int `json:"-"`
	// Resources are the image's default limits (from its spec), used where
	// a request leaves a limit zero.
	Resources Resources `json:"resources,omitzero"`
	// Network is the default network settings of sandboxes from the image
	// (its spec's network and secrets); a request's own settings replace it.
	Network *netpolicy.Settings `json:"network,omitempty"`
	// AllowPrivilegeEscalation lets set-user-ID programs gain privileges
	// in the image's sandboxes (the spec's allow_privilege_escalation:
	// they run without no_new_privs); snapshots keep their box's setting.
	AllowPrivilegeEscalation bool `json:"allow_privilege_escalation,omitempty"`
	// Volumes are the named volumes the image's sandboxes mount (its
	// spec's) unless a request names its own.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Builtin images are made by the daemon and cannot be removed.
	Builtin bool `json:"builtin,omitempty"`
	// Disk is set on snapshots: the saved disk (see DiskSaver) that holds
	// the snapshotted sandbox's changes on top of TopLayer. Sandboxes from
	// the image start with a copy of it.
	Disk string `json:"disk,omitempty"`
	// DiskBytes is the size of Disk, which sandboxes from the snapshot keep.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Memory is set on snapshots that also hold the processes' memory state
	// (a directory of checkpoint images), used by fork --memory-state.
	Memory string `json:"memory,omitempty"`
	// Origin is the ID of the sandbox a snapshot was taken of.
	Origin string `json:"origin,omitempty"`
	// Tier is the isolation tier of the sandbox a snapshot was taken of:
	// sandboxes from the snapshot get it unless the request names a tier
	// or a runtime.
	Tier string `json:"tier,omitempty"`
}

// Clone returns a copy of img that shares no memory with it.
func (img Image) Clone() Image {
	img.Env = slices.Clone(img.Env)
	img.Binds = slices.Clone(img.Binds)
	img.Volumes = slices.Clone(img.Volumes)
	for i := range img.Binds {
		img.Binds[i].Hide = slices.Clone(img.Binds[i].Hide)
	}
	img.Network = img.Network.Clone()
	return img
}
