//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestRemovedBoxLeavesNoMemoryCharged: page cache a box read first (here
// the image's busybox, evicted from the host's cache beforehand) is shared
// with everyone and charged to the box's memory cgroup. Removing the box
// must give it back: before, the removed cgroup lingered as a dying one,
// holding the pages (and counted in /proc/cgroups), for as long as they
// stayed cached, which on a host with free memory is forever.
func TestRemovedBoxLeavesNoMemoryCharged(t *testing.T) {
	d := startDaemon(t)
	id := d.create("--image", "busybox")
	bbs, _ := filepath.Glob(filepath.Join(d.root, "overlay", "layers", "*", "fs", "bin", "busybox"))
	if len(bbs) == 0 {
		t.Fatalf("no busybox binary under %s/overlay/layers", d.root)
	}
	for _, bb := range bbs {
		evict(t, bb)
	}
	d.must("exec", id, "--", "sh", "-c", "cat /bin/busybox > /dev/null")
	if c := fileCharged(t, d.cgroup+"/"+id); c == 0 {
		t.Fatalf("the box's memory cgroup has no page cache charged after reading busybox")
	}
	d.must("rm", id)
	// The parent's counters include its removed children's charges: a
	// dying child's pages stay counted here.
	if c := fileCharged(t, d.cgroup); c != 0 {
		t.Errorf("%d bytes of page cache still charged under %s after the box was removed; want 0", c, d.cgroup)
	}
	d.requireNoLeftovers()
}

// evict drops path's pages from the host's page cache.
func evict(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatalf("fadvise %s: %v", path, err)
	}
}

// fileCharged returns the page cache charged to the memory cgroup rel and
// its descendants, removed ones included (v1 total_cache, v2 file).
func fileCharged(t *testing.T, rel string) int64 {
	t.Helper()
	stat, key := filepath.Join("/sys/fs/cgroup/memory", rel, "memory.stat"), "total_cache"
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		stat, key = filepath.Join("/sys/fs/cgroup", rel, "memory.stat"), "file"
	}
	b, err := os.ReadFile(stat)
	if err != nil {
		t.Fatalf("read %s: %v", stat, err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key+" "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("%s: %s: %v", stat, l, err)
			}
			return n
		}
	}
	t.Fatalf("%s has no %s", stat, key)
	return 0
}

// TestRemovedBoxesGiveBackLoopDevices: each box's disk takes a loop
// device, which stays in the kernel after the disk is unmounted (about
// 100 KiB of slab and per-CPU memory each) unless it is removed. After a
// burst of boxes the daemon removes the free ones beyond its reserve of
// 16.
func TestRemovedBoxesGiveBackLoopDevices(t *testing.T) {
	const boxes, reserve = 24, 16
	before := freeLoopCount(t)
	if before >= boxes {
		t.Skipf("%d free loop devices before the test: the burst would not add any", before)
	}
	d := startDaemon(t)
	ids := make([]string, boxes)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, errOut, err := d.corral("create", "--image", "busybox", "--no-pool")
			if err != nil {
				t.Errorf("create: %v: %s", err, errOut)
			}
			ids[i] = strings.TrimSpace(out)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	d.must(append([]string{"rm", "-f"}, ids...)...)
	want := max(reserve, before)
	deadline := time.Now().Add(30 * time.Second)
	n := freeLoopCount(t)
	for n > want && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		n = freeLoopCount(t)
	}
	if n > want {
		t.Errorf("%d free loop devices 30 s after %d boxes were removed; want at most %d", n, boxes, want)
	}
	d.requireNoLeftovers()
}

// freeLoopCount counts the loop devices attached to no file.
func freeLoopCount(t *testing.T) int {
	t.Helper()
	devs, _ := filepath.Glob("/sys/block/loop*")
	n := 0
	for _, dev := range devs {
		if _, err := os.Stat(filepath.Join(dev, "loop", "backing_file")); err != nil {
			n++
		}
	}
	return n
}
