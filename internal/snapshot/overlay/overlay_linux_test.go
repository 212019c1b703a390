package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// loopsBacking returns the loop devices whose backing file is under dir,
// but for the disk volume's own (dir/disks.img).
func loopsBacking(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, f := range allLoopsBacking(t, dir) {
		if !strings.HasSuffix(f, " -> "+filepath.Join(dir, "disks.img")) {
			out = append(out, f)
		}
	}
	return out
}

// allLoopsBacking returns the loop devices whose backing file is under
// dir, as "<sysfs file> -> <backing file>".
func allLoopsBacking(t testing.TB, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if back := strings.TrimSpace(string(b)); err == nil && strings.HasPrefix(back, dir+"/") {
			out = append(out, f+" -> "+back)
		}
	}
	return out
}

func mountRoot(t testing.TB, ms []mount.Mount) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := mount.All(ms, root); err != nil {
		t.Fatalf("mount.All() = %v", err)
	}
	return root
}

func unmountRoot(t testing.TB, ms []mount.Mount, root string) {
	t.Helper()
	if err := mount.Unmount(root); err != nil {
		t.Errorf("Unmount(root) = %v", err)
	}
	if err := mount.Unmount(ms[0].Target); err != nil {
		t.Errorf("Unmount(disk) = %v", err)
	}
}

func TestPrepareMounted(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	storeRoot := t.TempDir()
	s, err := New(storeRoot, WithDefaultDiskBytes(16<<20), WithPoolSize(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "base")); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateLayer(ctx, "mid", "base", writeFile("b", "mid")); err != nil {
		t.Fatal(err)
	}

	for _, parent := range []string{"base", "mid"} {
		t.Run(parent, func(t *testing.T) {
			key := "sb-" + parent
			ms, err := s.Prepare(ctx, key, parent, sandbox.PrepareOpts{DiskBytes: 16 << 20})
			if err != nil {
				t.Fatalf("Prepare(%q) = %v", key, err)
			}
			root := mountRoot(t, ms)
			mounted := true
			t.Cleanup(func() {
				if mounted {
					unmountRoot(t, ms, root)
				}
				_ = s.Remove(ctx, key)
			})
			if b, err := os.ReadFile(filepath.Join(root, "a")); err != nil || string(b) != "base" {
				t.Fatalf("ReadFile(a) = %q, %v; want base", b, err)
			}
			if b, err := os.ReadFile(filepath.Join(root, "b")); parent == "mid" && (err != nil || string(b) != "mid") {
				t.Fatalf("ReadFile(b) = %q, %v; want mid", b, err)
			}
			if err := os.WriteFile(filepath.Join(root, "a"), []byte("changed"), 0o644); err != nil {
				t.Fatalf("WriteFile(a) = %v", err)
			}
			if err := os.Remove(filepath.Join(root, "b")); parent == "mid" && err != nil {
				t.Fatalf("Remove(b) = %v", err)
			}
			if err := s.Remove(ctx, key); !errdefs.IsFailedPrecondition(err) {
				t.Errorf("Remove(%q) while mounted = %v; want FailedPrecondition", key, err)
			}

			// Fill the disk: ENOSPC, and the image never grows past the limit.
			img := ms[0].Source
			var before unix.Statfs_t
			_ = unix.Statfs(storeRoot, &before)
			f, err := os.OpenFile(filepath.Join(root, "big"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 1<<20)
			for i := range buf {
				buf[i] = byte(i)
			}
			var written int64
			for written < 64<<20 {
				n, err := f.Write(buf)
				written += int64(n)
				if err != nil {
					if !errors.Is(err, unix.ENOSPC) {
						t.Fatalf("Write(big) = %v; want ENOSPC", err)
					}
					break
				}
			}
			f.Close()
			if written >= 16<<20 {
				t.Fatalf("wrote %d bytes on a 16 MiB disk; want ENOSPC first", written)
			}
			var fi unix.Stat_t
			if err := unix.Stat(img, &fi); err != nil {
				t.Fatal(err)
			}
			if fi.Blocks*512 > 16<<20 {
				t.Errorf("disk image uses %d bytes on the host; want <= %d", fi.Blocks*512, 16<<20)
			}
			var after unix.Statfs_t
			_ = unix.Statfs(storeRoot, &after)
			drop := (int64(before.Bavail) - int64(after.Bavail)) * before.Bsize
			t.Logf("wrote %d bytes before ENOSPC; image uses %d bytes; host free space dropped %d bytes",
				written, fi.Blocks*512, drop)
			// The slack is for other writers on the host disk, not for us.
			if drop > 16<<20+32<<20 {
				t.Errorf("host free space dropped %d bytes; want about <= %d", drop, 16<<20)
			}

			unmountRoot(t, ms, root)
			mounted = false
			for name, want := range map[string]string{"a": "base", "b": "mid"} {
				if b, err := os.ReadFile(filepath.Join(storeRoot, "layers", name2layer(name), "fs", name)); err != nil || string(b) != want {
					t.Errorf("base layer file %s = %q, %v; want %q (lower layers must never change)", name, b, err, want)
				}
			}
			if err := s.Remove(ctx, key); err != nil {
				t.Fatalf("Remove(%q) = %v", key, err)
			}
			if _, err := os.Lstat(filepath.Join(storeRoot, "active", key)); !errors.Is(err, syscall.ENOENT) {
				t.Errorf("Lstat(active/%s) = %v; want ENOENT", key, err)
			}
			if loops := loopsBacking(t, storeRoot); len(loops) != 0 {
				t.Errorf("loop devices still attached: %v", loops)
			}
		})
	}
}

func name2layer(file string) string {
	if file == "a" {
		return "base"
	}
	return "mid"
}

func TestPoolFills(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	s, err := New(t.TempDir(), WithPoolSize(2)) // 10 GiB sparse disks
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	waitPool(t, s)
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "x")); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Prepare(ctx, "sb", "base", sandbox.PrepareOpts{})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	left := len(s.pool)
	s.mu.Unlock()
	if left != 1 {
		t.Errorf("pool has %d disks after Prepare; want 1 (one taken)", left)
	}
	root := mountRoot(t, ms)
	if err := os.WriteFile(filepath.Join(root, "new"), []byte("x"), 0o644); err != nil {
		t.Errorf("WriteFile(new) on a pooled disk = %v", err)
	}
	unmountRoot(t, ms, root)
	if err := s.Remove(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	waitPool(t, s)
}

