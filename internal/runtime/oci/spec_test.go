package oci

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/userns"
)

func baseParams() specParams {
	return specParams{
		id: "sb1",
		spec: &sandbox.Spec{
			AgentBinary: "/usr/local/bin/corral",
			Resources:   sandbox.Resources{CPUs: 1.5, MemoryBytes: 1 << 30, Pids: 100},
			Binds:       []sandbox.Bind{{Source: "/usr", Target: "/usr", Readonly: true}},
		},
		cgroupsPath: "/corral/sb1",
		seccomp:     true,
		swap:        true,
		nofile:      1048576,
	}
}

// TestBuildSpecNoNewPrivileges: every box gets no_new_privs but one whose
// image allows privilege escalation.
func TestBuildSpecNoNewPrivileges(t *testing.T) {
	for _, allow := range []bool{false, true} {
		p := baseParams()
		p.spec.AllowPrivilegeEscalation = allow
		s, err := buildSpec(p)
		if err != nil {
			t.Fatalf("buildSpec() = %v", err)
		}
		if s.Process.NoNewPrivileges == allow {
			t.Errorf("buildSpec(AllowPrivilegeEscalation %v).Process.NoNewPrivileges = %v; want %v", allow, s.Process.NoNewPrivileges, !allow)
		}
	}
}

