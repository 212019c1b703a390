package daemon

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/pelletier/go-toml/v2"

	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/httpapi"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/proclog"
	"github.com/corral-sandbox/corral/internal/runtime/oci"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
	"github.com/corral-sandbox/corral/internal/stats"
	"github.com/corral-sandbox/corral/internal/userns"
)

// Values of Config.UserNS.
const (
	UserNSAuto = "auto"
	UserNSOn   = "on"
	UserNSOff  = "off"
)

// DefaultConfigPath is where corral serve looks for its configuration.
const DefaultConfigPath = "/etc/corral/config.toml"

// Config is the TOML configuration of corral serve (version = 1).
//
// To add a field: add it here with a doc comment and a toml tag, give it a
// default in DefaultConfig, check it in Validate, use it in New, and (for a
// flag) let internal/cli set it.
type Config struct {
	// Version is the configuration format; only 1 exists.
	Version int `toml:"version"`
	// Root holds the daemon's state: meta.db, images and layers.
	Root string `toml:"root"`
	// RunDir holds run-time state: the API socket, runtime state and one
	// directory per sandbox (its agent socket). It is on tmpfs, so a host
	// reboot clears it.
	RunDir string `toml:"run_dir"`
	// RunDirTmpfs lets the daemon mount a tmpfs on RunDir when RunDir is
	// on a disk file system and empty (a host whose /run is no tmpfs);
	// see mountRunDir.
	RunDirTmpfs bool `toml:"run_dir_tmpfs"`
	// Socket is the API's unix socket (mode 0660, no authentication).
	Socket string `toml:"socket"`
	// Listen is an optional TCP address ("127.0.0.1:7070") of the API, where
	// every request needs the bearer token of TokenFile.
	Listen string `toml:"listen"`
	// TokenFile holds the bearer token for Listen; required when Listen is
	// set.
	TokenFile string `toml:"token_file"`
	// TLSCertFile and TLSKeyFile (PEM), when set, make Listen serve HTTPS
	// (HTTP/1.1 and HTTP/2) with that certificate, read again when the
	// files change; both or neither, and only with Listen.
	TLSCertFile string `toml:"tls_cert_file"`
	TLSKeyFile  string `toml:"tls_key_file"`
	// E2B configures E2B's API ([e2b]): its domain mode.
	E2B E2B `toml:"e2b"`
	// DefaultRuntime is the deprecated alias of runtime.container.default;
	// set, it replaces that key.
	DefaultRuntime string `toml:"default_runtime"`
	// Runtimes is the deprecated alias of runtime.container.runtimes; set,
	// it replaces that key.
	Runtimes []string `toml:"runtimes"`
	// DefaultTier is the isolation tier of requests that name neither a
	// tier nor a runtime ("container" or "gvisor"): they get that tier's
	// default runtime. The daemon does not start when the tier is not
	// available on the host; it never falls back to another tier.
	DefaultTier string `toml:"default_tier"`
	// Runtime holds one table per isolation tier: [runtime.container] and
	// [runtime.gvisor].
	Runtime RuntimeTables `toml:"runtime"`
	// RuntimePaths are the binaries of runtimes, by name, where they are
	// not the name in the daemon's PATH: runc = "/opt/runc/1.3.3/runc".
	RuntimePaths map[string]string `toml:"runtime_paths"`
	// AllowUnsafeRuntimes names runtimes to offer even when their version
	// has known vulnerabilities (oci.Advisories) or cannot be told: the
	// daemon logs a warning at start and GET /v1/info reports them as
	// "unsafe". Without it such a runtime is refused, and the daemon does
	// not start when it is the default one.
	AllowUnsafeRuntimes []string `toml:"allow_unsafe_runtimes"`
	// UserNS says whether boxes of the container tier get a user namespace
	// (their root is an unprivileged host uid of a range of their own):
	// "auto" (yes where the kernel and the runtime can, else a loud
	// warning at start and "userns": false in GET /v1/info), "on"
	// (the daemon does not start without it, and runtimes that cannot are
	// not offered) or "off". Default "auto".
	UserNS string `toml:"userns"`
	// UserNSPool is the host uids and gids, "START:COUNT", that boxes'
	// ranges of userns.Size ids come from (default userns.DefaultPool).
	UserNSPool string `toml:"userns_pool"`
	// CgroupParent is the cgroup under which each sandbox gets its own.
	CgroupParent string `toml:"cgroup_parent"`
	// DefaultImage is the image of requests that name none.
	DefaultImage string `toml:"default_image"`
	// Resources are the default limits of a sandbox.
	Resources Resources `toml:"resources"`
	// AgentBinary is the static corral binary run as each sandbox's PID 1;
	// empty means this executable.
	AgentBinary string `toml:"agent_binary"`
	// AgentIdleExit is how long a sandbox's agent stays without requests,
	// running commands or watchers before it exits, leaving only the tiny
	// PID 1 (corral-init) in an idle box; the next request starts a new
	// agent (a few ms). "0" keeps agents for the box's whole life. Only a
	// corral built by scripts/build.sh has corral-init; without it the
	// agent is PID 1 and never exits.
	AgentIdleExit string `toml:"agent_idle_exit"`
	// AgentTimeout bounds each wait of the daemon on a box's agent (a
	// connection, an answer, the next bytes of a stream) before it looks
	// at the agent: a stopped agent is resumed and the request fails with
	// "agent unresponsive"; one that answers a health check within
	// AgentTimeout is merely slow and the wait goes on
	// (docs/operations.md, "Unresponsive agents").
	AgentTimeout string `toml:"agent_timeout"`
	// AgentExecGrace is how long past an exec's own timeout the daemon
	// waits for the agent to end the command before it ends the call with
	// "agent unresponsive".
	AgentExecGrace string `toml:"agent_exec_grace"`
	// IdleCPUPercent: a box whose CPU use is above this percentage of one
	// CPU near the end of its --idle-timeout is busy, not idle (0: CPU use
	// does not count).
	IdleCPUPercent float64 `toml:"idle_cpu_percent"`
	// IdleProcesses: a box running a command started through its agent
	// (exec -d) is busy, not idle, for its --idle-timeout.
	IdleProcesses bool `toml:"idle_processes"`
	// OutputBuffer is how many bytes of each command's output a box's
	// agent keeps for corral logs, attach and trajectory --with-output (a
	// ring: the oldest output goes); 0 keeps none. It is in the box's
	// memory, counted against its limit.
	OutputBuffer int `toml:"output_buffer"`
	// DiskPoolSize is how many formatted writable-layer disks are kept
	// ready (default overlay.DefaultPoolSize; 0 also means that default;
	// negative: none).
	DiskPoolSize int `toml:"disk_pool_size"`
	// NetNSPoolSize is how many network namespaces (each with its user
	// namespace and id range when boxes get one, its loopback and the
	// agent's socket) the default runtime keeps made ahead, so that a
	// create takes one instead of making it (0: none).
	NetNSPoolSize int `toml:"netns_pool_size"`
	// DiskVolume says where writable-layer disks live: "auto" (empty: on a
	// reflink-capable XFS volume loop-mounted on <root>/overlay/disks when
	// the root's file system cannot reflink), "off", or the path of that
	// volume's image file; see overlay.Config.DiskVolume.
	DiskVolume string `toml:"disk_volume"`
	// DiskFlush makes a sandbox's fsync reach the host's disk; off, disks
	// are mounted nobarrier (see overlay.Config.DiskFlush).
	DiskFlush bool `toml:"disk_flush"`
	// DiskDirectIO attaches sandboxes' disks to their loop devices with
	// direct I/O (default false; see overlay.Config.DiskDirectIO).
	DiskDirectIO bool `toml:"disk_direct_io"`
	// DiskVolumeDirtyBytes caps the dirty host page cache of the disk
	// images on the disk volume (default 32 MiB, 0 = the kernel's limits;
	// see overlay.Config.DiskVolumeDirtyBytes).
	DiskVolumeDirtyBytes int64 `toml:"disk_volume_dirty_bytes"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// DebianMirror is the mirror `corral image bootstrap` uses; empty means
	// the first Debian archive in the host's apt sources.
	DebianMirror string `toml:"debian_mirror"`
	// Registry configures image pulls. Credentials come from the docker
	// config file of the daemon's user ($DOCKER_CONFIG/config.json, else
	// ~/.docker/config.json), as `docker login` writes it.
	Registry Registry `toml:"registry"`
	// Network configures boxes' egress: resolver, private ranges,
	// default limits.
	Network Network `toml:"network"`
	// Tunnels configures `corral port expose`.
	Tunnels Tunnels `toml:"tunnels"`
	// Limits bound the API's clients and what sandboxes hold together.
	Limits Limits `toml:"limits"`
	// Pools are warm pools kept from the start ([[pools]] tables); pools set
	// through the API are kept across restarts too.
	Pools []Pool `toml:"pools"`
	// Metrics configures the resource sampler (corral stats) and GET
	// /metrics.
	Metrics Metrics `toml:"metrics"`
	// Alerts configures the alerts on sandboxes' resource use.
	Alerts Alerts `toml:"alerts"`
	// Audit configures the audit trail (corral events, corral
	// trajectory).
	Audit Audit `toml:"audit"`
	// OutputLog keeps managed processes' output in log files on the
	// host (corral logs).
	OutputLog OutputLog `toml:"output_log"`
}

// OutputLog configures the log files of managed processes' output
// (docs/processes.md): the daemon copies each command's new output from
// its box's agent into <root>/sandboxes/<id>/logs, so that corral logs
// still shows the start once the agent's ring buffer (output_buffer)
// wrapped.
type OutputLog struct {
	// Enabled copies the output of every box's commands.
	Enabled bool `toml:"enabled"`
	// MaxBytesPerProcess bounds one command's files: the file is rotated
	// at half of it, keeping one .1 file (the newest output is kept).
	MaxBytesPerProcess int64 `toml:"max_bytes_per_process"`
	// MaxBytesPerBox bounds all files of a box; output over it is
	// dropped (counted).
	MaxBytesPerBox int64 `toml:"max_bytes_per_box"`
}

// Audit configures the audit trail (docs/observability.md).
type Audit struct {
	// Enabled records the events of every box.
	Enabled bool `toml:"enabled"`
	// MaxBytesPerBox bounds one box's trail on disk; the oldest events
	// go first.
	MaxBytesPerBox int64 `toml:"max_bytes_per_box"`
	// Retention is how long a removed box's trail is kept ("24h").
	Retention string `toml:"retention"`
}

// retention returns Retention parsed, or -1 when it is invalid.
func (a Audit) retention() time.Duration {
	d, err := time.ParseDuration(a.Retention)
	if err != nil || d <= 0 {
		return -1
	}
	return d
}

// Metrics configures the resource sampler and GET /metrics
// (docs/observability.md).
type Metrics struct {
	// Interval is the time between two samples of a sandbox ("5s").
	Interval string `toml:"interval"`
	// History is how many samples are kept per sandbox: memory is about
	// history x stats.SampleSize bytes per sandbox.
	History int `toml:"history"`
	// PerSandbox adds per-sandbox gauges to /metrics (a series per
	// sandbox and resource: off by default).
	PerSandbox bool `toml:"per_sandbox"`
}

// Alerts configures the alerts on sandboxes' resource use
// (docs/observability.md). Alerts are always logged.
type Alerts struct {
	// Webhook is a URL that receives each alert as a JSON POST; empty:
	// none.
	Webhook string `toml:"webhook"`
	// WebhookTimeout bounds each POST ("5s").
	WebhookTimeout string `toml:"webhook_timeout"`
}

// interval returns Interval parsed, or -1 when it is invalid.
func (m Metrics) interval() time.Duration {
	d, err := time.ParseDuration(m.Interval)
	if err != nil || d < stats.MinInterval {
		return -1
	}
	return d
}

// webhookTimeout returns WebhookTimeout parsed, or -1 when it is invalid.
func (a Alerts) webhookTimeout() time.Duration {
	d, err := time.ParseDuration(a.WebhookTimeout)
	if err != nil || d <= 0 {
		return -1
	}
	return d
}

// Limits bound the API's clients and what sandboxes hold together; 0 is
// no limit, the default of every key. A request past a limit gets 429
// resource_exhausted naming the key.
type Limits struct {
	// RequestsPerSecond is each client's sustained rate of API requests
	// (a token bucket; GET /health is not counted). A client is a uid on
	// the unix socket, a remote IP address (an IPv6 /64) on TCP. A
	// request past it gets a Retry-After header.
	RequestsPerSecond float64 `toml:"requests_per_second"`
	// RequestBurst is how many requests a client may send at once after a
	// quiet moment; 0 means max(1, requests_per_second).
	RequestBurst int `toml:"request_burst"`
	// MaxSandboxes bounds how many sandboxes exist (every state, warm
	// pools' included).
	MaxSandboxes int `toml:"max_sandboxes"`
	// CPUOvercommit bounds the sum of the sandboxes' resources.cpus to
	// this many times the host's CPUs.
	CPUOvercommit float64 `toml:"cpu_overcommit"`
	// MemoryOvercommit bounds the sum of their resources.memory_bytes to
	// this many times the host's memory.
	MemoryOvercommit float64 `toml:"memory_overcommit"`
}

// Registry configures image pulls.
type Registry struct {
	// Insecure allows plain HTTP to registries other than localhost
	// (which always may use it). For registries on a trusted network only.
	Insecure bool `toml:"insecure"`
}

// Resources are the default limits of a sandbox.
type Resources struct {
	// CPUs is the CPU quota in cores.
	CPUs float64 `toml:"cpus"`
	// MemoryBytes is the memory limit.
	MemoryBytes int64 `toml:"memory_bytes"`
	// DiskBytes is the size of the writable layer.
	DiskBytes int64 `toml:"disk_bytes"`
	// Pids is the maximum number of tasks.
	Pids int64 `toml:"pids"`
	// NoFile is the hard limit of open files of every process of a box
	// (RLIMIT_NOFILE; the soft one is the lower of it and 1024). A box
	// holds at most pids x nofile files. Not settable per box.
	NoFile uint64 `toml:"nofile"`
}

// DefaultIdleCPUPercent is idle_cpu_percent's default.
const DefaultIdleCPUPercent = 5

// DefaultAgentIdleExit is agent_idle_exit's default.
const DefaultAgentIdleExit = "30s"

// Defaults of agent_timeout and agent_exec_grace.
const (
	DefaultAgentTimeout   = "30s"
	DefaultAgentExecGrace = "10s"
)

// agentTimeouts returns AgentTimeout and AgentExecGrace parsed (the
// defaults when empty); an invalid one is -1.
func (c Config) agentTimeouts() httpapi.AgentTimeouts {
	parse := func(s, def string) time.Duration {
		d, err := time.ParseDuration(cmp.Or(s, def))
		if err != nil || d <= 0 {
			return -1
		}
		return d
	}
	return httpapi.AgentTimeouts{
		Wait:      parse(c.AgentTimeout, DefaultAgentTimeout),
		ExecGrace: parse(c.AgentExecGrace, DefaultAgentExecGrace),
	}
}

// outputBuffer returns Spec.OutputBuffer for OutputBuffer: the agent's
// default is left implicit (0), none is negative.
func (c Config) outputBuffer() int {
	switch c.OutputBuffer {
	case 0:
		return -1
	case sandbox.DefaultOutputBuffer:
		return 0
	}
	return c.OutputBuffer
}

// agentIdleExit returns AgentIdleExit parsed (the default when empty), or
// -1 when it is not a valid duration.
func (c Config) agentIdleExit() time.Duration {
	s := c.AgentIdleExit
	if s == "" {
		s = DefaultAgentIdleExit
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return -1
	}
	return d
}

// userNSMode is UserNS with its default.
func (c Config) userNSMode() string { return cmp.Or(c.UserNS, UserNSAuto) }

// userNSPool parses UserNSPool with its default.
func (c Config) userNSPool() (userns.Pool, error) {
	return userns.ParsePool("userns_pool", cmp.Or(c.UserNSPool, userns.DefaultPool))
}

// DefaultNetNSPoolSize is the default netns_pool_size.
const DefaultNetNSPoolSize = 4

// DefaultConfig returns the built-in defaults: every value is the one the
// daemon uses when the key is left out (docs/operations.md shows them, and
// internal/cli's TestDocsConfigSample compares the two).
func DefaultConfig() Config {
	return Config{
		Version:              1,
		Root:                 "/var/lib/corral",
		RunDir:               "/run/corral",
		RunDirTmpfs:          true,
		DiskPoolSize:         overlay.DefaultPoolSize,
		NetNSPoolSize:        DefaultNetNSPoolSize,
		DiskVolume:           overlay.DiskVolumeAuto,
		DiskVolumeDirtyBytes: overlay.DefaultVolumeDirtyBytes,
		Socket:               "/run/corral/corral.sock",
		DefaultTier:          sandbox.TierContainer,
		Runtime: RuntimeTables{
			Container: ContainerTier{Runtimes: []string{"crun", "runc"}, Default: "crun"},
			GVisor:    GVisorTier{Enabled: true, Platform: oci.DefaultRunscPlatform},
		},
		CgroupParent:   "corral",
		DefaultImage:   sandbox.DefaultImage,
		AgentIdleExit:  DefaultAgentIdleExit,
		AgentTimeout:   DefaultAgentTimeout,
		AgentExecGrace: DefaultAgentExecGrace,
		IdleCPUPercent: DefaultIdleCPUPercent,
		IdleProcesses:  true,
		OutputBuffer:   sandbox.DefaultOutputBuffer,
		UserNS:         UserNSAuto,
		UserNSPool:     userns.DefaultPool,
		Resources: Resources{
			CPUs:        sandbox.DefaultCPUs,
			MemoryBytes: sandbox.DefaultMemoryBytes,
			DiskBytes:   sandbox.DefaultDiskBytes,
			Pids:        sandbox.DefaultPids,
			NoFile:      oci.DefaultNoFile,
		},
		LogLevel:  "info",
		Network:   Network{ConnectionsPerMinute: network.DefaultConnectionsPerMinute},
		Metrics:   Metrics{Interval: stats.DefaultInterval.String(), History: stats.DefaultHistory},
		Alerts:    Alerts{WebhookTimeout: alerts.DefaultWebhookTimeout.String()},
		Audit:     Audit{Enabled: true, MaxBytesPerBox: audit.DefaultMaxBytes, Retention: "24h"},
		OutputLog: OutputLog{MaxBytesPerProcess: proclog.DefaultMaxBytesPerProcess, MaxBytesPerBox: proclog.DefaultMaxBytesPerBox},
	}
}

// LoadConfig reads path over DefaultConfig. A missing file at
// DefaultConfigPath (or an empty path) gives the defaults; a missing file
// elsewhere is an error. Unknown keys are errors.
func LoadConfig(path string) (Config, error) {
	cfg := DefaultConfig()
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && path == DefaultConfigPath {
			return cfg, nil
		}
		return cfg, fmt.Errorf("read config: %w", err)
	}
	cfg.Version = 0 // the file must say which format it is
	dec := toml.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		var strict *toml.StrictMissingError
		if errors.As(err, &strict) {
			return cfg, fmt.Errorf("config %s: unknown keys:\n%s: %w", path, strict.String(), errdefs.ErrInvalidArgument)
		}
		var de *toml.DecodeError
		if errors.As(err, &de) && len(de.Key()) > 0 {
			row, _ := de.Position()
			return cfg, fmt.Errorf("config %s: line %d: %s: %s: %w", path, row, strings.Join(de.Key(), "."), typeMismatch(de.Error()), errdefs.ErrInvalidArgument)
		}
		return cfg, fmt.Errorf("config %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// typeMismatchRE matches go-toml's message for a value of the wrong type,
// which names the Go field: "cannot decode TOML string into struct field
// daemon.Config.DiskFlush of type bool".
var typeMismatchRE = regexp.MustCompile(`cannot decode TOML (\w+) into .* of type (\S+)$`)

// typeMismatch says msg in the file's terms ("got a string, want bool") when it
// is go-toml's type mismatch, else returns it whole.
func typeMismatch(msg string) string {
	if m := typeMismatchRE.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("got a %s, want %s", m[1], m[2])
	}
	return strings.TrimPrefix(msg, "toml: ")
}

// Validate checks cfg.
func (c Config) Validate() error {
	c, err := c.normalize()
	if err != nil {
		return err
	}
	if err := c.Runtime.Container.Validate(); err != nil {
		return err
	}
	if err := c.Runtime.GVisor.Validate(); err != nil {
		return err
	}
	if err := c.validateDefaultTier(); err != nil {
		return err
	}
	runtimes := c.Runtime.Container.Runtimes
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case c.Version != 1:
		return bad("version = %d: only version = 1 is supported (set version = 1)", c.Version)
	case !filepath.IsAbs(c.Root):
		return bad("root %q must be an absolute path", c.Root)
	case !filepath.IsAbs(c.RunDir):
		return bad("run_dir %q must be an absolute path", c.RunDir)
	case !filepath.IsAbs(c.Socket):
		return bad("socket %q must be an absolute path", c.Socket)
	case c.Listen != "" && c.TokenFile == "":
		return bad("token_file is required when listen (%q) is set", c.Listen)
	case c.validateTLS() != nil:
		return c.validateTLS()
	case c.E2B.validate() != nil:
		return c.E2B.validate()
	case c.AgentBinary != "" && !filepath.IsAbs(c.AgentBinary):
		return bad("agent_binary %q must be an absolute path", c.AgentBinary)
	case c.agentIdleExit() < 0:
		return bad("agent_idle_exit %q must be a duration such as \"30s\", \"5m\" or \"0\" (never)", c.AgentIdleExit)
	case c.agentTimeouts().Wait < 0:
		return bad("agent_timeout %q must be a positive duration such as \"30s\" or \"2m\"", c.AgentTimeout)
	case c.agentTimeouts().ExecGrace < 0:
		return bad("agent_exec_grace %q must be a positive duration such as \"10s\"", c.AgentExecGrace)
	case c.OutputBuffer < 0 || c.OutputBuffer > sandbox.MaxOutputBuffer:
		return bad("output_buffer %d must be between 0 (keep no output) and %d bytes", c.OutputBuffer, sandbox.MaxOutputBuffer)
	case c.NetNSPoolSize < 0:
		return bad("netns_pool_size %d must be 0 (none) or a count of namespaces", c.NetNSPoolSize)
	case c.DiskVolumeDirtyBytes < 0:
		return bad("disk_volume_dirty_bytes %d must be 0 (the kernel's limits) or a size in bytes", c.DiskVolumeDirtyBytes)
	case !(c.Limits.RequestsPerSecond >= 0) || c.Limits.RequestBurst < 0 || c.Limits.MaxSandboxes < 0 ||
		!(c.Limits.CPUOvercommit >= 0) || !(c.Limits.MemoryOvercommit >= 0) || math.IsInf(c.Limits.RequestsPerSecond, 0) ||
		math.IsInf(c.Limits.CPUOvercommit, 0) || math.IsInf(c.Limits.MemoryOvercommit, 0):
		return bad("limits: requests_per_second, request_burst, max_sandboxes, cpu_overcommit and memory_overcommit must be 0 (no limit) or positive")
	case c.Resources.CPUs < 0 || c.Resources.MemoryBytes < 0 || c.Resources.DiskBytes < 0 || c.Resources.Pids < 0:
		return bad("resources must not be negative")
	case c.Resources.MemoryBytes != 0 && c.Resources.MemoryBytes < sandbox.MinMemoryBytes:
		return bad("resources.memory_bytes %d is below %d", c.Resources.MemoryBytes, sandbox.MinMemoryBytes)
	case c.Resources.DiskBytes != 0 && c.Resources.DiskBytes < sandbox.MinDiskBytes:
		return bad("resources.disk_bytes %d is below %d", c.Resources.DiskBytes, sandbox.MinDiskBytes)
	case c.Resources.Pids != 0 && c.Resources.Pids < sandbox.MinPids:
		return bad("resources.pids %d is below %d", c.Resources.Pids, sandbox.MinPids)
	case c.Resources.NoFile != 0 && c.Resources.NoFile < oci.MinNoFile:
		return bad("resources.nofile %d is below %d", c.Resources.NoFile, oci.MinNoFile)
	}
	if c.IdleCPUPercent < 0 || c.IdleCPUPercent > 100 {
		return bad("idle_cpu_percent %v must be between 0 (CPU use does not count) and 100", c.IdleCPUPercent)
	}
	if c.Metrics.interval() < 0 {
		return bad("metrics.interval %q must be a duration of at least %v such as \"5s\"", c.Metrics.Interval, stats.MinInterval)
	}
	if c.Metrics.History < 1 || c.Metrics.History > stats.MaxHistory {
		return bad("metrics.history %d must be between 1 and %d", c.Metrics.History, stats.MaxHistory)
	}
	if c.Alerts.Webhook != "" {
		if err := alerts.ValidateWebhookURL(c.Alerts.Webhook); err != nil {
			return err
		}
	}
	if c.Audit.MaxBytesPerBox < audit.MinMaxBytes {
		return bad("audit.max_bytes_per_box %d must be at least %d", c.Audit.MaxBytesPerBox, audit.MinMaxBytes)
	}
	if o := c.OutputLog; o.MaxBytesPerProcess < proclog.MinMaxBytes || o.MaxBytesPerBox < o.MaxBytesPerProcess {
		return bad("output_log.max_bytes_per_process %d must be at least %d and output_log.max_bytes_per_box %d at least as large", o.MaxBytesPerProcess, proclog.MinMaxBytes, o.MaxBytesPerBox)
	}
	if c.Audit.retention() < 0 {
		return bad("audit.retention %q must be a positive duration such as \"24h\"", c.Audit.Retention)
	}
	if c.Alerts.webhookTimeout() < 0 {
		return bad("alerts.webhook_timeout %q must be a positive duration such as \"5s\"", c.Alerts.WebhookTimeout)
	}
	for i, p := range c.Pools {
		if p.Image == "" || p.Size < 0 || p.Size > sandbox.MaxPoolSize {
			return bad("pools[%d]: image is required and size must be between 0 and %d", i, sandbox.MaxPoolSize)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.RuntimePaths)) {
		if !contains(runtimes, name) {
			return bad("runtime_paths.%s: %q is not in runtime.container.runtimes %v (runsc's binary is runtime.gvisor.path)", name, name, runtimes)
		}
		if p := c.RuntimePaths[name]; !filepath.IsAbs(p) {
			return bad("runtime_paths.%s %q must be an absolute path", name, p)
		}
	}
	for _, name := range c.AllowUnsafeRuntimes {
		if !contains(runtimes, name) && name != RunscName {
			return bad("allow_unsafe_runtimes: %q is not in runtime.container.runtimes %v nor %s", name, runtimes, RunscName)
		}
	}
	switch c.UserNS {
	case "", UserNSAuto, UserNSOn, UserNSOff:
	default:
		return bad("userns %q must be %q, %q or %q", c.UserNS, UserNSAuto, UserNSOn, UserNSOff)
	}
	if _, err := c.userNSPool(); err != nil {
		return err
	}
	if err := identifiers.Validate("default_image", c.DefaultImage); err != nil {
		return err
	}
	if err := identifiers.Validate("cgroup_parent", c.CgroupParent); err != nil {
		return err
	}
	if err := c.Network.validate(); err != nil {
		return err
	}
	if m := c.DebianMirror; m != "" && !strings.HasPrefix(m, "http://") && !strings.HasPrefix(m, "https://") && !strings.HasPrefix(m, "file:/") {
		return bad("debian_mirror %q must be an http://, https:// or file:/ URL", m)
	}
	if c.LogLevel != "" {
		switch c.LogLevel {
		case "debug", "info", "warn", "error":
		default:
			return bad("log_level %q must be debug, info, warn or error", c.LogLevel)
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// quota is the sandbox quota of l on a host with cpus CPUs and memory
// bytes of memory (0: unknown, no memory bound).
func (l Limits) quota(cpus int, memory int64) sandbox.Quota {
	return sandbox.Quota{
		Sandboxes:   l.MaxSandboxes,
		CPUs:        float64(cpus) * l.CPUOvercommit,
		MemoryBytes: int64(float64(memory) * l.MemoryOvercommit),
	}
}
