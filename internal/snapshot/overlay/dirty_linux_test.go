package overlay

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// imageCache returns the bytes of file's page cache and of those the dirty
// or under write-back ones (cachestat(2), Linux 6.5), or skips t.
func imageCache(t *testing.T, file string) (cached, dirty int64) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st unix.Cachestat_t
	err = unix.Cachestat(uint(f.Fd()), &unix.CachestatRange{}, &st, 0)
	if errors.Is(err, unix.ENOSYS) {
		t.Skip("cachestat(2) is missing (Linux < 6.5): cannot see the disk image's dirty pages")
	}
	if err != nil {
		t.Fatalf("cachestat(%s) = %v", file, err)
	}
	page := int64(os.Getpagesize())
	return int64(st.Cache) * page, int64(st.Dirty+st.Writeback) * page
}

// fillDisk writes n bytes to a file in the box and flushes the box's file
// system to its disk image (as fork does before it copies the image).
func fillDisk(t *testing.T, b *layerBox, n int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(b.root, "data"), make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
	syncDisk(t, b.root)
}

func bdiSetting(t *testing.T, dev, name string) string {
	t.Helper()
	b, err := os.ReadFile(bdiFile(dev, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestVolumeDirtyLimit: the disk volume's loop device limits the dirty page
// cache of the disk images on it (by default 32 MiB), so that a box that
// wrote 256 MiB and synced leaves at most about that much for a reflink
// of its image to write back first; with 0 the kernel's limits apply.
func TestVolumeDirtyLimit(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)

	s := newMountedStore(t, DiskVolumeAuto, WithDefaultDiskBytes(512<<20))
	dev := s.vol.device
	if dev == "" {
		t.Fatalf("the volume's loop device is unknown")
	}
	if got := bdiSetting(t, dev, "strict_limit"); got != "1" {
		t.Errorf("%s strict_limit = %s; want 1", dev, got)
	}
	if max, err := os.ReadFile(bdiFile(dev, "max_bytes")); err == nil {
		// The kernel keeps a ratio of its dirty limit: the bytes read back
		// are rounded.
		got, err := strconv.ParseInt(strings.TrimSpace(string(max)), 10, 64)
		if err != nil || got < DefaultVolumeDirtyBytes*95/100 || got > DefaultVolumeDirtyBytes*105/100 {
			t.Errorf("%s max_bytes = %d, %v; want about %d", dev, got, err, DefaultVolumeDirtyBytes)
		}
	}
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "x")); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Prepare(ctx, "sb", "base", sandbox.PrepareOpts{})
	if err != nil {
		t.Fatal(err)
	}
	b := &layerBox{key: "sb", ms: ms, root: mountRoot(t, ms)}
	fillDisk(t, b, 256<<20)
	if _, dirty := imageCache(t, b.ms[0].Source); dirty > 2*DefaultVolumeDirtyBytes {
		t.Errorf("after writing 256 MiB and syncfs, the disk image holds %d MiB dirty; want at most about %d MiB", dirty>>20, DefaultVolumeDirtyBytes>>20)
	}
	unmountRoot(t, ms, b.root)
	if err := s.Remove(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	// An idle Close unmounts the volume: its loop device, free for any
	// file now, must not keep the limit.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if got := bdiSetting(t, dev, "strict_limit"); got != "0" {
		t.Errorf("after the volume was unmounted, %s strict_limit = %s; want 0", dev, got)
	}

	s0 := newMountedStore(t, DiskVolumeAuto, WithVolumeDirtyBytes(0))
	if got := bdiSetting(t, s0.vol.device, "strict_limit"); got != "0" {
		t.Errorf("WithVolumeDirtyBytes(0): %s strict_limit = %s; want 0", s0.vol.device, got)
	}
}

// TestDiskDirectIO: with WithDiskDirectIO a box's disk is attached with
// direct I/O, and what the box wrote and synced is not in the image's page
// cache at all; by default the disk is buffered. A template of 1 KiB blocks
// left by an older build is made again (a loop device with direct I/O over
// a reflinked image has 4 KiB blocks, and cannot mount it).
func TestDiskDirectIO(t *testing.T) {
	testutil.RequiresRoot(t)
	mkfs := testutil.RequiresBinary(t, "mkfs.ext4")
	ctx := testutil.Context(t)
	for _, dio := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "direct"}[dio], func(t *testing.T) {
			s := newMountedStore(t, DiskVolumeAuto, WithDiskDirectIO(dio))
			old := filepath.Join(s.disks, "templates", fmt.Sprintf("ext4-%d.img", s.opts.defaultDiskBytes))
			if err := os.WriteFile(old, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(old, s.opts.defaultDiskBytes); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(mkfs, "-q", "-F", "-b", "1024", old).CombinedOutput(); err != nil {
				t.Fatalf("mkfs.ext4: %v: %s", err, out)
			}
			if got := ext4BlockSize(old); got != 1024 {
				t.Fatalf("ext4BlockSize(a 1 KiB template) = %d; want 1024", got)
			}
			if err := s.CreateLayer(ctx, "base", "", writeFile("a", "x")); err != nil {
				t.Fatal(err)
			}
			b := prepareMounted(t, s, "sb", "base", sandbox.PrepareOpts{})
			if got := slices.Contains(b.ms[0].Options, "direct-io"); got != dio {
				t.Errorf("disk mount options %v: direct-io = %v; want %v", b.ms[0].Options, got, dio)
			}
			fillDisk(t, b, 32<<20)
			cached, _ := imageCache(t, b.ms[0].Source)
			if dio && cached > 4<<20 {
				t.Errorf("direct I/O: the disk image has %d MiB in the page cache after a 32 MiB write; want almost none", cached>>20)
			}
			if !dio && cached < 32<<20 {
				t.Errorf("buffered: the disk image has %d MiB in the page cache after a 32 MiB write; want all of it", cached>>20)
			}
			if got, err := os.ReadFile(filepath.Join(b.root, "a")); err != nil || string(got) != "x" {
				t.Errorf("ReadFile(a) = %q, %v; want x", got, err)
			}
			if got := ext4BlockSize(s.diskImage("sb", mustActiveMeta(t, s, "sb"))); got != diskBlockSize {
				t.Errorf("block size of the disk = %d; want %d", got, diskBlockSize)
			}
		})
	}
	if got := ext4BlockSize("/proc/self/status"); got != 0 {
		t.Errorf("ext4BlockSize(not ext4) = %d; want 0", got)
	}
}

func mustActiveMeta(t *testing.T, s *Store, key string) activeMeta {
	t.Helper()
	m, err := s.activeMeta(key)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
