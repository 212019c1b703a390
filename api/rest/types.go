// Package rest holds the JSON types of Corral's control-plane REST API, the
// Go mirror of api/openapi.yaml (the source of truth; a test keeps the two in
// step). The data plane (exec, files) is the agent's Connect protocol under
// /v1/sandboxes/{id}/agent/, generated under api/gen.
package rest

import "time"

// APIVersion prefixes every control-plane path.
const APIVersion = "v1"

// Resources are a sandbox's limits. Zero fields take the daemon's defaults.
type Resources struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// Image is an image name; empty means the daemon's default image.
	Image string `json:"image,omitempty"`
	// Snapshot is a snapshot to create from (POST
	// /v1/sandboxes/{id}/snapshot); unlike Image, the name must be a
	// snapshot. Give at most one of Image and Snapshot.
	Snapshot string `json:"snapshot,omitempty"`
	// Name is an optional unique name usable wherever an ID is.
	Name      string            `json:"name,omitempty"`
	Resources Resources         `json:"resources,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	User      string            `json:"user,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// TimeoutSeconds removes the sandbox that long after creation; 0 = never.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// Runtime selects the OCI runtime within the tier ("crun", "runc" for
	// container; "runsc" for gvisor); empty = the tier's default.
	Runtime string `json:"runtime,omitempty"`
	// Tier is the isolation tier: "container" (a namespaced container on
	// the host's kernel) or "gvisor" (gVisor's kernel in user space).
	// Empty means the tier of Runtime, of the snapshot, or of the default
	// runtime. A tier not available on the host fails with 412
	// failed_precondition saying what to install; it never falls back.
	Tier string `json:"tier,omitempty"`
	// Network is the egress policy; nil means the image's, or mode none.
	Network *Network `json:"network,omitempty"`
	// Secrets are stored secrets (corral secret set) the sandbox may use:
	// its environment gets a placeholder under each name, which the egress
	// proxy replaces with the value on requests to the secret's hosts.
	Secrets []SecretBinding `json:"secrets,omitempty"`
	// IdleTimeoutSeconds applies IdleAction to the sandbox after that long
	// without activity (exec, files, agent requests through the API, a
	// keep-alive); 0 = never.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// IdleAction is "suspend" (the default: the next request resumes the
	// sandbox) or "remove".
	IdleAction string `json:"idle_action,omitempty"`
	// NoPool never hands out a warm pool's ready sandbox for this request:
	// the sandbox is made from scratch.
	NoPool bool `json:"no_pool,omitempty"`
	// Volumes are named volumes (POST /v1/volumes) to mount. A sandbox
	// with volumes is never taken from a warm pool.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// VolumeMount mounts a named volume into a sandbox.
type VolumeMount struct {
	// Name is the volume's name.
	Name string `json:"name"`
	// Target is the absolute path in the sandbox, not / and not under
	// /proc, /sys, /dev or /.corral.
	Target string `json:"target"`
	// Readonly mounts it read-only.
	Readonly bool `json:"readonly,omitempty"`
}

// Volume is a named volume: a file system of a fixed size that outlives
// the sandboxes that mount it.
type Volume struct {
	Name string `json:"name"`
	// SizeBytes is the volume's size; writes past it fail with ENOSPC.
	SizeBytes int64 `json:"size_bytes"`
	// UsedBytes is what its files use (with the file system's own
	// metadata).
	UsedBytes int64             `json:"used_bytes"`
	Labels    map[string]string `json:"labels,omitempty"`
	Created   time.Time         `json:"created"`
	// Sandboxes are the IDs of the sandboxes that mount it, in any state.
	Sandboxes []string `json:"sandboxes"`
}