func TestBuildSpec(t *testing.T) {
	s, err := buildSpec(baseParams())
	if err != nil {
		t.Fatalf("buildSpec() = %v", err)
	}
	if want := []string{AgentPath, "agent", "--listen-fd", "3"}; !slices.Equal(s.Process.Args, want) {
		t.Errorf("Process.Args = %q; want %q", s.Process.Args, want)
	}
	if s.Process.Cwd != "/" || s.Hostname != "sb1" || !s.Process.NoNewPrivileges {
		t.Errorf("Cwd, Hostname, NoNewPrivileges = %q, %q, %v; want /, sb1, true", s.Process.Cwd, s.Hostname, s.Process.NoNewPrivileges)
	}
	if !slices.ContainsFunc(s.Process.Env, func(e string) bool { return e == defaultPath }) {
		t.Errorf("Process.Env = %q; want a default PATH", s.Process.Env)
	}
	for _, c := range []string{"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_MKNOD", "CAP_SYS_MODULE"} {
		caps := s.Process.Capabilities
		if slices.Contains(caps.Bounding, c) || slices.Contains(caps.Effective, c) || slices.Contains(caps.Permitted, c) {
			t.Errorf("capabilities contain %s; want it dropped", c)
		}
	}
	if len(s.Process.Capabilities.Ambient) != 0 {
		t.Errorf("Ambient = %q; want empty", s.Process.Capabilities.Ambient)
	}
	var nsTypes []specs.LinuxNamespaceType
	for _, n := range s.Linux.Namespaces {
		nsTypes = append(nsTypes, n.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.NetworkNamespace, specs.MountNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.CgroupNamespace} {
		if !slices.Contains(nsTypes, want) {
			t.Errorf("namespaces %v lack %s", nsTypes, want)
		}
	}
	if slices.Contains(nsTypes, specs.UserNamespace) {
		t.Errorf("namespaces %v contain a user namespace; want none in this version", nsTypes)
	}
	res := s.Linux.Resources
	if *res.Memory.Limit != 1<<30 || *res.Memory.Swap != 1<<30 {
		t.Errorf("memory limit, swap = %d, %d; want %d, %d", *res.Memory.Limit, *res.Memory.Swap, 1<<30, 1<<30)
	}
	if *res.CPU.Quota != 150000 || *res.CPU.Period != 100000 {
		t.Errorf("cpu quota/period = %d/%d; want 150000/100000", *res.CPU.Quota, *res.CPU.Period)
	}
	if *res.Pids.Limit != 100 {
		t.Errorf("pids limit = %d; want 100", *res.Pids.Limit)
	}
	if d := res.Devices[0]; d.Allow || d.Access != "rwm" || d.Type != "" {
		t.Errorf("first device rule = %+v; want deny all", d)
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActAllow {
		t.Errorf("Seccomp = %+v; want the default profile", s.Linux.Seccomp)
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Errorf("MaskedPaths, ReadonlyPaths = %q, %q; want runc's defaults", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	mounts := map[string]specs.Mount{}
	for _, m := range s.Mounts {
		mounts[m.Destination] = m
	}
	for dst, opt := range map[string]string{"/usr": "ro", AgentPath: "ro", "/sys": "ro", "/sys/fs/cgroup": "ro", "/dev/pts": "newinstance"} {
		if m, ok := mounts[dst]; !ok || !slices.Contains(m.Options, opt) {
			t.Errorf("mount %s = %+v; want option %q", dst, m, opt)
		}
	}
	if m := mounts["/usr"]; !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
		t.Errorf("bind /usr options = %q; want nosuid and nodev", m.Options)
	}
}

func TestBuildSpecVariants(t *testing.T) {
	tests := []struct {
		name  string
		tweak func(p *specParams)
		check func(s *specs.Spec) bool
	}{
		{"no swap accounting", func(p *specParams) { p.swap = false }, func(s *specs.Spec) bool {
			return s.Linux.Resources.Memory.Swap == nil && *s.Linux.Resources.Memory.Limit == 1<<30
		}},
		{"seccomp off", func(p *specParams) { p.seccomp = false }, func(s *specs.Spec) bool { return s.Linux.Seccomp == nil }},
		{"process args", func(p *specParams) { p.args = []string{"/bin/sleep", "1"} }, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{"/bin/sleep", "1"})
		}},
		{"env PATH kept", func(p *specParams) { p.spec.Env = []string{"PATH=/x"} }, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Env, []string{"PATH=/x"})
		}},
		{"workdir and hostname", func(p *specParams) { p.spec.Workdir, p.spec.Hostname = "/work", "h" }, func(s *specs.Spec) bool {
			return s.Process.Cwd == "/work" && s.Hostname == "h"
		}},
		{"rw bind", func(p *specParams) { p.spec.Binds[0].Readonly = false }, func(s *specs.Spec) bool {
			return slices.Contains(s.Mounts[len(s.Mounts)-1].Options, "rw")
		}},
		{"on-demand agent", func(p *specParams) {
			p.spec.InitBinary, p.spec.AgentIdleExit, p.spec.User = "/var/lib/corral/agent/corral-init-x", 30*time.Second, "app"
		}, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{InitPath, AgentPath, "agent", "--listen-fd", "3", "--under-init", "--idle-exit", "30s", "--user", "app"}) &&
				slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool {
					return m.Destination == InitPath && m.Source == "/var/lib/corral/agent/corral-init-x" && slices.Contains(m.Options, "ro")
				})
		}},
		{"output buffer", func(p *specParams) {
			p.spec.InitBinary, p.spec.OutputBuffer = "/i", 4096
		}, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{InitPath, AgentPath, "agent", "--listen-fd", "3", "--under-init", "--idle-exit", "0s", "--output-buffer", "4096"})
		}},
		{"no output buffer", func(p *specParams) { p.spec.OutputBuffer = -1 }, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{AgentPath, "agent", "--listen-fd", "3", "--output-buffer", "-1"})
		}},
		{"on-demand agent of a pool box", func(p *specParams) {
			p.spec.InitBinary, p.spec.Warm = "/i", true
		}, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{InitPath, AgentPath, "agent", "--listen-fd", "3", "--under-init", "--idle-exit", "0s", "--warm"})
		}},
		{"on-demand agent started at once", func(p *specParams) {
			p.spec.InitBinary, p.spec.StartAgent = "/i", true
		}, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{InitPath, "--start", AgentPath, "agent", "--listen-fd", "3", "--under-init", "--idle-exit", "0s"})
		}},
		{"nofile above the soft limit", func(p *specParams) { p.nofile = 4096 }, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Rlimits, []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 4096, Soft: 1024}})
		}},
		{"nofile below the soft limit", func(p *specParams) { p.nofile = 100 }, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Rlimits, []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: 100, Soft: 100}})
		}},
		{"hidden paths of a bind", func(p *specParams) { p.spec.Binds[0].Hide = []string{"etc", "local/etc"} }, func(s *specs.Spec) bool {
			return slices.Equal(s.Linux.MaskedPaths, append(slices.Clone(maskedPaths), "/usr/etc", "/usr/local/etc")) &&
				len(maskedPaths) > 0 && maskedPaths[len(maskedPaths)-1] != "/usr/local/etc"
		}},
		{"start ignored without init", func(p *specParams) { p.spec.StartAgent = true }, func(s *specs.Spec) bool {
			return slices.Equal(s.Process.Args, []string{AgentPath, "agent", "--listen-fd", "3"})
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := baseParams()
			tc.tweak(&p)
			s, err := buildSpec(p)
			if err != nil {
				t.Fatalf("buildSpec(%s) = %v", tc.name, err)
			}
			if !tc.check(s) {
				t.Errorf("buildSpec(%s) = %+v; check failed", tc.name, s.Process)
			}
		})
	}
}

