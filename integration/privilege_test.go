//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
)

// TestAllowPrivilegeEscalation builds two images from busybox that differ
// only in allow_privilege_escalation, each with a set-user-ID root program
// and the default user agent: only the one that opts in runs without
// no_new_privs (its build steps too) and lets the program become root, and so does a box from
// a snapshot of its box. The sandbox and the image say so.
func TestAllowPrivilegeEscalation(t *testing.T) {
	dir := t.TempDir()
	build := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", filepath.Join(dir, "euid"), "./testdata/euid")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build euid: %v: %s", err, out)
	}
	d := startDaemon(t)
	const body = `from: busybox
copy:
  - {src: euid, dst: /usr/local/bin/euid}
run:
  - chmod 4755 /usr/local/bin/euid
  - grep NoNewPrivs /proc/self/status > /build-nnp
user: agent
build: {network: none}
`
	for name, extra := range map[string]string{"it-setuid": "allow_privilege_escalation: true\n", "it-plain": ""} {
		d.must("build", "-t", name, "-f", writeSpec(t, dir, body+extra))
	}
	// The build's own steps run as the image's boxes do (/build-nnp).
	probe := "grep NoNewPrivs /proc/self/status; /usr/local/bin/euid; cat /build-nnp"
	for _, tc := range []struct {
		image, want string
		allowed     bool
	}{
		{"it-setuid", "NoNewPrivs:\t0\nuid=1000 euid=0\nNoNewPrivs:\t0\n", true},
		{"it-plain", "NoNewPrivs:\t1\nuid=1000 euid=1000\nNoNewPrivs:\t1\n", false},
		{"busybox", "NoNewPrivs:\t1\n", false},
	} {
		id := d.create("--image", tc.image)
		cmd := probe
		if tc.image == "busybox" {
			cmd = "grep NoNewPrivs /proc/self/status"
		}
		if got := d.must("exec", id, "--", "sh", "-c", cmd); got != tc.want {
			t.Errorf("in a box from %s: %q printed %q; want %q", tc.image, cmd, got, tc.want)
		}
		var sbs []struct {
			Allow bool `json:"allow_privilege_escalation"`
		}
		if err := json.Unmarshal([]byte(d.must("inspect", id)), &sbs); err != nil || len(sbs) != 1 || sbs[0].Allow != tc.allowed {
			t.Errorf("corral inspect (box from %s) allow_privilege_escalation = %+v, %v; want %v", tc.image, sbs, err, tc.allowed)
		}
		if tc.image != "it-setuid" {
			continue
		}
		if info := d.must("image", "inspect", tc.image); !strings.Contains(info, `"allow_privilege_escalation": true`) {
			t.Errorf("corral image inspect %s = %s; want allow_privilege_escalation true", tc.image, info)
		}
		d.must("snapshot", id, "--name", "it-setuid-snap")
		snapBox := d.create("--image", "it-setuid-snap")
		if got := d.must("exec", snapBox, "--", "sh", "-c", probe); got != tc.want {
			t.Errorf("in a box from a snapshot of a box from %s: %q printed %q; want %q", tc.image, probe, got, tc.want)
		}
	}
}