// waitPool waits until the pool is full (no timing assertion: the test's
// own deadline bounds it).
func waitPool(t testing.TB, s *Store) {
	t.Helper()
	for {
		s.mu.Lock()
		n := len(s.pool)
		s.mu.Unlock()
		if n >= s.opts.poolSize {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// BenchmarkPrepareMountRemove measures Prepare, mounting the root file
// system, unmounting it and Remove, with the disk pool (Prepare takes a
// ready disk) and without (Prepare clones the template: a reflink on the
// disk volume, a sparse copy without it).
func BenchmarkPrepareMountRemove(b *testing.B) {
	testutil.RequiresRoot(b)
	for _, volume := range []string{DiskVolumeAuto, DiskVolumeOff} {
		for _, pool := range []int{DefaultPoolSize, 0} {
			b.Run(fmt.Sprintf("volume=%s/pool=%d", volume, pool), func(b *testing.B) {
				ctx := testutil.Context(b)
				s := newMountedStore(b, volume, WithDefaultDiskBytes(DefaultDiskBytes), WithPoolSize(pool))
				if err := s.CreateLayer(ctx, "base", "", writeFile("a", "x")); err != nil {
					b.Fatal(err)
				}
				root := filepath.Join(b.TempDir(), "rootfs")
				if err := os.Mkdir(root, 0o755); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					b.StopTimer()
					waitPool(b, s)
					s.bg.Wait()
					b.StartTimer()
					ms, err := s.Prepare(ctx, "bench", "base", sandbox.PrepareOpts{})
					if err != nil {
						b.Fatal(err)
					}
					if err := mount.All(ms, root); err != nil {
						b.Fatal(err)
					}
					if err := mount.Unmount(root); err != nil {
						b.Fatal(err)
					}
					if err := mount.Unmount(ms[0].Target); err != nil {
						b.Fatal(err)
					}
					if err := s.Remove(ctx, "bench"); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// superOptions returns the file system options of the mount at target in
// /proc/self/mountinfo, or fails.
func superOptions(t testing.TB, target string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		f := strings.Fields(l)
		if len(f) < 5 || f[4] != target {
			continue
		}
		_, post, ok := strings.Cut(l, " - ")
		if pf := strings.Fields(post); ok && len(pf) >= 3 {
			return strings.Split(pf[2], ",")
		}
	}
	t.Fatalf("%s is not in /proc/self/mountinfo", target)
	return nil
}

// TestDiskFlush checks that disks are mounted nobarrier unless
// WithDiskFlush is set, and that a write synced with syncfs reaches the
// image either way (what fork, snapshot and suspend copy).
func TestDiskFlush(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	for _, flush := range []bool{false, true} {
		t.Run(fmt.Sprintf("flush=%v", flush), func(t *testing.T) {
			s, err := New(t.TempDir(), WithDefaultDiskBytes(16<<20), WithPoolSize(0), WithDiskFlush(flush))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			ms, err := s.Prepare(ctx, "sb", "", sandbox.PrepareOpts{})
			if err != nil {
				t.Fatal(err)
			}
			root := mountRoot(t, ms)
			mounted := true
			t.Cleanup(func() {
				if mounted {
					unmountRoot(t, ms, root)
				}
				_ = s.Remove(ctx, "sb")
			})
			opts := superOptions(t, ms[0].Target)
			if got := slices.Contains(opts, "nobarrier"); got == flush {
				t.Errorf("disk options %v: nobarrier = %v; want %v", opts, got, !flush)
			}
			const marker = "written-before-syncfs-0123456789"
			if err := os.WriteFile(filepath.Join(root, "f"), []byte(marker), 0o644); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(ms[0].Target, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			err = unix.Syncfs(fd)
			unix.Close(fd)
			if err != nil {
				t.Fatalf("syncfs = %v", err)
			}
			// Read the image file itself, as a copy of it would.
			img, err := os.ReadFile(ms[0].Source)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(img), marker) {
				t.Errorf("the disk image does not hold data written before syncfs")
			}
			unmountRoot(t, ms, root)
			mounted = false
			if err := s.FlushDisk(ctx, "sb"); err != nil {
				t.Errorf("FlushDisk(sb) = %v", err)
			}
			if err := s.FlushDisk(ctx, "missing"); !errdefs.IsNotFound(err) {
				t.Errorf("FlushDisk(missing) = %v; want NotFound", err)
			}
		})
	}
}
