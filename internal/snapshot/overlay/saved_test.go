package overlay

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestSavedDisks: SaveDisk, Disks, RemoveDisk, Mounts and Prepare from a
// saved disk or a writable layer, with their errors, on a store without a
// real file system (the copies are sparse copies of plain files).
func TestSavedDisks(t *testing.T) {
	ctx := testutil.Context(t)
	s := newTestStore(t)
	for _, l := range []struct{ key, parent string }{{"base", ""}, {"top", "base"}, {"other", ""}} {
		if err := s.CreateLayer(ctx, l.key, l.parent, writeFile("a", l.key)); err != nil {
			t.Fatal(err)
		}
	}
	const size = 16 << 20
	srcMounts, err := s.Prepare(ctx, "src", "top", sandbox.PrepareOpts{DiskBytes: size})
	if err != nil {
		t.Fatal(err)
	}
	// Give the (fake) disk some content to copy.
	img := filepath.Join(s.root, "active", "src", "disk.img")
	if err := os.WriteFile(img, []byte("source disk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}

	ms, err := s.Mounts(ctx, "src")
	if diff := cmp.Diff(srcMounts, ms); err != nil || diff != "" {
		t.Errorf("Mounts(src) = %v; differs from what Prepare returned (-want +got):\n%s", err, diff)
	}
	if _, err := s.Mounts(ctx, "missing"); !errdefs.IsNotFound(err) {
		t.Errorf("Mounts(missing) = %v; want NotFound", err)
	}

	d, err := s.SaveDisk(ctx, "src", "snap")
	if err != nil {
		t.Fatalf("SaveDisk(src, snap) = %v", err)
	}
	if d.Name != "snap" || d.Parent != "top" || d.DiskBytes != size || d.Reflinked || d.Created.IsZero() {
		t.Errorf("SaveDisk(src, snap) = %+v; want snap on top, %d bytes, not reflinked", d, size)
	}
	for _, tc := range []struct {
		key, name string
		want      error
	}{
		{"src", "snap", errdefs.ErrAlreadyExists},
		{"missing", "snap2", errdefs.ErrNotFound},
		{"src", "../x", errdefs.ErrInvalidArgument},
		{"../src", "snap2", errdefs.ErrInvalidArgument},
	} {
		if _, err := s.SaveDisk(ctx, tc.key, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("SaveDisk(%q, %q) = %v; want %v", tc.key, tc.name, err, tc.want)
		}
	}
	disks, err := s.Disks(ctx)
	if err != nil || len(disks) != 1 || disks[0].Name != "snap" || disks[0].Parent != "top" || disks[0].UsedBytes <= 0 {
		t.Errorf("Disks() = %+v, %v; want snap on top using > 0 bytes", disks, err)
	}

	for _, tc := range []struct {
		name, parent string
		opts         sandbox.PrepareOpts
		want         error
		msg          []string // the error names these
	}{
		{"missing disk", "top", sandbox.PrepareOpts{FromDisk: "nope"}, errdefs.ErrNotFound, []string{"nope"}},
		{"missing layer", "top", sandbox.PrepareOpts{FromActive: "nope"}, errdefs.ErrNotFound, []string{"nope"}},
		{"both", "top", sandbox.PrepareOpts{FromDisk: "snap", FromActive: "src"}, errdefs.ErrInvalidArgument, nil},
		{"disk size", "top", sandbox.PrepareOpts{FromDisk: "snap", DiskBytes: 32 << 20}, errdefs.ErrInvalidArgument, []string{fmt.Sprint(32 << 20), fmt.Sprint(size)}},
		{"layer size", "top", sandbox.PrepareOpts{FromActive: "src", DiskBytes: 8 << 20}, errdefs.ErrInvalidArgument, []string{fmt.Sprint(8 << 20), fmt.Sprint(size)}},
		{"parent", "other", sandbox.PrepareOpts{FromDisk: "snap"}, errdefs.ErrInvalidArgument, []string{`"other"`, `"top"`}},
		{"no parent", "", sandbox.PrepareOpts{FromActive: "src"}, errdefs.ErrInvalidArgument, []string{`"top"`}},
		{"existing", "top", sandbox.PrepareOpts{FromActive: "src"}, errdefs.ErrAlreadyExists, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "copy"
			if tc.name == "existing" {
				key = "src"
			}
			_, err := s.Prepare(ctx, key, tc.parent, tc.opts)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Prepare(%q, %q, %+v) = %v; want %v", key, tc.parent, tc.opts, err, tc.want)
			}
			for _, m := range tc.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Prepare(%q, %q, %+v) = %v; want it to name %s", key, tc.parent, tc.opts, err, m)
				}
			}
			if _, err := os.Lstat(s.path("active", "copy")); err == nil {
				t.Errorf("a failed Prepare left active/copy")
			}
		})
	}

	for _, tc := range []struct {
		key  string
		opts sandbox.PrepareOpts
	}{
		{"from-disk", sandbox.PrepareOpts{FromDisk: "snap"}},
		{"from-active", sandbox.PrepareOpts{FromActive: "src", DiskBytes: size}},
	} {
		ms, err := s.Prepare(ctx, tc.key, "top", tc.opts)
		if err != nil {
			t.Fatalf("Prepare(%q, %+v) = %v", tc.key, tc.opts, err)
		}
		b, err := os.ReadFile(ms[0].Source)
		if err != nil || len(b) != size || !strings.HasPrefix(string(b), "source disk") {
			t.Errorf("Prepare(%q) disk: %d bytes starting %q, %v; want a copy of src's", tc.key, len(b), b[:min(len(b), 11)], err)
		}
		if lower, _ := ms[1].Option("lowerdir"); !strings.HasPrefix(lower, s.path("layers", "top", "fs")+":") {
			t.Errorf("Prepare(%q) lowerdir = %q; want top's chain", tc.key, lower)
		}
	}
	// Writes to the copy do not reach the saved disk.
	if err := os.WriteFile(filepath.Join(s.root, "active", "from-disk", "disk.img"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(s.root, "saved", "snap", "disk.img")); !strings.HasPrefix(string(b), "source disk") {
		t.Errorf("saved disk starts %q after writing its copy; want unchanged", b[:11])
	}

	// The saved disk keeps its parents alive after every writable layer on
	// them is gone.
	for _, k := range []string{"src", "from-disk", "from-active"} {
		if err := s.Remove(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"top", "base"} {
		if err := s.RemoveLayer(ctx, k); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("RemoveLayer(%q) = %v; want FailedPrecondition", k, err)
		}
	}
	if err := s.RemoveLayer(ctx, "top"); err == nil || !strings.Contains(err.Error(), "saved disk snap") {
		t.Errorf("RemoveLayer(top) = %v; want it to name saved disk snap", err)
	}
	for _, name := range []string{"snap", "snap", "never"} {
		if err := s.RemoveDisk(ctx, name); err != nil {
			t.Errorf("RemoveDisk(%q) = %v; want nil", name, err)
		}
	}
	if disks, err := s.Disks(ctx); err != nil || len(disks) != 0 {
		t.Errorf("Disks() = %+v, %v after RemoveDisk; want none", disks, err)
	}
	if _, err := s.Prepare(ctx, "copy", "top", sandbox.PrepareOpts{FromDisk: "snap"}); !errdefs.IsNotFound(err) {
		t.Errorf("Prepare from a removed disk = %v; want NotFound", err)
	}
	for _, k := range []string{"top", "base"} {
		if err := s.RemoveLayer(ctx, k); err != nil {
			t.Errorf("RemoveLayer(%q) = %v after RemoveDisk; want nil", k, err)
		}
	}
}

// TestScratchRemoved: what a crash in the middle of a copy leaves (a
// partial disk image, a saved disk not yet renamed into place) is gone
// after New, and no half-made saved disk is ever listed.
func TestScratchRemoved(t *testing.T) {
	ctx := testutil.Context(t)
	s := newTestStore(t)
	if err := os.WriteFile(s.scratchFile(), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	half := filepath.Join(s.disks, "tmp", "saved-123")
	if err := os.Mkdir(half, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(half, "disk.img"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if disks, err := s.Disks(ctx); err != nil || len(disks) != 0 {
		t.Errorf("Disks() = %+v, %v with a copy in progress; want none", disks, err)
	}
	s2, err := New(s.root, WithPoolSize(0), WithDiskVolume(DiskVolumeOff), WithLogger(log.G(ctx)))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if left, _ := os.ReadDir(filepath.Join(s2.disks, "tmp")); len(left) != 0 {
		t.Errorf("tmp holds %d entries after New; want 0", len(left))
	}
}
