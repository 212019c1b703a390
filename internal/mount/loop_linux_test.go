package mount

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// loopOf returns the sysfs directory (/sys/block/loopN) of the loop device
// backed by file, or "".
func loopOf(t *testing.T, file string) string {
	t.Helper()
	backs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, b := range backs {
		if got, err := os.ReadFile(b); err == nil && strings.TrimSpace(string(got)) == file {
			return filepath.Dir(filepath.Dir(b))
		}
	}
	return ""
}

// TestLoopDirectIO: a "loop" mount attaches its file buffered, and with
// "direct-io" with direct I/O (what keeps a disk image's data out of the
// host's page cache); the device goes with the mount; "direct-io" alone
// is refused before anything is attached.
func TestLoopDirectIO(t *testing.T) {
	testutil.RequiresRoot(t)
	mkfs := testutil.RequiresBinary(t, "mkfs.ext4")
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, img, 0, unix.STATX_DIOALIGN, &stx); err != nil || stx.Mask&unix.STATX_DIOALIGN == 0 ||
		stx.Dio_offset_align == 0 || stx.Dio_offset_align > 512 {
		t.Skipf("the file system of %s cannot do direct I/O in 512-byte blocks (statx: %v, offset alignment %d)", dir, err, stx.Dio_offset_align)
	}
	target := filepath.Join(dir, "mnt")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(target) })

	for _, directIO := range []bool{false, true} {
		opts := []string{"loop", "nosuid", "nodev"}
		want := "0"
		if directIO {
			opts, want = append(opts, "direct-io"), "1"
		}
		if err := (Mount{Type: "ext4", Source: img, Options: opts}).Mount(target); err != nil {
			t.Fatalf("Mount(%v) = %v", opts, err)
		}
		dev := loopOf(t, img)
		if dev == "" {
			t.Fatalf("Mount(%v): no loop device is backed by %s", opts, img)
		}
		if got, err := os.ReadFile(filepath.Join(dev, "loop", "dio")); err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("Mount(%v): %s/loop/dio = %q, %v; want %s", opts, dev, got, err, want)
		}
		if err := os.WriteFile(filepath.Join(target, "f"), []byte("data"), 0o644); err != nil {
			t.Errorf("write through the loop mount: %v", err)
		}
		if err := Unmount(target); err != nil {
			t.Fatal(err)
		}
		for i := 0; loopOf(t, img) != "" && i < 250; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		if loopOf(t, img) != "" {
			t.Fatalf("Mount(%v): the loop device stayed after the unmount", opts)
		}
	}

	err := (Mount{Type: "ext4", Source: img, Options: []string{"direct-io"}}).Mount(target)
	if err == nil || !strings.Contains(err.Error(), "needs option loop") {
		t.Errorf("Mount(direct-io without loop) = %v; want an error naming option loop", err)
	}
	if _, fstype, mounted, err := At("/proc/self/mountinfo", target); err != nil || mounted {
		t.Errorf("after the refused mount, At(%s) = %s mounted %v, %v; want nothing mounted", target, fstype, mounted, err)
	}
	if dev := loopOf(t, img); dev != "" {
		t.Errorf("the refused mount left loop device %s", dev)
	}
}