// VolumeList is the body of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	// Name: letters and digits joined by single '.', '_' or '-'.
	Name string `json:"name"`
	// SizeBytes is the volume's size, 16 MiB to 16 TiB; 0 means 1 GiB.
	SizeBytes int64             `json:"size_bytes,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Network is a sandbox's egress policy.
type Network struct {
	// Mode is "none" (nothing leaves the sandbox; "" means none),
	// "allowlist" (only Allow) or "full" (every public destination).
	Mode string `json:"mode"`
	// Allow are the destinations of mode allowlist: "example.org",
	// "*.example.org", "203.0.113.0/24", each optionally with ":PORT".
	Allow []string `json:"allow,omitempty"`
	// Limits bound the sandbox's egress; nil or zero fields mean the
	// daemon's defaults (and, when changing a running sandbox's policy,
	// keep its current limits).
	Limits *NetworkLimits `json:"limits,omitempty"`
}

// NetworkLimits bound a sandbox's egress.
type NetworkLimits struct {
	// ConnectionsPerMinute is the rate of new connections and DNS queries.
	ConnectionsPerMinute int `json:"connections_per_minute,omitempty"`
	// EgressBytes is the budget of bytes sent and received through the
	// proxy over the sandbox's life.
	EgressBytes int64 `json:"egress_bytes,omitempty"`
}

// SecretBinding binds a stored secret to a sandbox. It never carries the
// value or the placeholder.
type SecretBinding struct {
	Name string `json:"name"`
	// Hosts may receive the value (domain names or "*.domain"); empty
	// means the host rules of the sandbox's allowlist.
	Hosts []string `json:"hosts,omitempty"`
}

// Usage is a sandbox's resource use, read from its cgroup.
type Usage struct {
	CPUNanos         uint64 `json:"cpu_ns"`
	MemoryBytes      uint64 `json:"memory_bytes"`
	MemoryPeakBytes  uint64 `json:"memory_peak_bytes,omitempty"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes,omitempty"`
	Pids             uint64 `json:"pids"`
	PidsLimit        uint64 `json:"pids_limit,omitempty"`
	OOMKills         uint64 `json:"oom_kills"`
	// DiskBytes is what the sandbox's writable disk holds, DiskLimitBytes
	// its size.
	DiskBytes      uint64 `json:"disk_bytes,omitempty"`
	DiskLimitBytes uint64 `json:"disk_limit_bytes,omitempty"`
}

// Sandbox describes one sandbox (GET /v1/sandboxes/{id}).
type Sandbox struct {
	ID      string `json:"id"`
	Name    string `json:"name,omitempty"`
	Image   string `json:"image"`
	Runtime string `json:"runtime"`
	// UserNS is the box's user namespace: its uid and gid 0 are host id
	// UserNS.HostID, and it has UserNS.Size ids. Nil when box root is host
	// root (userns off, or a runtime without user namespaces).
	UserNS *UserNS `json:"userns"`
	// Tier is the isolation tier: "container" or "gvisor".
	Tier string `json:"tier"`
	// State is creating, running, paused, suspending, suspended, resuming,
	// deleting or error.
	State     string            `json:"state"`
	Resources Resources         `json:"resources"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	User      string            `json:"user,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Created   time.Time         `json:"created"`
	// Deadline is when the sandbox is removed by its timeout, if any.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Usage is filled by GET /v1/sandboxes/{id} (not by the list).
	Usage *Usage `json:"usage,omitempty"`
	// AgentPath is the path prefix of the sandbox's data plane on this API.
	AgentPath string `json:"agent_path"`
	// Network is the egress policy; nil means mode none.
	Network *Network `json:"network,omitempty"`
	// Secrets are the secrets bound to the sandbox (names and hosts only).
	Secrets []SecretBinding `json:"secrets,omitempty"`
	// TimeoutSeconds is the lifetime asked at create; a keep-alive without
	// a timeout moves the deadline that far from now.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// IdleTimeoutSeconds and IdleAction are the idle policy (see
	// CreateSandboxRequest).
	IdleTimeoutSeconds int64  `json:"idle_timeout_seconds,omitempty"`
	IdleAction         string `json:"idle_action,omitempty"`
	// Suspended describes the saved state of a suspended sandbox.
	Suspended *Suspension `json:"suspended,omitempty"`
	// ProcessesLost is set when a resume could not bring the saved
	// processes back (a CRIU or kernel change since the checkpoint, a
	// missing checkpoint) and started a fresh agent on the saved files
	// instead; a later resume that brings them back clears it.
	ProcessesLost *ProcessesLost `json:"processes_lost,omitempty"`
	// Exited is set when the sandbox's init (its PID 1) ended on its own:
	// the state is then "exited", and only a removal applies.
	Exited *Exited `json:"exited,omitempty"`
	// Volumes are the named volumes the sandbox mounts.
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Origin is the sandbox this one was forked from, or the snapshot it
	// was created from.
	Origin string `json:"origin,omitempty"`
	// AllowPrivilegeEscalation is set when the sandbox runs without the
	// no_new_privs flag (set-user-ID programs such as sudo work): its
	// image's spec has allow_privilege_escalation: true.
	AllowPrivilegeEscalation bool `json:"allow_privilege_escalation,omitempty"`
	// Error says why the sandbox is in state error: a removal that failed,
	// or its runtime missing or refused when the daemon started (its
	// processes may still run; rm removes it, a daemon with the runtime
	// back recovers it).
	Error string `json:"error,omitempty"`
}

