package daemon

import (
	"testing"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
)

func TestComputeDiskUsage(t *testing.T) {
	// Layers: base <- py <- app (image app on py); base <- tools (an unused
	// image); base <- cached (build cache only); orphan (nothing).
	in := dfInput{
		layers: []overlay.Layer{
			{Key: "base", Size: 100},
			{Key: "py", Parent: "base", Size: 50},
			{Key: "app", Parent: "py", Size: 10},
			{Key: "tools", Parent: "base", Size: 20},
			{Key: "cached", Parent: "base", Size: 7},
			{Key: "orphan", Size: 3},
			{Key: "host", Size: 1},
		},
		images: []sandbox.Image{
			{Name: "host", TopLayer: "host", Builtin: true},
			{Name: "py", TopLayer: "py"},
			{Name: "app", TopLayer: "app"},
			{Name: "tools", TopLayer: "tools"},
			{Name: "snap", TopLayer: "app", Disk: "snap", Memory: "/m"},
		},
		cache: []string{"cached", "py"},
		active: []overlay.ActiveUsage{
			{Key: "box1", Parent: "app", AllocatedBytes: 1000, DiskBytes: 1 << 30},
			{Key: "box2", Parent: "app", AllocatedBytes: 2000, DiskBytes: 1 << 30},
			{Key: "pooled", Parent: "host", AllocatedBytes: 400},
		},
		diskCache: 5000,
		boxes: []sandbox.Record{
			{ID: "box1", Image: "app", State: sandbox.StateRunning},
			{ID: "box2", Image: "snap", State: sandbox.StateError, Suspended: &sandbox.Suspension{MemoryBytes: 30}},
		},
		saved:       map[string]int64{"snap": 600},
		memory:      map[string]int64{"snap": 60},
		volumes:     map[string]int64{"data": 7000, "spare": 800},
		volumeUsers: map[string][]string{"data": {"box1"}},
	}
	du := computeDiskUsage(in)
	want := []rest.DiskUsageRow{
		// 4 images (host, py, app, tools), app used; layers host+base+py+app+tools;
		// only tools is freed by removing unused images (py's layers app keeps).
		{Type: "images", Total: 4, Active: 1, SizeBytes: 181, ReclaimableBytes: 20},
		// cached is kept by the cache alone; py is an image's too.
		{Type: "build_cache", Total: 2, Active: 1, SizeBytes: 7, ReclaimableBytes: 7},
		// box layers: app, py, base (box1, box2) and host (the pooled box).
		{Type: "layers", Total: 7, Active: 4, SizeBytes: 191, ReclaimableBytes: 3},
		// box2 is in state error: its disk and memory state are reclaimable.
		{Type: "sandboxes", Total: 2, Active: 1, SizeBytes: 3030, ReclaimableBytes: 2030},
		{Type: "snapshots", Total: 1, Active: 1, SizeBytes: 660, ReclaimableBytes: 0},
		{Type: "pools", Total: 1, Active: 1, SizeBytes: 400, ReclaimableBytes: 400},
		{Type: "disk_cache", SizeBytes: 5000},
		// spare is mounted by no sandbox: volume rm frees it.
		{Type: "volumes", Total: 2, Active: 1, SizeBytes: 7800, ReclaimableBytes: 800},
	}
	if len(du.Summary) != len(want) {
		t.Fatalf("summary = %+v; want %d rows", du.Summary, len(want))
	}
	for i, w := range want {
		if du.Summary[i] != w {
			t.Errorf("summary[%d] = %+v; want %+v", i, du.Summary[i], w)
		}
	}
	byName := map[string]rest.ImageDiskUsage{}
	for _, u := range du.Images {
		byName[u.Name] = u
	}
	// app: app(10) py(50) base(100); py and base are other images' too,
	// app the snapshot's.
	if got, w := byName["app"], (rest.ImageDiskUsage{Name: "app", SizeBytes: 160, SharedBytes: 160, Sandboxes: 1}); got != w {
		t.Errorf("app = %+v; want %+v", got, w)
	}
	if got, w := byName["tools"], (rest.ImageDiskUsage{Name: "tools", SizeBytes: 120, SharedBytes: 100, UniqueBytes: 20}); got != w {
		t.Errorf("tools = %+v; want %+v", got, w)
	}
	if len(du.Snapshots) != 1 || du.Snapshots[0].SizeBytes != 660 || du.Snapshots[0].Sandboxes != 1 {
		t.Errorf("snapshots = %+v; want snap with 660 bytes, 1 sandbox", du.Snapshots)
	}
	if len(du.Sandboxes) != 2 || du.Sandboxes[1] != (rest.SandboxDiskUsage{ID: "box2", Image: "snap", State: "error", DiskBytes: 2000, MemoryBytes: 30, LimitBytes: 1 << 30}) {
		t.Errorf("sandboxes = %+v", du.Sandboxes)
	}
}
