//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
)

// requiresGVisor skips unless runsc is installed and the daemon offers the
// gvisor tier.
func requiresGVisor(t *testing.T, d *daemon) {
	t.Helper()
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("runsc not installed (the gvisor tier): scripts/deps.sh installs it")
	}
	if ti := d.tierInfo("gvisor"); !ti.Available {
		t.Skipf("the gvisor tier is not available: %s", ti.Missing)
	}
}

// tierInfo returns the daemon's view of tier name (corral info).
func (d *daemon) tierInfo(name string) rest.TierInfo {
	d.t.Helper()
	var info rest.Info
	if err := json.Unmarshal([]byte(d.must("info", "--format", "json")), &info); err != nil {
		d.t.Fatal(err)
	}
	for _, ti := range info.Tiers {
		if ti.Name == name {
			return ti
		}
	}
	d.t.Fatalf("corral info lists no tier %s: %+v", name, info.Tiers)
	return rest.TierInfo{}
}

// TestGVisorTier runs a box on gVisor's kernel: the same agent, exec,
// files, the tier in inspect and ls, and its kernel is gVisor's.
func TestGVisorTier(t *testing.T) {
	d := startDaemon(t)
	requiresGVisor(t, d)
	id := d.create("--tier", "gvisor", "--image", "busybox")
	if out := d.must("exec", id, "--", "dmesg"); !strings.Contains(out, "gVisor") {
		t.Errorf("dmesg in a gvisor box = %q; want gVisor's boot messages", out)
	}
	if out := d.must("exec", id, "--", "uname", "-r"); strings.TrimSpace(out) == strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")) {
		t.Errorf("uname -r in a gvisor box = %q, the host's kernel release", out)
	}
	var sb []rest.Sandbox
	if err := json.Unmarshal([]byte(d.must("inspect", id)), &sb); err != nil || len(sb) != 1 || sb[0].Tier != "gvisor" || sb[0].Runtime != "runsc" {
		t.Errorf("inspect = %+v, %v; want tier gvisor, runtime runsc", sb, err)
	}
	if out := d.must("ls", "-q", "--filter", "tier=gvisor"); strings.TrimSpace(out) != id {
		t.Errorf("ls --filter tier=gvisor = %q; want %s", out, id)
	}
	d.must("exec", id, "--", "sh", "-c", "echo hello > /tmp/f")
	if out := d.must("exec", id, "--", "cat", "/tmp/f"); out != "hello\n" {
		t.Errorf("cat /tmp/f = %q", out)
	}
	// Suspend keeps files only, and says so.
	_, errOut, err := d.corral("suspend", id)
	if err == nil || !strings.Contains(errOut, "gvisor tier keeps files only") || !strings.Contains(errOut, "cannot checkpoint a box on the host's network stack") {
		t.Errorf("suspend of a gvisor box = %v, %q; want a refusal saying the tier keeps files only, and why", err, errOut)
	}
}

// TestGVisorTierMissing checks that a request for the gvisor tier on a
// daemon without runsc fails with 412 naming the package to install,
// leaves nothing, and never falls back to the container tier.
func TestGVisorTierMissing(t *testing.T) {
	d := startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += "[runtime.gvisor]\npath = \"/nonexistent/runsc\"\n"
	})
	ti := d.tierInfo("gvisor")
	if ti.Available || !strings.Contains(ti.Missing, "install the runsc package") {
		t.Errorf("info tier gvisor = %+v; want not available, saying to install the runsc package", ti)
	}
	if out := d.must("info"); !strings.Contains(out, "gvisor:") || !strings.Contains(out, "not available") {
		t.Errorf("corral info does not say the gvisor tier is not available:\n%s", out)
	}
	out, errOut, err := d.corral("create", "--tier", "gvisor", "--image", "busybox")
	if err == nil || !strings.Contains(errOut, "tier gvisor is not available") || !strings.Contains(errOut, "install the runsc package") {
		t.Errorf("create --tier gvisor = %q, %q, %v; want an error naming the runsc package", out, errOut, err)
	}
	// 412 on the API.
	status, e := d.post("/v1/sandboxes", rest.CreateSandboxRequest{Tier: "gvisor", Image: "busybox"})
	if status != http.StatusPreconditionFailed || e.Error.Code != "failed_precondition" || !strings.Contains(e.Error.Message, "runsc") {
		t.Errorf("POST /v1/sandboxes tier gvisor = %d %+v; want 412 failed_precondition naming runsc", status, e)
	}
	if ls := d.must("ls", "-q"); strings.TrimSpace(ls) != "" {
		t.Errorf("refused create left sandboxes: %q", ls)
	}
	if _, errOut, err := d.corral("create", "--tier", "microvm"); err == nil || !strings.Contains(errOut, `tier "microvm" is not one of container, gvisor`) {
		t.Errorf("create --tier microvm = %v, %q; want an error naming the tiers", err, errOut)
	}
}

