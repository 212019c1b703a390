package oci

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// AgentPath is where the agent binary is bind-mounted inside every sandbox.
const AgentPath = "/.corral/corral"

// InitPath is where corral-init, PID 1 of a box with an on-demand agent
// (sandbox.Spec.InitBinary), is bind-mounted.
const InitPath = "/.corral/init"

// AgentListenFD is the fd number of the agent's listening socket inside the
// sandbox: the runtime passes it with --preserve-fds 1, so it is the first fd
// after stdio.
const AgentListenFD = 3

// defaultPath is the PATH of the agent when spec.Env has none.
const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// capabilities is Docker's default set minus CAP_NET_RAW (raw sockets and
// packet crafting; boxes have no use for them) and CAP_MKNOD (the device
// cgroup denies new nodes anyway; FIFOs and sockets need no capability).
// There is no SYS_ADMIN, SYS_PTRACE, NET_ADMIN, SYS_MODULE or SYS_TIME.
var capabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_FSETID",
	"CAP_FOWNER",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETFCAP",
	"CAP_SETPCAP",
	"CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT",
	"CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// maskedPaths and readonlyPaths are runc's defaults (libcontainer/specconv
// Example), which Docker and containerd also use.
var (
	maskedPaths = []string{
		"/proc/acpi",
		"/proc/asound",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
)

// allowedDevices are the device nodes a box may use: the standard nodes the
// runtime creates in /dev, the pty multiplexer and the ptys.
func allowedDevices() []specs.LinuxDeviceCgroup {
	i := func(v int64) *int64 { return &v }
	d := []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
	for _, n := range [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}, {5, 1}, {5, 2}} {
		d = append(d, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i(n[0]), Minor: i(n[1]), Access: "rwm"})
	}
	return append(d, specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: i(136), Access: "rwm"}) // /dev/pts/*
}

// ociVersion is the runtime-spec version written in config.json. crun 1.8
// rejects versions it does not know (such as 1.3.0, the Go types' own), and
// every field used here exists since 1.0.2.
const ociVersion = "1.0.2"

// usernsAnnotation, in config.json, is the host range ("HOST:SIZE") of a
// box with a user namespace.
const usernsAnnotation = "io.corral.userns"

// specParams is what buildSpec needs besides the sandbox spec.
type specParams struct {
	id          string
	spec        *sandbox.Spec
	args        []string // PID 1 command line; nil means the agent
	cgroupsPath string
	// netns is the network namespace file the box joins; ignored with
	// spec.HostNetwork.
	netns string
	// userns is the user namespace file the box joins, made with the
	// network namespace netns and owning it (newUserNetNS), for a box
	// with spec.UserNS; empty for one whose runtime makes it (on the
	// host's network).
	userns  string
	seccomp bool
	swap    bool   // the host accounts swap: limit memory+swap
	nofile  uint64 // hard RLIMIT_NOFILE for the box
	// agentListen, when set, is the agent's --listen address instead of
	// the socket on fd 3, and the agent runs without corral-init (runsc).
	agentListen string
	// agentToken, when set, makes the agent read its connection token
	// from AgentTokenPath in the box: see Runtime.agentToken.
	agentToken bool
	// gvisorPids puts the box's pids limit in gVisor's own cgroup (the
	// agent's --pids-max) and RunscHostPids of it on the host's cgroup:
	// see RunscConfig.
	gvisorPids bool
}