// Exited says when the daemon found a sandbox's init gone and why it
// ended (the end of its log).
type Exited struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
}

// ProcessesLost says when and why a resume lost the saved processes.
type ProcessesLost struct {
	Time   time.Time `json:"time"`
	Reason string    `json:"reason"`
}

// Suspension is the saved state of a suspended sandbox.
type Suspension struct {
	Time time.Time `json:"time"`
	// Memory is true when the processes were saved and resume brings them
	// back where they were; false when only the file system was kept and
	// resume starts a fresh agent on it.
	Memory bool `json:"memory"`
	// MemoryBytes is the size of the saved memory state on disk.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	// Count is the number of copies, 1 (when 0) to 64.
	Count int `json:"count,omitempty"`
	// MemoryState also copies the running processes: each copy resumes
	// them where the source was.
	MemoryState bool `json:"memory_state,omitempty"`
	// Labels are added to the source's labels on every copy.
	Labels map[string]string `json:"labels,omitempty"`
}

// SuspendRequest is the body of POST /v1/sandboxes/{id}/suspend.
type SuspendRequest struct {
	// FilesystemOnly keeps only the file system: the processes are stopped
	// and resume starts a fresh agent. Without it the processes' memory is
	// saved too, which fails (leaving the sandbox running) when it cannot
	// be saved.
	FilesystemOnly bool `json:"filesystem_only,omitempty"`
}