func TestBuildSpecInvalid(t *testing.T) {
	tests := []struct {
		name  string
		tweak func(p *specParams)
	}{
		{"relative workdir", func(p *specParams) { p.spec.Workdir = "work" }},
		{"no agent", func(p *specParams) { p.spec.AgentBinary = "" }},
		{"relative agent", func(p *specParams) { p.spec.AgentBinary = "corral" }},
		{"relative init", func(p *specParams) { p.spec.InitBinary = "corral-init" }},
		{"bind on root", func(p *specParams) { p.spec.Binds[0].Target = "/" }},
		{"relative bind", func(p *specParams) { p.spec.Binds[0].Source = "usr" }},
		{"hidden path absolute", func(p *specParams) { p.spec.Binds[0].Hide = []string{"/etc"} }},
		{"hidden path outside", func(p *specParams) { p.spec.Binds[0].Hide = []string{"../etc"} }},
		{"hidden path unclean", func(p *specParams) { p.spec.Binds[0].Hide = []string{"local//etc"} }},
		{"hidden path the whole bind", func(p *specParams) { p.spec.Binds[0].Hide = []string{"."} }},
		{"hidden path empty", func(p *specParams) { p.spec.Binds[0].Hide = []string{""} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := baseParams()
			tc.tweak(&p)
			if _, err := buildSpec(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("buildSpec(%s) = %v; want ErrInvalidArgument", tc.name, err)
			}
		})
	}
}

func TestSeccompProfile(t *testing.T) {
	p := seccompProfile()
	var denied []string
	for _, s := range p.Syscalls {
		if s.Action == specs.ActErrno && len(s.Args) == 0 {
			denied = append(denied, s.Names...)
		}
	}
	for _, c := range []string{"keyctl", "bpf", "mount", "unshare", "setns", "ptrace", "userfaultfd", "kexec_load", "init_module", "open_by_handle_at", "clone3"} {
		if !slices.Contains(denied, c) {
			t.Errorf("seccomp profile allows %s; want it denied", c)
		}
	}
	for _, c := range []string{"read", "clone", "execve", "personality"} {
		if slices.Contains(denied, c) {
			t.Errorf("seccomp profile denies %s unconditionally; want it allowed", c)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"zero", Config{}, true},
		{"default", Default(), true},
		{"relative run dir", Config{RunDir: "run"}, false},
		{"bad cgroup parent", Config{CgroupParent: "../x"}, false},
		{"nofile", Config{NoFile: 65536}, true},
		{"nofile too low", Config{NoFile: 10}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate(%+v) = %v; want ok=%v", tc.cfg, err, tc.ok)
			}
		})
	}
	if c := (Config{}).withDefaults(); c.Binary != "crun" || c.Seccomp == nil || !*c.Seccomp || c.NoFile != DefaultNoFile {
		t.Errorf("withDefaults() = %+v; want crun with seccomp and nofile %d", c, DefaultNoFile)
	}
}

