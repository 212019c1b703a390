//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
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

// TestPulledImageSetuid: a set-user-ID root program that comes in a
// pulled layer keeps its bit. It stays inert in boxes of the pulled image
// (no_new_privs), and becomes root in boxes of an image built from it
// with allow_privilege_escalation, whose build adds nothing but that.
func TestPulledImageSetuid(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "euid")
	build := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin, "./testdata/euid")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build euid: %v: %s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/local/bin/euid", Typeflag: tar.TypeReg, Mode: 0o4755, Size: int64(len(data))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write(data)
		}
	}
	tw.Close()
	layerData := buf.Bytes()
	suid, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layerData)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, busyboxLayer(t), suid)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0)))}}
	srv.Start()
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/team/suid:1"
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t)
	d.must("image", "pull", ref)
	d.must("build", "-t", "it-pulled-suid", "-f", writeSpec(t, dir, "from: "+ref+"\nallow_privilege_escalation: true\nbuild: {network: none}\n"))
	for _, tc := range []struct{ image, want string }{
		{ref, "uid=1000 euid=1000\n"},
		{"it-pulled-suid", "uid=1000 euid=0\n"},
	} {
		id := d.create("--image", tc.image)
		if got := d.must("exec", "--user", "1000", id, "--", "/usr/local/bin/euid"); got != tc.want {
			t.Errorf("in a box from %s, the pulled set-user-ID program printed %q; want %q", tc.image, got, tc.want)
		}
	}
}