// KeepAliveRequest is the body of POST /v1/sandboxes/{id}/keepalive.
type KeepAliveRequest struct {
	// TimeoutSeconds moves the sandbox's deadline to now plus that long;
	// 0 uses the sandbox's own timeout (and only resets its idle timer
	// when it has none).
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshot.
type SnapshotRequest struct {
	// Name is the snapshot's image name ("web-1", "team/app:v2").
	Name string `json:"name"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Image `json:"snapshots"`
}

// PoolSpec is the body of PUT /v1/pools: a warm pool of Size ready
// sandboxes of one image, runtime and limits. Zero limits take the image's
// and the daemon's defaults, as at create; Size 0 removes the pool.
type PoolSpec struct {
	Image   string `json:"image"`
	Runtime string `json:"runtime,omitempty"`
	// Tier is the isolation tier (each tier has its own pools); empty
	// means Runtime's, or the default runtime's.
	Tier      string    `json:"tier,omitempty"`
	Resources Resources `json:"resources,omitzero"`
	Size      int       `json:"size"`
}

// Pool is a warm pool with its resolved settings.
type Pool struct {
	// Key identifies the pool (a digest of image, runtime and limits).
	Key       string    `json:"key"`
	Image     string    `json:"image"`
	Runtime   string    `json:"runtime"`
	Tier      string    `json:"tier"`
	Resources Resources `json:"resources"`
	Size      int       `json:"size"`
	// Ready is how many sandboxes wait to be handed out.
	Ready int `json:"ready"`
	// Error is the last refill failure, empty once a refill succeeds.
	Error string `json:"error,omitempty"`
}

// PoolList is the body of GET /v1/pools.
type PoolList struct {
	Pools []Pool `json:"pools"`
}

// NetworkEvent is one egress attempt of a sandbox, a line of
// GET /v1/sandboxes/{id}/network/log: a TCP connection or a DNS query,
// allowed or denied.
type NetworkEvent struct {
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	// Kind is "tcp" (transparent proxy), "connect" or "http" (explicit
	// proxy) or "dns".
	Kind string `json:"kind"`
	// Host is the destination name (SNI, Host header, CONNECT target or
	// DNS query), "" when the sandbox gave none.
	Host string `json:"host,omitempty"`
	// Addr is the address dialled (allowed) or asked for (denied).
	Addr string `json:"addr,omitempty"`
	Port uint16 `json:"port,omitempty"`
	// Verdict is "allow", "deny" or "error" (allowed, but resolving or
	// connecting failed); Reason says which rule or why not. A DNS query
	// for an allowed name whose every address is blocked is a "deny".
	Verdict  string `json:"verdict"`
	Reason   string `json:"reason,omitempty"`
	BytesOut int64  `json:"bytes_out"`
	BytesIn  int64  `json:"bytes_in"`
	// DurationMS is how long an allowed connection lasted.
	DurationMS int64 `json:"duration_ms,omitempty"`
	// Exec is the command started through the agent that the connection
	// comes from; Process the process that owned the socket.
	Exec    *ProcessRef `json:"exec,omitempty"`
	Process *ProcessRef `json:"process,omitempty"`
	// Secrets are the names of the secrets substituted on the connection.
	Secrets []string `json:"secrets,omitempty"`
}

// ProcessRef names one process of a sandbox by its pid inside the sandbox.
type ProcessRef struct {
	Pid     int    `json:"pid"`
	Command string `json:"command"`
}

// Secret describes a stored secret; no route returns a value.
type Secret struct {
	Name    string    `json:"name"`
	Updated time.Time `json:"updated"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// SetSecretRequest is the body of PUT /v1/secrets/{name}.
type SetSecretRequest struct {
	// Value is 1 byte to 64 KiB, without NUL bytes.
	Value string `json:"value"`
}

// Port is an exposed port of a sandbox, reachable through the daemon's
// tunnel listener.
type Port struct {
	Sandbox string `json:"sandbox"`
	Port    int    `json:"port"`
	// URL reaches the port; it carries the exposure's token, so whoever
	// has it can use the port.
	URL     string    `json:"url"`
	Created time.Time `json:"created"`
}

// PortList is the body of GET /v1/sandboxes/{id}/ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// ExposePortRequest is the body of POST /v1/sandboxes/{id}/ports.
type ExposePortRequest struct {
	// Port is a TCP port on the sandbox's loopback, 1 to 65535.
	Port int `json:"port"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Image describes one image (GET /v1/images).
type Image struct {
	// Name is a reference such as "py-agent", "debian:bookworm" or
	// "127.0.0.1:5000/team/py:1".
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
	Layers  int       `json:"layers"`
	Builtin bool      `json:"builtin,omitempty"`
	Default bool      `json:"default,omitempty"`
	// Source says where the image came from: "builtin", "import",
	// "registry", "archive", "layout", "bootstrap", "build", "tag" or
	// "snapshot".
	Source string `json:"source,omitempty"`
	// DiskBytes is set on snapshots: the disk size that sandboxes created
	// from the snapshot keep.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Origin is the ID of the sandbox a snapshot was taken of.
	Origin string `json:"origin,omitempty"`
}

// ImageInfo is everything known about one image (GET /v1/images/{name}).
type ImageInfo struct {
	Name string `json:"name"`
	// ID is the image's content identity (its top layer): images with the
	// same ID have the same file system.
	ID      string    `json:"id"`
	Created time.Time `json:"created"`
	// Size is the bytes of all the image's layers.
	Size    int64  `json:"size"`
	Builtin bool   `json:"builtin,omitempty"`
	Default bool   `json:"default,omitempty"`
	Source  string `json:"source,omitempty"`
	// Reference is what the image was made from: a registry reference, an
	// archive's tag, a bootstrap suite, a spec file or a tag's source.
	Reference string `json:"reference,omitempty"`
	// Digest is the manifest digest of a pulled or loaded image.
	Digest string `json:"digest,omitempty"`
	// Layers are the read-only layers, bottom first.
	Layers []ImageLayer `json:"layers"`
	// Env, Workdir and User are the defaults of commands in its sandboxes.
	Env     []string `json:"env,omitempty"`
	Workdir string   `json:"workdir,omitempty"`
	User    string   `json:"user,omitempty"`
	// Resources are the default limits of its sandboxes (from its spec).
	Resources Resources `json:"resources,omitzero"`
	// AllowPrivilegeEscalation: its sandboxes run without no_new_privs
	// (the spec's allow_privilege_escalation, or a snapshot's box's).
	AllowPrivilegeEscalation bool `json:"allow_privilege_escalation,omitempty"`
	// Spec holds the runtime settings of an image built from a spec.
	Spec *ImageSpec `json:"spec,omitempty"`
	// DiskBytes and Origin are set on snapshots (see Image).
	DiskBytes int64  `json:"disk_bytes,omitempty"`
	Origin    string `json:"origin,omitempty"`
}

// ImageLayer is one layer of an image.
type ImageLayer struct {
	Key    string `json:"key"`
	DiffID string `json:"diff_id,omitempty"`
	Size   int64  `json:"size"`
}

// ImageSpec are the runtime settings of a spec-built image.
type ImageSpec struct {
	NetworkMode string   `json:"network_mode,omitempty"`
	Allow       []string `json:"allow,omitempty"`
	Secrets     []string `json:"secrets,omitempty"`
	Ports       []int    `json:"ports,omitempty"`
}

// PullRequest is the body of POST /v1/images/pull.
type PullRequest struct {
	// Ref is a registry reference: "debian:bookworm",
	// "127.0.0.1:5000/team/py:1", "example.org/app@sha256:...".
	Ref string `json:"ref"`
	// Name stores the image under this name instead of Ref.
	Name string `json:"name,omitempty"`
}

// BootstrapRequest is the body of POST /v1/images/bootstrap.
type BootstrapRequest struct {
	// Ref is "debian:SUITE", e.g. "debian:bookworm".
	Ref string `json:"ref"`
	// Name stores the image under this name instead of Ref.
	Name string `json:"name,omitempty"`
	// Mirror is the Debian mirror URL (default: the daemon's).
	Mirror string `json:"mirror,omitempty"`
	// Include are extra packages installed by debootstrap.
	Include []string `json:"include,omitempty"`
	// Refresh bootstraps again even when the image exists.
	Refresh bool `json:"refresh,omitempty"`
}

// TagRequest is the body of POST /v1/images/tag.
type TagRequest struct {
	// Source is the existing image; Target the additional name.
	Source string `json:"source"`
	Target string `json:"target"`
}

// PruneRequest is the body of POST /v1/images/prune.
type PruneRequest struct {
	// BuildCache also drops the build cache, so that its layers can go.
	BuildCache bool `json:"build_cache,omitempty"`
}

// PruneReport is the response of POST /v1/images/prune.
type PruneReport struct {
	LayersRemoved  int   `json:"layers_removed"`
	BytesFreed     int64 `json:"bytes_freed"`
	CacheRemoved   int   `json:"cache_entries_removed"`
	LayersInUse    int   `json:"layers_in_use"`
	LayersRetained int   `json:"layers_retained"`
}

// BuildOptions are the query parameters of POST /v1/build.
type BuildOptions struct {
	// Tag names the image (default: the spec's name).
	Tag string
	// File is the spec's name at the root of the build context (default
	// corral.yaml).
	File string
	// NoCache runs every step again.
	NoCache bool
}

// Event is one line of the application/x-ndjson stream of pull, load,
// bootstrap and build. The last line is an "image" or an "error" event.
type Event struct {
	// Type is "step" (a build step starts or comes from the cache), "log"
	// (output of a build step or of debootstrap), "progress" (a layer of
	// a pull or load), "image" (done) or "error" (failed).
	Type   string `json:"type"`
	Step   int    `json:"step,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Name   string `json:"name,omitempty"`
	Cached bool   `json:"cached,omitempty"`
	// Stream is "stdout" or "stderr" for a log event; Data its text.
	Stream   string    `json:"stream,omitempty"`
	Data     string    `json:"data,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	// Layer is the layer a step made or took from the cache.
	Layer string `json:"layer,omitempty"`
	// Image is the result of an "image" event.
	Image *Image `json:"image,omitempty"`
	// Error is the failure of an "error" event; ExitCode the exit code of
	// a failed build step, when it ran.
	Error    *ErrorBody `json:"error,omitempty"`
	ExitCode *int       `json:"exit_code,omitempty"`
}

// Progress is the state of one layer of a pull or load.
type Progress struct {
	// Layer is the layer's diff ID ("" for the image as a whole).
	Layer string `json:"layer,omitempty"`
	// Index and Count place the layer in the image (1-based).
	Index int `json:"index,omitempty"`
	Count int `json:"count,omitempty"`
	// Status is "resolved" (manifest read), "exists" (already stored),
	// "pulling" or "extracted".
	Status string `json:"status"`
	// Current and Total are bytes read so far and in all (-1: unknown).
	Current int64 `json:"current,omitempty"`
	Total   int64 `json:"total,omitempty"`
}

// ImageList is the body of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
}

// Version is the body of GET /v1/version.
type Version struct {
	Version   string   `json:"version"`
	GoVersion string   `json:"go_version"`
	Runtimes  []string `json:"runtimes"`
	Cgroup    string   `json:"cgroup"` // "v1", "v2" or "hybrid"
}

// Error is the body of every error response.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is a stable machine code plus a human message.
type ErrorBody struct {
	// Code is one of: invalid_argument, not_found, already_exists,
	// failed_precondition, unavailable, unauthorized, resource_exhausted,
	// deadline_exceeded, not_implemented, internal.
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Info is the body of GET /v1/info: what the daemon runs on, how it is set
// up and what it holds (docker info).
type Info struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	// OS, Arch and Kernel describe the host ("linux", "amd64", uname -r).
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	Kernel string `json:"kernel"`
	// CPUs and MemoryBytes are the host's.
	CPUs        int   `json:"cpus"`
	MemoryBytes int64 `json:"memory_bytes"`
	// Root holds the daemon's state; RunDir its run-time state.
	Root   string `json:"root"`
	RunDir string `json:"run_dir"`
	// DefaultImage serves requests that name no image; DefaultTier (the
	// daemon's default_tier) and DefaultRuntime (that tier's default)
	// requests that name neither a tier nor a runtime.
	DefaultImage   string     `json:"default_image"`
	DefaultTier    string     `json:"default_tier"`
	DefaultRuntime string     `json:"default_runtime"`
	Cgroup         CgroupInfo `json:"cgroup"`
	// Runtimes are the configured runtimes, available or not.
	Runtimes []RuntimeInfo `json:"runtimes"`
	// Tiers are the isolation tiers this build knows, available on this
	// host or not.
	Tiers   []TierInfo  `json:"tiers"`
	Storage StorageInfo `json:"storage"`
	// Sandboxes counts the sandboxes (not the warm pools' ready ones).
	Sandboxes SandboxCounts `json:"sandboxes"`
	// Images counts the images, snapshots not included.
	Images    int        `json:"images"`
	Snapshots int        `json:"snapshots"`
	Pools     PoolCounts `json:"pools"`
}

// CgroupInfo is how sandboxes' cgroups are laid out.
type CgroupInfo struct {
	// Version is "v2" (unified), "v1" or "hybrid" (v1 with a cgroup2
	// mount at unified/).
	Version string `json:"version"`
	// Driver is "cgroupfs": the runtime writes the cgroup files itself.
	Driver string `json:"driver"`
	// Parent is the cgroup under which each sandbox gets its own,
	// "/<parent>/<id>".
	Parent string `json:"parent"`
}

// RuntimeInfo is one configured runtime. A runtime that is not available
// is never used in another one's place; Reason says why it is not.
type RuntimeInfo struct {
	Name      string `json:"name"`
	Path      string `json:"path,omitempty"`
	Version   string `json:"version,omitempty"`
	Available bool   `json:"available"`
	// Status is "ok"; "unsafe" (available although its version has known
	// vulnerabilities, because allow_unsafe_runtimes names it); "refused"
	// (its version has known vulnerabilities, or cannot be told); or
	// "not_found" (no binary).
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Default bool   `json:"default,omitempty"`
	// UserNS is whether new boxes of this runtime get a user namespace
	// (box root is an unprivileged host uid); UserNSReason says why not
	// when the daemon's userns setting is not "off".
	UserNS       bool   `json:"userns"`
	UserNSReason string `json:"userns_reason,omitempty"`
}

// UserNS is the host id range of a box's user namespace.
type UserNS struct {
	HostID uint32 `json:"host_id"`
	Size   uint32 `json:"size"`
}

// TierInfo is one isolation tier: which runtimes implement it and
// whether it is available on this host. A tier that is not available is
// never replaced by another one; Missing says what to install.
type TierInfo struct {
	Name string `json:"name"`
	// Runtimes are the tier's configured runtimes (see Info.Runtimes);
	// DefaultRuntime is the one a request naming only the tier gets.
	Runtimes       []string `json:"runtimes"`
	DefaultRuntime string   `json:"default_runtime,omitempty"`
	Available      bool     `json:"available"`
	// Missing says why the tier is not available and what to install.
	Missing string `json:"missing,omitempty"`
	// Default is set on the default tier (the daemon's default_tier).
	Default bool `json:"default,omitempty"`
}

// RuntimeInfo.Status values.
const (
	RuntimeOK       = "ok"
	RuntimeUnsafe   = "unsafe"
	RuntimeRefused  = "refused"
	RuntimeNotFound = "not_found"
)

// StorageInfo is where images and sandboxes' disks live.
type StorageInfo struct {
	// Driver is the layer store: "overlay".
	Driver string `json:"driver"`
	// Dir is the layer store's directory.
	Dir string `json:"dir"`
	// DiskDir holds the sandboxes' disk images: Dir, or the disk volume's
	// mount point.
	DiskDir string `json:"disk_dir"`
	// Reflink is whether disks are copied by reflink (forks and snapshots
	// in constant time) rather than by a sparse copy.
	Reflink bool `json:"reflink"`
	// TotalBytes and FreeBytes are those of Dir's file system.
	TotalBytes int64 `json:"total_bytes"`
	FreeBytes  int64 `json:"free_bytes"`
	// DiskVolume is set when disks live on the disk volume.
	DiskVolume *DiskVolumeInfo `json:"disk_volume,omitempty"`
}

// DiskVolumeInfo is the loop-mounted XFS volume that holds the sandboxes'
// disk images when the root's file system cannot reflink.
type DiskVolumeInfo struct {
	// Image is the volume's backing file; Device its loop device.
	Image  string `json:"image,omitempty"`
	Device string `json:"device,omitempty"`
	// TotalBytes and FreeBytes are those of the volume's file system;
	// AllocatedBytes is what its image takes on the host's disk.
	TotalBytes     int64 `json:"total_bytes"`
	FreeBytes      int64 `json:"free_bytes"`
	AllocatedBytes int64 `json:"allocated_bytes"`
}

// SandboxCounts counts sandboxes, by state.
type SandboxCounts struct {
	Total   int            `json:"total"`
	ByState map[string]int `json:"by_state"`
}

// PoolCounts counts the warm pools and their sandboxes.
type PoolCounts struct {
	Pools int `json:"pools"`
	// Ready is how many sandboxes wait to be handed out; Size how many
	// the pools keep.
	Ready int `json:"ready"`
	Size  int `json:"size"`
}

// DiskUsage is the body of GET /v1/system/df (docker system df): the disk
// space of each kind of thing the daemon keeps, and what removing the
// unused ones would give back.
type DiskUsage struct {
	// Summary has one row per type: images, build_cache, layers,
	// sandboxes, snapshots, pools, disk_cache, volumes.
	Summary   []DiskUsageRow     `json:"summary"`
	Images    []ImageDiskUsage   `json:"images"`
	Sandboxes []SandboxDiskUsage `json:"sandboxes"`
	Snapshots []ImageDiskUsage   `json:"snapshots"`
}

// DiskUsageRow is the disk use of one type of thing. Sizes are the bytes
// allocated on disk; layers shared by several images count once.
type DiskUsageRow struct {
	Type string `json:"type"`
	// Total is how many there are; Active how many are in use by a
	// sandbox (images, snapshots, layers) or running (sandboxes).
	Total            int   `json:"total"`
	Active           int   `json:"active"`
	SizeBytes        int64 `json:"size_bytes"`
	ReclaimableBytes int64 `json:"reclaimable_bytes"`
}

// ImageDiskUsage is the disk use of one image or snapshot.
type ImageDiskUsage struct {
	Name string `json:"name"`
	// SizeBytes is the image's layers (and for a snapshot its saved disk
	// and memory state); SharedBytes the part of its layers other images,
	// snapshots or the build cache use too; UniqueBytes the rest, which
	// removing the image frees.
	SizeBytes   int64 `json:"size_bytes"`
	SharedBytes int64 `json:"shared_bytes"`
	UniqueBytes int64 `json:"unique_bytes"`
	// Sandboxes counts the sandboxes made from it.
	Sandboxes int  `json:"sandboxes"`
	Builtin   bool `json:"builtin,omitempty"`
}

// SandboxDiskUsage is the disk use of one sandbox: its writable layer's disk
// image (allocated bytes; a fork's or snapshot's reflinked copy shares
// extents with its source, counted in each) and saved memory state.
type SandboxDiskUsage struct {
	ID          string `json:"id"`
	Name        string `json:"name,omitempty"`
	Image       string `json:"image"`
	State       string `json:"state"`
	DiskBytes   int64  `json:"disk_bytes"`
	MemoryBytes int64  `json:"memory_bytes,omitempty"`
	// LimitBytes is the disk's size limit.
	LimitBytes int64 `json:"limit_bytes"`
}

// StatsSample is one sample of a sandbox's resource use, taken by the
// daemon's sampler every interval_seconds. Limits are 0 (left out) where
// there is none.
type StatsSample struct {
	Time time.Time `json:"time"`
	// CPUPercent is the CPU use since the previous sample in percent of
	// one core (docker stats' figure: 200 is two cores busy); CPULimit
	// is the sandbox's quota in cores.
	CPUPercent float64 `json:"cpu_percent"`
	CPUNanos   uint64  `json:"cpu_ns"`
	CPULimit   float64 `json:"cpu_limit,omitempty"`
	// MemoryBytes is the working set (usage less the inactive page
	// cache, as docker stats shows); MemoryCacheBytes the page cache.
	MemoryBytes      uint64 `json:"memory_bytes"`
	MemoryCacheBytes uint64 `json:"memory_cache_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes,omitempty"`
	Pids             uint64 `json:"pids"`
	PidsLimit        uint64 `json:"pids_limit,omitempty"`
	OOMKills         uint64 `json:"oom_kills"`
	DiskBytes        uint64 `json:"disk_bytes"`
	DiskLimitBytes   uint64 `json:"disk_limit_bytes,omitempty"`
	// NetInBytes and NetOutBytes went through the egress proxy since the
	// sandbox's network was attached (its start, resume or the daemon's
	// start).
	NetInBytes  uint64 `json:"net_in_bytes"`
	NetOutBytes uint64 `json:"net_out_bytes"`
}

// SandboxStats is a sandbox's last sample and its history
// (GET /v1/sandboxes/{id}/stats).
type SandboxStats struct {
	ID    string `json:"id"`
	Name  string `json:"name,omitempty"`
	State string `json:"state"`
	// IntervalSeconds is the time between two samples.
	IntervalSeconds float64 `json:"interval_seconds"`
	// Current is the last sample; nil for a sandbox not sampled yet or
	// never running.
	Current *StatsSample `json:"current,omitempty"`
	// History is the kept samples at or after ?since=, oldest first
	// (Current is the last one).
	History []StatsSample `json:"history"`
}

// StatsList is the last sample of every sandbox (GET /v1/stats).
type StatsList struct {
	Sandboxes []SandboxStats `json:"sandboxes"`
}