// TestGVisorAgentRefusesBox: the agent of a gvisor box listens on TCP in
// the box's network namespace, which the box's processes share; it serves
// only the daemon's connections, which send the box's token first, and
// the box cannot read the token.
func TestGVisorAgentRefusesBox(t *testing.T) {
	d := startDaemon(t)
	requiresGVisor(t, d)
	id := d.create("--tier", "gvisor", "--image", "busybox")
	if out, _ := d.sh(id, `(printf 'GET /health HTTP/1.0\r\n\r\n'; sleep 2) | nc 127.0.0.1 49983`); strings.Contains(out, "HTTP/") {
		t.Errorf("a box process got an answer from its agent: %q", out)
	}
	token := strings.TrimSpace(readFile(filepath.Join(d.run, "runsc", "sandboxes", id, "agent-token")))
	if len(token) != 64 {
		t.Fatalf("token file of box %s = %q; want 64 characters", id, token)
	}
	if out, _ := d.sh(id, "cat /proc/1/environ /proc/1/cmdline /.corral-agent-token"); strings.Contains(out, token) {
		t.Errorf("a box process finds the agent's token: %q", out)
	}
	if _, _, err := d.corral("exec", id, "--", "test", "-e", "/.corral-agent-token"); exitCode(err) != 1 {
		t.Errorf("test -e /.corral-agent-token in the box: exit %d; want 1, the agent removed it", exitCode(err))
	}
	// The daemon still drives the agent.
	if out := d.must("exec", id, "--", "echo", "ok"); out != "ok\n" {
		t.Errorf("exec after the box's attempts = %q", out)
	}
}

// TestDefaultTier: with default_tier = "gvisor", a create that names no
// tier or runtime gets the gvisor tier, corral info says so, and naming
// the container tier still works. A daemon whose default tier is not
// available does not start, and says which key to change.
func TestDefaultTier(t *testing.T) {
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("runsc not installed (the gvisor tier): scripts/deps.sh installs it")
	}
	d := startDaemonWith(t, func(cfg *string, _ string) { *cfg += "default_tier = \"gvisor\"\n" })
	var info rest.Info
	if err := json.Unmarshal([]byte(d.must("info", "--format", "json")), &info); err != nil {
		t.Fatal(err)
	}
	if info.DefaultTier != "gvisor" || info.DefaultRuntime != "runsc" || !d.tierInfo("gvisor").Default || d.tierInfo("container").Default {
		t.Errorf("info = default tier %q, runtime %q, tiers %+v; want gvisor, runsc, gvisor the default", info.DefaultTier, info.DefaultRuntime, info.Tiers)
	}
	if out := d.must("info"); !strings.Contains(out, "Default Tier:") || !strings.Contains(out, "gvisor") {
		t.Errorf("corral info does not show the default tier:\n%s", out)
	}
	for _, tc := range []struct {
		args          []string
		tier, runtime string
	}{
		{nil, "gvisor", "runsc"},
		{[]string{"--tier", "container"}, "container", "crun"},
	} {
		id := d.create(append([]string{"--image", "busybox"}, tc.args...)...)
		var sb []rest.Sandbox
		if err := json.Unmarshal([]byte(d.must("inspect", id)), &sb); err != nil || len(sb) != 1 || sb[0].Tier != tc.tier || sb[0].Runtime != tc.runtime {
			t.Errorf("create %v: inspect = %+v, %v; want tier %s, runtime %s", tc.args, sb, err, tc.tier, tc.runtime)
		}
		d.must("rm", "-f", id)
	}

	// runsc missing: the daemon refuses to start.
	dir := t.TempDir()
	conf := filepath.Join(dir, "corral.toml")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`version = 1
root = %q
run_dir = %q
socket = %q
default_tier = "gvisor"
[runtime.gvisor]
path = "/nonexistent/runsc"
`, filepath.Join(dir, "root"), filepath.Join(dir, "run"), filepath.Join(dir, "run", "corral.sock"))), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, corralBin, "serve", "--config", conf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `default_tier "gvisor" is not available`) || !strings.Contains(string(out), "install the runsc package") {
		t.Errorf("corral serve with default_tier gvisor and no runsc = %v\n%s\nwant a start error naming default_tier and the package", err, out)
	}
	if strings.Contains(readFile("/proc/self/mountinfo"), " "+filepath.Join(dir, "run")+" ") {
		t.Errorf("the refused daemon left its run_dir mounted")
		_ = syscall.Unmount(filepath.Join(dir, "run"), syscall.MNT_DETACH)
	}
}
