package overlay

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/osthread"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// requireVolume skips unless mkfs.xfs is installed, and fails unless s
// made its disk volume (the test root is on a file system without
// reflink, as the CI machine's ext4).
func requireVolume(t testing.TB, s *Store) {
	t.Helper()
	if s.vol == nil {
		if findMkfsXFS() == "" {
			t.Skip("mkfs.xfs not installed (apt-get install xfsprogs)")
		}
		if canReflink(s.root) {
			t.Skip("the test root's file system reflinks itself: no disk volume to test")
		}
		t.Fatalf("New(%s) made no disk volume", s.root)
	}
	if !s.reflink {
		t.Fatalf("disk volume %s cannot reflink", s.disks)
	}
}

// newMountedStore returns a store on a fresh root with the disk volume as
// configured by volume (DiskVolumeAuto or DiskVolumeOff).
func newMountedStore(t testing.TB, volume string, opts ...Opt) *Store {
	t.Helper()
	s, err := New(t.TempDir(), append([]Opt{WithDefaultDiskBytes(64 << 20), WithPoolSize(0), WithDiskVolume(volume), testLogger(t)}, opts...)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if m, _ := volumeMounted(s.path("disks")); m {
			t.Errorf("disk volume still mounted after Close")
		}
	})
	if volume == DiskVolumeAuto {
		requireVolume(t, s)
	}
	return s
}

// testLogger sends the store's own logs to the test's output.
func testLogger(t testing.TB) Opt { return WithLogger(log.G(testutil.Context(t))) }

func volumeMounted(dir string) (bool, error) {
	_, _, ok, err := mount.At("/proc/thread-self/mountinfo", dir)
	return ok, err
}

// syncDisk flushes the file system of a mounted writable layer to its
// disk image, as the runtime's Syncer does before a copy.
func syncDisk(t testing.TB, root string) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		t.Fatalf("syncfs(%s) = %v", root, err)
	}
}

// layerBox is a prepared and mounted writable layer.
type layerBox struct {
	key  string
	ms   []mount.Mount
	root string
}

func prepareMounted(t *testing.T, s *Store, key, parent string, opts sandbox.PrepareOpts) *layerBox {
	t.Helper()
	ctx := testutil.Context(t)
	ms, err := s.Prepare(ctx, key, parent, opts)
	if err != nil {
		t.Fatalf("Prepare(%q, %+v) = %v", key, opts, err)
	}
	// Removed also when the mount fails: a writable layer left behind
	// keeps the store's disk volume mounted after the test.
	t.Cleanup(func() {
		if err := s.Remove(ctx, key); err != nil {
			t.Errorf("Remove(%q) = %v", key, err)
		}
	})
	b := &layerBox{key: key, ms: ms, root: mountRoot(t, ms)}
	t.Cleanup(func() { unmountRoot(t, ms, b.root) })
	return b
}

func (b *layerBox) read(t *testing.T, name string) (string, error) {
	t.Helper()
	s, err := os.ReadFile(filepath.Join(b.root, name))
	return string(s), err
}

func (b *layerBox) write(t *testing.T, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(b.root, name), []byte(body), 0o644); err != nil {
		t.Fatalf("WriteFile(%s in %s) = %v", name, b.key, err)
	}
}

func (b *layerBox) wantFile(t *testing.T, name, want string) {
	t.Helper()
	got, err := b.read(t, name)
	if want == "" {
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: ReadFile(%s) = %q, %v; want it absent", b.key, name, got, err)
		}
		return
	}
	if err != nil || got != want {
		t.Errorf("%s: ReadFile(%s) = %q, %v; want %q", b.key, name, got, err, want)
	}
}

