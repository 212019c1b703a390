package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/image/source"
)

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.toml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name, toml string
		wantErr    string
	}{
		{"minimal", "version = 1\n", ""},
		{"full", `version = 1
root = "/srv/corral"
listen = "127.0.0.1:7070"
token_file = "/etc/corral/token"
default_runtime = "runc"
runtimes = ["runc"]
[resources]
memory_bytes = 536870912
pids = 256
`, ""},
		{"no version", "root = \"/x\"\n", "version = 0"},
		{"version 2", "version = 2\n", "version = 2"},
		{"unknown key", "version = 1\nrooot = \"/x\"\n", "rooot"},
		{"relative root", "version = 1\nroot = \"x\"\n", "root"},
		{"listen without token", "version = 1\nlisten = \":7070\"\n", "token_file"},
		{"tls", "version = 1\nlisten = \":7070\"\ntoken_file = \"/t\"\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n[e2b]\ndomain = \"sandbox.example.com:8443\"\n", ""},
		{"tls without key", "version = 1\nlisten = \":7070\"\ntoken_file = \"/t\"\ntls_cert_file = \"/c.pem\"\n", "tls_key_file is required"},
		{"tls key without cert", "version = 1\nlisten = \":7070\"\ntoken_file = \"/t\"\ntls_key_file = \"/k.pem\"\n", "tls_cert_file is required"},
		{"tls without listen", "version = 1\ntls_cert_file = \"/c.pem\"\ntls_key_file = \"/k.pem\"\n", "listen is required when tls_cert_file"},
		{"e2b domain with scheme", "version = 1\n[e2b]\ndomain = \"https://sandbox.example.com\"\n", "e2b.domain"},
		{"e2b domain bad port", "version = 1\n[e2b]\ndomain = \"sandbox.example.com:0\"\n", "e2b.domain"},
		{"e2b domain label", "version = 1\n[e2b]\ndomain = \"-a.example.com\"\n", "e2b.domain"},
		{"default runtime missing", "version = 1\nruntimes = [\"runc\"]\n", "default_runtime"},
		{"default runtime missing in table", "version = 1\n[runtime.container]\nruntimes = [\"runc\"]\n", "runtime.container.default"},
		{"tiny memory", "version = 1\n[resources]\nmemory_bytes = 5\n", "resources.memory_bytes"},
		{"bad log level", "version = 1\nlog_level = \"loud\"\n", "log_level"},
		{"agent idle exit", "version = 1\nagent_idle_exit = \"2m\"\n", ""},
		{"agent idle exit off", "version = 1\nagent_idle_exit = \"0\"\n", ""},
		{"agent idle exit bad", "version = 1\nagent_idle_exit = \"soon\"\n", "agent_idle_exit \"soon\" must be a duration"},
		{"agent idle exit negative", "version = 1\nagent_idle_exit = \"-1s\"\n", "agent_idle_exit"},
		{"agent timeout", "version = 1\nagent_timeout = \"2m\"\nagent_exec_grace = \"1s\"\n", ""},
		{"agent timeout bad", "version = 1\nagent_timeout = \"0\"\n", "agent_timeout \"0\" must be a positive duration"},
		{"agent exec grace bad", "version = 1\nagent_exec_grace = \"soon\"\n", "agent_exec_grace \"soon\" must be a positive duration"},
		{"disk flush", "version = 1\ndisk_flush = true\n", ""},
		{"output buffer", "version = 1\noutput_buffer = 65536\n", ""},
		{"output buffer none", "version = 1\noutput_buffer = 0\n", ""},
		{"output buffer negative", "version = 1\noutput_buffer = -1\n", "output_buffer -1 must be between 0"},
		{"output buffer huge", "version = 1\noutput_buffer = 1073741824\n", "output_buffer 1073741824 must be between 0"},
		{"metrics", "version = 1\n[metrics]\ninterval = \"1s\"\nhistory = 600\nper_sandbox = true\n", ""},
		{"metrics interval bad", "version = 1\n[metrics]\ninterval = \"1ms\"\n", "metrics.interval \"1ms\" must be a duration of at least"},
		{"metrics history bad", "version = 1\n[metrics]\nhistory = 0\n", "metrics.history 0 must be between 1 and"},
		{"alerts webhook", "version = 1\n[alerts]\nwebhook = \"http://127.0.0.1:9000/hook\"\n", ""},
		{"alerts webhook bad", "version = 1\n[alerts]\nwebhook = \"127.0.0.1:9000\"\n", "alerts.webhook \"127.0.0.1:9000\" must be an http:// or https:// URL"},
		{"audit bound too small", "version = 1\n[audit]\nmax_bytes_per_box = 100\n", "audit.max_bytes_per_box 100 must be at least 4096"},
		{"output log bound too small", "version = 1\n[output_log]\nmax_bytes_per_process = 100\n", "output_log.max_bytes_per_process 100 must be at least 65536"},
		{"output log box bound below a process's", "version = 1\n[output_log]\nmax_bytes_per_process = 1048576\nmax_bytes_per_box = 65536\n", "output_log.max_bytes_per_box 65536 at least as large"},
		{"audit retention bad", "version = 1\n[audit]\nretention = \"forever\"\n", "audit.retention \"forever\" must be a positive duration"},
		{"alerts webhook timeout bad", "version = 1\n[alerts]\nwebhook_timeout = \"0s\"\n", "alerts.webhook_timeout \"0s\" must be a positive duration"},
		{"disk flush not a bool", "version = 1\ndisk_flush = \"yes\"\n", "line 2: disk_flush: got a string, want bool"},
		{"disk direct io", "version = 1\ndisk_direct_io = true\n", ""},
		{"volume dirty bytes off", "version = 1\ndisk_volume_dirty_bytes = 0\n", ""},
		{"volume dirty bytes negative", "version = 1\ndisk_volume_dirty_bytes = -1\n", "disk_volume_dirty_bytes -1 must be 0"},
		{"nested type", "version = 1\n[resources]\npids = \"many\"\n", "line 3: resources.pids: got a string, want int64"},
		{"nofile", "version = 1\n[resources]\nnofile = 4096\n", ""},
		{"nofile too low", "version = 1\n[resources]\nnofile = 10\n", "resources.nofile 10 is below 64"},
		{"runtime path", "version = 1\nallow_unsafe_runtimes = [\"runc\"]\n[runtime_paths]\nrunc = \"/opt/runc/runc\"\n", ""},
		{"runtime path relative", "version = 1\n[runtime_paths]\nrunc = \"runc\"\n", "runtime_paths.runc \"runc\" must be an absolute path"},
		{"runtime path unknown runtime", "version = 1\n[runtime_paths]\nyouki = \"/usr/bin/youki\"\n", "runtime_paths.youki"},
		{"allow unsafe unknown runtime", "version = 1\nallow_unsafe_runtimes = [\"youki\"]\n", "allow_unsafe_runtimes: \"youki\" is not in runtime.container.runtimes"},
		{"allow unsafe runsc", "version = 1\nallow_unsafe_runtimes = [\"runsc\"]\n", ""},
		{"container table", "version = 1\n[runtime.container]\nruntimes = [\"runc\"]\ndefault = \"runc\"\n", ""},
		{"container table empty", "version = 1\n[runtime.container]\nruntimes = []\n", "runtime.container.runtimes must name at least one"},
		{"container table runsc", "version = 1\n[runtime.container]\nruntimes = [\"crun\", \"runsc\"]\n", "configure it in [runtime.gvisor]"},
		{"alias and table differ", "version = 1\nruntimes = [\"crun\"]\n[runtime.container]\nruntimes = [\"runc\"]\ndefault = \"runc\"\n", "keep runtime.container.runtimes"},
		{"default alias and table differ", "version = 1\ndefault_runtime = \"crun\"\n[runtime.container]\ndefault = \"runc\"\n", "keep runtime.container.default"},
		{"gvisor table", "version = 1\n[runtime.gvisor]\nenabled = false\npath = \"/opt/runsc\"\nplatform = \"ptrace\"\nflags = [\"--debug\"]\n", ""},
		{"gvisor platform", "version = 1\n[runtime.gvisor]\nplatform = \"xen\"\n", "runtime.gvisor.platform \"xen\""},
		{"gvisor path relative", "version = 1\n[runtime.gvisor]\npath = \"runsc\"\n", "runtime.gvisor.path"},
		{"gvisor own flag", "version = 1\n[runtime.gvisor]\nflags = [\"--network=sandbox\"]\n", "--network is set by corral"},
		{"gvisor flag not a flag", "version = 1\n[runtime.gvisor]\nflags = [\"debug\"]\n", "is not a flag"},
		{"default tier gvisor", "version = 1\ndefault_tier = \"gvisor\"\n", ""},
		{"default tier unknown", "version = 1\ndefault_tier = \"microvm\"\n", "default_tier \"microvm\" is not one of container, gvisor"},
		{"default tier disabled", "version = 1\ndefault_tier = \"gvisor\"\n[runtime.gvisor]\nenabled = false\n", "default_tier \"gvisor\" needs runtime.gvisor.enabled = true"},
		{"limits", "version = 1\n[limits]\nrequests_per_second = 50.0\nrequest_burst = 100\nmax_sandboxes = 200\ncpu_overcommit = 4.0\nmemory_overcommit = 1.5\n", ""},
		{"limits negative", "version = 1\n[limits]\nmax_sandboxes = -1\n", "limits: requests_per_second, request_burst, max_sandboxes"},
		{"limits nan", "version = 1\n[limits]\ncpu_overcommit = nan\n", "limits:"},
		{"limits unknown key", "version = 1\n[limits]\nmax_boxes = 3\n", "max_boxes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := LoadConfig(write(tc.toml))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("LoadConfig(%q) = %v; want nil", tc.toml, err)
				}
				return
			}
			if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("LoadConfig(%q) = %+v, %v; want invalid argument naming %q", tc.toml, cfg, err, tc.wantErr)
			}
		})
	}
	cfg, err := LoadConfig(write("version = 1\nroot = \"/srv/corral\"\n"))
	if err != nil || cfg.Root != "/srv/corral" || cfg.Socket != "/run/corral/corral.sock" || cfg.defaultRuntime() != "crun" {
		t.Errorf("LoadConfig() = %+v, %v; want root /srv/corral over the defaults", cfg, err)
	}
	if cfg, err := LoadConfig(write("version = 1\ndefault_tier = \"gvisor\"\n")); err != nil || cfg.defaultRuntime() != RunscName || cfg.defaultTier() != "gvisor" {
		t.Errorf("LoadConfig(default_tier = gvisor) = %v; default runtime %q, tier %q; want runsc, gvisor", err, cfg.defaultRuntime(), cfg.defaultTier())
	}
	if DefaultConfig().defaultTier() != "container" {
		t.Errorf("default default_tier = %q; want container", DefaultConfig().defaultTier())
	}
	if _, err := LoadConfig(filepath.Join(dir, "missing.toml")); err == nil {
		t.Errorf("LoadConfig(missing) = nil; want error")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	if d := DefaultConfig().agentIdleExit(); d != 30*time.Second {
		t.Errorf("default agent idle exit %v, want 30s", d)
	}
	for in, want := range map[int]int{0: -1, 1 << 20: 0, 4096: 4096} {
		c := DefaultConfig()
		c.OutputBuffer = in
		if got := c.outputBuffer(); got != want {
			t.Errorf("output_buffer %d: Spec.OutputBuffer = %d; want %d", in, got, want)
		}
	}
	if DefaultConfig().DiskFlush {
		t.Errorf("default disk_flush = true; want false (disks mounted nobarrier)")
	}
	if cfg, err := LoadConfig(write("version = 1\ndisk_flush = true\n")); err != nil || !cfg.DiskFlush {
		t.Errorf("LoadConfig(disk_flush = true) = %v, %v; want DiskFlush", cfg.DiskFlush, err)
	}
	if c := DefaultConfig(); c.DiskDirectIO || c.DiskVolumeDirtyBytes != 32<<20 {
		t.Errorf("default disk_direct_io = %v, disk_volume_dirty_bytes = %d; want false, 32 MiB", c.DiskDirectIO, c.DiskVolumeDirtyBytes)
	}
	if cfg, err := LoadConfig(write("version = 1\ndisk_volume_dirty_bytes = 0\ndisk_direct_io = true\n")); err != nil || cfg.DiskVolumeDirtyBytes != 0 || !cfg.DiskDirectIO {
		t.Errorf("LoadConfig(disk_volume_dirty_bytes = 0, disk_direct_io = true) = %d, %v, %v; want 0, true", cfg.DiskVolumeDirtyBytes, cfg.DiskDirectIO, err)
	}
	if d := (Config{AgentIdleExit: "0"}).agentIdleExit(); d != 0 {
		t.Errorf("agent_idle_exit 0 = %v, want 0 (never)", d)
	}
}

func TestLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), LockFile)
	unlock, err := lock(p)
	if err != nil {
		t.Fatalf("lock() = %v", err)
	}
	if _, err := lock(p); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "another corral daemon") {
		t.Errorf("second lock() = %v; want unavailable naming another daemon", err)
	}
	if err := unlock(); err != nil {
		t.Fatal(err)
	}
	unlock, err = lock(p)
	if err != nil {
		t.Fatalf("lock() after unlock = %v", err)
	}
	unlock()
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ content, want string }{{"abc\n", "abc"}, {"  \n", ""}, {"a b", ""}} {
		p := filepath.Join(dir, "tok")
		os.WriteFile(p, []byte(tc.content), 0o600)
		got, err := readToken(p)
		if got != tc.want || (tc.want == "") != (err != nil) {
			t.Errorf("readToken(%q) = %q, %v; want %q", tc.content, got, err, tc.want)
		}
	}
}

// TestInsecureHint: the config lines the plain-HTTP registry error tells
// users to add are the ones that turn plain HTTP on, and the default path
// it names is the daemon's.
func TestInsecureHint(t *testing.T) {
	hint := source.InsecureHint
	var quoted []string
	for i, part := range strings.Split(hint, "`") {
		if i%2 == 1 {
			quoted = append(quoted, part)
		}
	}
	if len(quoted) != 2 || quoted[1] != "[registry]" {
		t.Fatalf("InsecureHint quotes %q; want a config line and its table [registry]", quoted)
	}
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte("version = 1\n"+quoted[1]+"\n"+quoted[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(p)
	if err != nil || !cfg.Registry.Insecure {
		t.Errorf("LoadConfig(the lines of the hint) = insecure %v, %v; want true", cfg.Registry.Insecure, err)
	}
	if !strings.Contains(hint, DefaultConfigPath) {
		t.Errorf("InsecureHint %q does not name the default config file %s", hint, DefaultConfigPath)
	}
}

// TestUserNSDefault: boxes get a user namespace unless the configuration
// says otherwise, whether it leaves userns out or starts from the defaults.
func TestUserNSDefault(t *testing.T) {
	if got := DefaultConfig().userNSMode(); got != UserNSAuto {
		t.Errorf("DefaultConfig userns = %q; want %q", got, UserNSAuto)
	}
	if got := (Config{}).userNSMode(); got != UserNSAuto {
		t.Errorf("userns left out = %q; want %q", got, UserNSAuto)
	}
	if got := (Config{UserNS: UserNSOff}).userNSMode(); got != UserNSOff {
		t.Errorf("userns = off gives %q", got)
	}
}