func TestBuildSpecHostNetwork(t *testing.T) {
	for _, host := range []bool{false, true} {
		const netns = "/run/corral/sandboxes/x/netns"
		sp, err := buildSpec(specParams{id: "x", spec: &sandbox.Spec{HostNetwork: host, AgentBinary: "/bin/true"}, cgroupsPath: "/c/x", netns: netns, nofile: 1024})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(sp.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
		if hasNet := i >= 0; hasNet == host {
			t.Errorf("HostNetwork=%v: network namespace present = %v", host, hasNet)
		}
		// The daemon makes the namespace (the agent's socket is in it):
		// the runtime joins it.
		if i >= 0 && sp.Linux.Namespaces[i].Path != netns {
			t.Errorf("network namespace path = %q; want %q", sp.Linux.Namespaces[i].Path, netns)
		}
	}
}

// TestBuildSpecGVisorPids: in a gvisor box the pids limit is the agent's
// (--pids-max, gVisor's own cgroup) and the host's cgroup has headroom
// above it for gVisor's kernel; crun and runc boxes get the limit on the
// host's cgroup, and no flag.
func TestBuildSpecGVisorPids(t *testing.T) {
	for _, tc := range []struct {
		name       string
		gvisor     bool
		pids       int64
		wantHost   int64
		wantAgentN string
	}{
		{"gvisor", true, 40, RunscHostPids(40), "40"},
		{"gvisor unlimited", true, 0, 0, ""},
		{"crun", false, 40, 40, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := specParams{id: "x", spec: &sandbox.Spec{AgentBinary: "/bin/true", Resources: sandbox.Resources{Pids: tc.pids}}, cgroupsPath: "/c/x", nofile: 1024}
			if tc.gvisor {
				p.agentListen, p.gvisorPids = "tcp://127.0.0.1:49983", true
			}
			sp, err := buildSpec(p)
			if err != nil {
				t.Fatal(err)
			}
			var host int64
			if l := sp.Linux.Resources.Pids; l != nil {
				host = *l.Limit
			}
			if host != tc.wantHost {
				t.Errorf("host pids limit = %d; want %d", host, tc.wantHost)
			}
			got := ""
			if i := slices.Index(sp.Process.Args, "--pids-max"); i >= 0 && i+1 < len(sp.Process.Args) {
				got = sp.Process.Args[i+1]
			}
			if got != tc.wantAgentN {
				t.Errorf("agent --pids-max = %q in %q; want %q", got, sp.Process.Args, tc.wantAgentN)
			}
		})
	}
	if h := RunscHostPids(40); h <= 2*40 {
		t.Errorf("RunscHostPids(40) = %d; want more than 2 host tasks per task of the box (systrap's stubs)", h)
	}
}

// TestAgentPathShared keeps the egress proxy's idea of where the agent is
// mounted (it tells the agent from the commands by that file) equal to
// the mount.
func TestAgentPathShared(t *testing.T) {
	if network.AgentPath != AgentPath {
		t.Errorf("network.AgentPath = %q, oci.AgentPath = %q", network.AgentPath, AgentPath)
	}
}

// TestBuildSpecUserNS: a box with its own network joins the user
// namespace made with it (no mappings: the runtime must not map a joined
// namespace); a box on the host's network gets one from the runtime,
// mapped. Both record their range for a restart.
func TestBuildSpecUserNS(t *testing.T) {
	u := userns.Range{HostID: 1 << 31, Size: userns.Size}
	for _, host := range []bool{false, true} {
		const netns, uns = "/run/corral/sandboxes/x/netns", "/run/corral/sandboxes/x/userns"
		sp, err := buildSpec(specParams{id: "x", spec: &sandbox.Spec{HostNetwork: host, UserNS: &u, AgentBinary: "/bin/true"}, cgroupsPath: "/c/x", netns: netns, userns: uns, nofile: 1024})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(sp.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace })
		if i < 0 {
			t.Fatalf("HostNetwork=%v: no user namespace", host)
		}
		wantPath, wantMaps := uns, 0
		if host {
			wantPath, wantMaps = "", 1
		}
		if p := sp.Linux.Namespaces[i].Path; p != wantPath {
			t.Errorf("HostNetwork=%v: user namespace path = %q; want %q", host, p, wantPath)
		}
		if len(sp.Linux.UIDMappings) != wantMaps || len(sp.Linux.GIDMappings) != wantMaps {
			t.Errorf("HostNetwork=%v: mappings %v %v; want %d each", host, sp.Linux.UIDMappings, sp.Linux.GIDMappings, wantMaps)
		}
		if got := sp.Annotations[usernsAnnotation]; got != u.String() {
			t.Errorf("HostNetwork=%v: annotation %q = %q; want %q", host, usernsAnnotation, got, u.String())
		}
	}
}