// TestCloneDisk: a copy of a writable layer's disk (from the layer itself,
// as fork does, or from a saved disk, as a snapshot does) holds what was
// written through the mounted overlay, including a whiteout of a deleted
// lower file; later writes to either side are invisible to the other. On
// the disk volume the copies are reflinks; without it, sparse copies.
func TestCloneDisk(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, volume := range []string{DiskVolumeAuto, DiskVolumeOff} {
		t.Run("volume="+volume, func(t *testing.T) {
			ctx := testutil.Context(t)
			s := newMountedStore(t, volume)
			wantReflink := s.vol != nil
			if err := s.CreateLayer(ctx, "base", "", func(dir string) error {
				for _, f := range []string{"keep", "gone", "edit"} {
					if err := os.WriteFile(filepath.Join(dir, f), []byte("base "+f), 0o644); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			src := prepareMounted(t, s, "src", "base", sandbox.PrepareOpts{})
			src.write(t, "new", "written in src")
			src.write(t, "edit", "edited in src")
			if err := os.Remove(filepath.Join(src.root, "gone")); err != nil {
				t.Fatal(err)
			}
			syncDisk(t, src.root)

			d, err := s.SaveDisk(ctx, "src", "snap")
			if err != nil {
				t.Fatalf("SaveDisk(src, snap) = %v", err)
			}
			t.Cleanup(func() { _ = s.RemoveDisk(ctx, "snap") })
			if d.Reflinked != wantReflink || d.Parent != "base" || d.DiskBytes != 64<<20 {
				t.Errorf("SaveDisk = %+v; want reflinked %v, parent base, 64 MiB", d, wantReflink)
			}
			fromActive := prepareMounted(t, s, "fork", "base", sandbox.PrepareOpts{FromActive: "src"})
			fromDisk := prepareMounted(t, s, "restored", "base", sandbox.PrepareOpts{FromDisk: "snap", DiskBytes: 64 << 20})
			if s.vol != nil && !strings.HasPrefix(fromActive.ms[0].Source, "/proc/") {
				t.Errorf("disk source on the volume = %q; want a /proc/<pid>/fd path", fromActive.ms[0].Source)
			}

			for _, b := range []*layerBox{src, fromActive, fromDisk} {
				b.wantFile(t, "keep", "base keep")
				b.wantFile(t, "new", "written in src")
				b.wantFile(t, "edit", "edited in src")
				b.wantFile(t, "gone", "") // the whiteout was copied
			}
			src.write(t, "later", "src")
			fromActive.write(t, "later", "fork")
			fromDisk.write(t, "edit", "edited in restored")
			syncDisk(t, fromDisk.root)
			src.wantFile(t, "later", "src")
			fromActive.wantFile(t, "later", "fork")
			fromDisk.wantFile(t, "later", "")
			src.wantFile(t, "edit", "edited in src")
			fromActive.wantFile(t, "edit", "edited in src")
			fromDisk.wantFile(t, "edit", "edited in restored")

			// The saved disk did not change with its copy: a second copy
			// still has src's state.
			again := prepareMounted(t, s, "again", "base", sandbox.PrepareOpts{FromDisk: "snap"})
			again.wantFile(t, "edit", "edited in src")
			again.wantFile(t, "later", "")
			again.wantFile(t, "gone", "")
		})
	}
}

// TestDiskVolume: New mounts the disk volume (XFS with reflink, a loop
// device with autoclear backed by <root>/disks.img); Close leaves it while
// a writable layer exists; a second New reuses it, also when only a loop
// device is left of it (its file system alive in another mount namespace),
// never attaching the image twice; Close unmounts it when idle and the
// loop device goes; orphan disks on it are removed.
func TestDiskVolume(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	root := t.TempDir()
	dir, image := filepath.Join(root, "disks"), filepath.Join(root, "disks.img")
	open := func() *Store {
		t.Helper()
		s, err := New(root, WithDefaultDiskBytes(16<<20), WithPoolSize(0), testLogger(t))
		if err != nil {
			t.Fatalf("New() = %v", err)
		}
		requireVolume(t, s)
		return s
	}
	wantVolume := func(when string, mounted bool) {
		t.Helper()
		m, err := volumeMounted(dir)
		if err != nil || m != mounted {
			t.Fatalf("%s: volume mounted = %v, %v; want %v", when, m, err, mounted)
		}
		loops := allLoopsBacking(t, root)
		want := 0
		if mounted {
			want = 1
		}
		if len(loops) != want {
			t.Fatalf("%s: loop devices backed by the root: %v; want %d, of %s", when, loops, want, image)
		}
		if want == 1 && !strings.HasSuffix(loops[0], " -> "+image) {
			t.Fatalf("%s: loop device %s; want one backed by %s", when, loops[0], image)
		}
	}
	t.Cleanup(func() { _ = mount.Unmount(dir) })

	s := open()
	wantVolume("after New", true)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.XFS_SUPER_MAGIC {
		t.Errorf("statfs(%s) type = %#x, %v; want XFS", dir, st.Type, err)
	}
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prepare(ctx, "sb", "base", sandbox.PrepareOpts{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantVolume("after Close with a writable layer", true)

	// A disk whose writable layer is gone (a crash) goes at the next New.
	orphan := filepath.Join(dir, "active", "orphan.img")
	if err := os.WriteFile(orphan, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s = open()
	wantVolume("after a second New", true)
	if _, err := os.Lstat(orphan); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Lstat(orphan disk) = %v; want ENOENT", err)
	}
	if ms, err := s.Mounts(ctx, "sb"); err != nil {
		t.Errorf("Mounts(sb) after a restart = %v", err)
	} else {
		root := mountRoot(t, ms)
		if b, err := os.ReadFile(filepath.Join(root, "a")); err != nil || string(b) != "x" {
			t.Errorf("ReadFile(a) = %q, %v; want x", b, err)
		}
		unmountRoot(t, ms, root)
	}
	if err := s.Remove(ctx, "sb"); err != nil {
		t.Fatal(err)
	}

	// The volume's file system lives on in a mount namespace made while it
	// was mounted (as the runtime's): Close unmounts it on the host, but
	// its loop device stays, and New must mount that device again.
	ns := newNSThread(t)
	if err := ns.do(func() error { // as on a host whose "/" is private
		return unix.Mount("", dir, "", unix.MS_PRIVATE, "")
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if m, _ := volumeMounted(dir); m {
		t.Fatalf("volume mounted after an idle Close")
	}
	if loops := allLoopsBacking(t, root); len(loops) != 1 {
		t.Fatalf("loop devices with the volume alive elsewhere: %v; want 1", loops)
	}
	s = open()
	wantVolume("New with the volume alive in another namespace", true)
	ns.close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The namespace's mounts are released by the kernel shortly after its
	// thread exits; then the loop device detaches itself (autoclear).
	for i := 0; len(allLoopsBacking(t, root)) > 0 && i < 500; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	wantVolume("after an idle Close", false)
}

// TestDiskVolumePath: disk_volume set to a path makes the volume's image
// there (here on the same file system as the root, which does not matter)
// and mounts it on <root>/disks.
func TestDiskVolumePath(t *testing.T) {
	testutil.RequiresRoot(t)
	if findMkfsXFS() == "" {
		t.Skip("mkfs.xfs not installed (apt-get install xfsprogs)")
	}
	image := filepath.Join(t.TempDir(), "vol", "disks.img")
	s := newMountedStore(t, image)
	if s.vol == nil || s.vol.image != image || !s.reflink {
		t.Fatalf("New(disk volume %s): volume %+v, reflink %v; want that image, reflinks", image, s.vol, s.reflink)
	}
	if loops := allLoopsBacking(t, filepath.Dir(image)); len(loops) != 1 {
		t.Errorf("loop devices backed by %s: %v; want 1", image, loops)
	}
	if m, err := volumeMounted(s.path("disks")); !m || err != nil {
		t.Errorf("volume mounted on %s = %v, %v; want true", s.path("disks"), m, err)
	}
}

// TestVolumeInOtherNamespace: the disks of the volume can be mounted from
// a private mount namespace made before the volume was (as the runtime's
// thread is; on a host whose "/" is private nothing propagates into it)
// and from one made after.
func TestVolumeInOtherNamespace(t *testing.T) {
	testutil.RequiresRoot(t)
	before := newNSThread(t)
	ctx := testutil.Context(t)
	s := newMountedStore(t, DiskVolumeAuto)
	after := newNSThread(t)
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "base")); err != nil {
		t.Fatal(err)
	}
	for name, ns := range map[string]*nsThread{"before": before, "after": after} {
		t.Run(name, func(t *testing.T) {
			key := "sb-" + name
			ms, err := s.Prepare(ctx, key, "base", sandbox.PrepareOpts{})
			if err != nil {
				t.Fatal(err)
			}
			root := filepath.Join(t.TempDir(), "rootfs")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			err = ns.do(func() error {
				if err := mount.All(ms, root); err != nil {
					return err
				}
				defer func() {
					_ = mount.Unmount(root)
					_ = mount.Unmount(ms[0].Target)
				}()
				if b, err := os.ReadFile(filepath.Join(root, "a")); err != nil || string(b) != "base" {
					return fmt.Errorf("ReadFile(a) = %q, %v; want base", b, err)
				}
				return os.WriteFile(filepath.Join(root, "b"), []byte(name), 0o644)
			})
			if err != nil {
				t.Fatalf("mount and use the disk in a namespace made %s the volume: %v", name, err)
			}
			if err := s.Remove(ctx, key); err != nil {
				t.Fatal(err)
			}
		})
	}
	before.close()
	after.close()
}

// nsThread is an OS thread in a private mount namespace whose "/" is a
// recursive slave, as the runtime's.
type nsThread struct {
	reqs chan func()
	done chan struct{}
}

func newNSThread(t testing.TB) *nsThread {
	t.Helper()
	ns := &nsThread{reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	osthread.Throwaway(func() { // the thread ends with the goroutine
		defer close(ns.done)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			errc <- err
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for fn := range ns.reqs {
			fn()
		}
	})
	if err := <-errc; err != nil {
		t.Fatalf("private mount namespace: %v", err)
	}
	t.Cleanup(ns.close)
	return ns
}

func (ns *nsThread) do(fn func() error) error {
	errc := make(chan error, 1)
	ns.reqs <- func() { errc <- fn() }
	return <-errc
}

func (ns *nsThread) close() {
	select {
	case <-ns.done:
		return
	default:
	}
	close(ns.reqs)
	<-ns.done
}

// BenchmarkCloneActive measures Prepare with FromActive (fork's disk copy)
// of a writable layer that wrote 1 MiB or 1 GiB, on the disk volume
// (reflinks: the time should not grow with the data) and without it
// (sparse copies: it grows with the data). Compare the sub-benchmarks'
// ns/op: `go test -bench CloneActive ./internal/snapshot/overlay/` (root,
// CORRAL_TEST_PRIVILEGED=1).
func BenchmarkCloneActive(b *testing.B) {
	testutil.RequiresRoot(b)
	for _, volume := range []string{DiskVolumeAuto, DiskVolumeOff} {
		for _, written := range []int64{1 << 20, 1 << 30} {
			b.Run(fmt.Sprintf("volume=%s/written=%dMiB", volume, written>>20), func(b *testing.B) {
				ctx := testutil.Context(b)
				s := newMountedStore(b, volume, WithDefaultDiskBytes(2<<30))
				if err := s.CreateLayer(ctx, "base", "", writeFile("a", "x")); err != nil {
					b.Fatal(err)
				}
				ms, err := s.Prepare(ctx, "src", "base", sandbox.PrepareOpts{})
				if err != nil {
					b.Fatal(err)
				}
				root := mountRoot(b, ms)
				b.Cleanup(func() {
					unmountRoot(b, ms, root)
					_ = s.Remove(ctx, "src")
				})
				writeData(b, filepath.Join(root, "data"), written)
				syncDisk(b, root)
				reflinked := 0.0
				for i := 0; b.Loop(); i++ {
					key := fmt.Sprintf("fork-%d", i)
					ms, err := s.Prepare(ctx, key, "base", sandbox.PrepareOpts{FromActive: "src"})
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					if strings.HasPrefix(ms[0].Source, "/proc/") {
						reflinked = 1
					}
					if err := s.Remove(ctx, key); err != nil {
						b.Fatal(err)
					}
					s.bg.Wait() // deletions must not overlap the next copy
					b.StartTimer()
				}
				b.ReportMetric(reflinked, "volume")
			})
		}
	}
}

// writeData writes n bytes of non-zero data to a new file name.
func writeData(t testing.TB, name string, n int64) {
	t.Helper()
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			t.Fatalf("write %s: %v", name, err)
		}
	}
}