// buildSpec returns the OCI runtime configuration of a sandbox. The bundle's
// root file system is the directory "rootfs" beside config.json.
//
// With spec.UserNS the box gets a user namespace mapping its ids 0 to
// Size-1 to its own host range; its root file system is idmapped by
// Runtime.prepare (mountRootfs), its binds by the runtime ("idmap").
// Without it box root is host root, and isolation relies, like Docker's
// default, on dropped capabilities, seccomp, no_new_privs, masked /proc
// paths, a read-only /sys, the device cgroup and the other namespaces.
func buildSpec(p specParams) (*specs.Spec, error) {
	s := p.spec
	args := p.args
	if len(args) == 0 {
		args = []string{AgentPath, "agent", "--listen-fd", fmt.Sprint(AgentListenFD)}
		if p.agentListen != "" {
			args = []string{AgentPath, "agent", "--listen", p.agentListen}
			if p.agentToken {
				args = append(args, "--token-file", AgentTokenPath)
			}
			if n := s.Resources.Pids; n > 0 && p.gvisorPids {
				args = append(args, "--pids-max", strconv.FormatInt(n, 10))
			}
		} else if s.InitBinary != "" {
			// corral-init is PID 1 and starts the agent on demand, with
			// the same listening socket as fd 3.
			init := []string{InitPath}
			if s.StartAgent {
				init = append(init, "--start")
			}
			args = append(init, append(args, "--under-init", "--idle-exit", s.AgentIdleExit.String())...)
			if s.Warm {
				args = append(args, "--warm")
			}
		}
		if s.OutputBuffer != 0 {
			args = append(args, "--output-buffer", strconv.Itoa(s.OutputBuffer))
		}
		// The sandbox's defaults for every command.
		if s.Workdir != "" {
			args = append(args, "--workdir", s.Workdir)
		}
		if s.User != "" {
			args = append(args, "--user", s.User)
		}
	}
	env := slices.Clone(s.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append(env, defaultPath)
	}
	cwd := s.Workdir
	if cwd == "" {
		cwd = "/"
	}
	if !path.IsAbs(cwd) {
		return nil, fmt.Errorf("workdir %q is not absolute: %w", cwd, errdefs.ErrInvalidArgument)
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = p.id
	}
	if s.AgentBinary == "" || !path.IsAbs(s.AgentBinary) {
		return nil, fmt.Errorf("agent binary %q is not an absolute path: %w", s.AgentBinary, errdefs.ErrInvalidArgument)
	}

	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
		{Destination: AgentPath, Type: "bind", Source: s.AgentBinary, Options: []string{"bind", "ro", "nosuid", "nodev"}},
	}
	if s.InitBinary != "" {
		if !path.IsAbs(s.InitBinary) {
			return nil, fmt.Errorf("init binary %q is not an absolute path: %w", s.InitBinary, errdefs.ErrInvalidArgument)
		}
		mounts = append(mounts, specs.Mount{Destination: InitPath, Type: "bind", Source: s.InitBinary, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	masked := slices.Clone(maskedPaths)
	for _, b := range s.Binds {
		if !path.IsAbs(b.Source) || !path.IsAbs(b.Target) || path.Clean(b.Target) == "/" {
			return nil, fmt.Errorf("bind %q -> %q: paths must be absolute and not /: %w", b.Source, b.Target, errdefs.ErrInvalidArgument)
		}
		for _, h := range b.Hide {
			if h == "" || h == "." || h == ".." || path.IsAbs(h) || path.Clean(h) != h || strings.HasPrefix(h, "../") {
				return nil, fmt.Errorf("bind %q -> %q: hidden path %q must be a clean path below the target: %w", b.Source, b.Target, h, errdefs.ErrInvalidArgument)
			}
			masked = append(masked, path.Join(b.Target, h))
		}
		rw := "rw"
		if b.Readonly {
			rw = "ro"
		}
		opts := []string{"rbind", rw, "nosuid", "nodev"}
		if s.UserNS != nil {
			// crun's extension: shifted by the box's own mapping, so
			// that host root's files are box root's.
			opts = append(opts, "idmap")
		}
		mounts = append(mounts, specs.Mount{Destination: path.Clean(b.Target), Type: "bind", Source: b.Source, Options: opts})
	}

	res := &specs.LinuxResources{Devices: allowedDevices()}
	if r := s.Resources; r.MemoryBytes > 0 {
		lim := r.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &lim}
		if p.swap {
			sw := lim
			res.Memory.Swap = &sw
		}
	}
	if c := s.Resources.CPUs; c > 0 {
		period := uint64(100000)
		quota := int64(c * float64(period))
		res.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if n := s.Resources.Pids; n > 0 {
		if p.gvisorPids {
			n = RunscHostPids(n)
		}
		res.Pids = &specs.LinuxPids{Limit: &n}
	}

	sp := &specs.Spec{
		Version: ociVersion,
		Root:    &specs.Root{Path: "rootfs"},
		Process: &specs.Process{
			Args: args,
			Env:  env,
			Cwd:  cwd,
			User: specs.User{UID: 0, GID: 0},
			Capabilities: &specs.LinuxCapabilities{
				Bounding:  capabilities,
				Effective: capabilities,
				Permitted: capabilities,
			},
			Rlimits: []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: p.nofile, Soft: min(p.nofile, softNoFile)}},
			// Set-user-ID programs stay inert unless the image opts in.
			NoNewPrivileges: !s.AllowPrivilegeEscalation,
		},
		Hostname: hostname,
		Mounts:   mounts,
		Linux: &specs.Linux{
			CgroupsPath: p.cgroupsPath,
			Resources:   res,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace},
				{Type: specs.NetworkNamespace, Path: p.netns},
				{Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace},
				{Type: specs.MountNamespace},
				{Type: specs.CgroupNamespace},
			},
			MaskedPaths:   masked,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if u := s.UserNS; u != nil {
		// The range, for what needs it without the sandbox's spec (a
		// restart in a new pair of namespaces, see Runtime.Start).
		sp.Annotations = map[string]string{usernsAnnotation: u.String()}
		if p.userns != "" && !s.HostNetwork {
			// Joined: the runtime must not map it again (the OCI spec
			// wants no mappings with a path).
			sp.Linux.Namespaces = append(sp.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace, Path: p.userns})
		} else {
			m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.HostID, Size: u.Size}}
			sp.Linux.Namespaces = append(sp.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
			sp.Linux.UIDMappings, sp.Linux.GIDMappings = m, m
		}
	}
	if s.HostNetwork {
		sp.Linux.Namespaces = slices.DeleteFunc(sp.Linux.Namespaces, func(n specs.LinuxNamespace) bool {
			return n.Type == specs.NetworkNamespace
		})
	}
	if p.seccomp {
		sp.Linux.Seccomp = seccompProfile()
	}
	return sp, nil
}
