package image

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestBusyboxRuns builds the real busybox image, mounts it on a writable
// layer and runs a shell in it (chroot), as a sandbox would.
func TestBusyboxRuns(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("/bin/busybox missing (apt-get install busybox-static)")
	}
	ctx := testutil.Context(t)
	s, layers := builtinStore(t)
	img, err := s.Get(ctx, BusyboxImage)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(layerFile(t, layers, img, "home/agent")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 1000 {
		t.Errorf("home/agent = %v, %v; want owned by uid 1000", fi, err)
	}
	key := "img-" + strings.ReplaceAll(t.Name(), "/", "-")
	ms, err := layers.Prepare(ctx, key, img.TopLayer, sandbox.PrepareOpts{})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	must(t, os.Mkdir(root, 0o755))
	must(t, mount.All(ms, root))
	t.Cleanup(func() {
		_ = mount.Unmount(root)
		_ = mount.Unmount(ms[0].Target)
		_ = layers.Remove(ctx, key)
	})
	cmd := exec.Command("/bin/sh", "-c", "echo hi > /tmp/x && cat /tmp/x /etc/passwd && ls /bin | wc -l")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Env = img.Env
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "hi\nroot:x:0:0") {
		t.Fatalf("sh in the busybox image = %q, %v", out, err)
	}
	t.Logf("%s", out)
}

// TestHostImageRuns mounts the host image with its /usr bind and runs the
// host's own tools in it.
func TestHostImageRuns(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	s, layers := builtinStore(t)
	img, err := s.Get(ctx, HostImage)
	if err != nil {
		t.Fatal(err)
	}
	key := "img-" + strings.ReplaceAll(t.Name(), "/", "-")
	ms, err := layers.Prepare(ctx, key, img.TopLayer, sandbox.PrepareOpts{})
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	must(t, os.Mkdir(root, 0o755))
	must(t, mount.All(ms, root))
	usr := filepath.Join(root, "usr")
	t.Cleanup(func() {
		_ = mount.Unmount(usr)
		_ = mount.Unmount(root)
		_ = mount.Unmount(ms[0].Target)
		_ = layers.Remove(ctx, key)
	})
	b := img.Binds[0]
	must(t, mount.Mount{Type: "bind", Source: b.Source, Options: []string{"rbind", "ro", "nosuid", "nodev"}}.Mount(usr))
	script := `id -un; test -e /etc/shadow && echo SHADOW; ls /home; touch /usr/x 2>/dev/null && echo USRWRITABLE; grep -c . /etc/ssl/certs/ca-certificates.crt >/dev/null && echo certs`
	cmd := exec.Command("/bin/bash", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Env = img.Env
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if want := "root\nagent\ncerts\n"; err != nil || string(out) != want {
		t.Fatalf("bash in the host image = %q, %v; want %q", out, err, want)
	}
}

// builtinStore returns an image store with its built-in images made, on a
// layer store with small disks and no pool.
func builtinStore(t *testing.T) (*Store, *overlay.Store) {
	t.Helper()
	layers, err := overlay.New(t.TempDir(), overlay.WithPoolSize(0), overlay.WithDefaultDiskBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { layers.Close() })
	s, err := New(t.TempDir(), layers)
	if err != nil {
		t.Fatal(err)
	}
	must(t, s.EnsureBuiltins(testutil.Context(t)))
	return s, layers
}
