package volume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/testutil"
)

func openTestStore(t *testing.T, root string, recs Records) *Store {
	t.Helper()
	s, err := Open(testutil.Context(t), Config{Root: root, Records: recs})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return s
}

// mounted reports whether dir is a mount point in this mount namespace.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	_, _, ok, err := mount.At("/proc/self/mountinfo", dir)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestVolumeLifecycle: a volume is mounted once, keeps its files and its
// size limit, is found again by a new store (a restarted daemon) and
// leaves nothing behind when removed.
func TestVolumeLifecycle(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "mkfs.ext4")
	ctx := testutil.Context(t)
	root := t.TempDir()
	recs := newMemRecords()
	s := openTestStore(t, root, recs)
	t.Cleanup(func() { _ = s.Remove(context.Background(), "data"); s.Close() })

	v, err := s.Create(ctx, "data", MinBytes, map[string]string{"k": "v"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if v.SizeBytes != MinBytes || v.State != StateReady {
		t.Errorf("Create = %+v; want %d bytes, ready", v, MinBytes)
	}
	if _, err := s.Create(ctx, "data", 0, nil); !errdefs.IsAlreadyExists(err) {
		t.Errorf("second Create = %v; want already exists", err)
	}
	p, err := s.Path("data")
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(p)
	if err != nil || len(ents) != 0 {
		t.Errorf("a new volume holds %v (%v); want nothing", ents, err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("volume root owned by %d:%d (%v); want 0:0", st.Uid, st.Gid, err)
	}
	if err := os.WriteFile(filepath.Join(p, "kept"), []byte("yes"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The size is a hard limit.
	f, err := os.Create(filepath.Join(p, "big"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Write(make([]byte, 2*MinBytes))
	f.Close()
	if !errors.Is(err, unix.ENOSPC) {
		t.Errorf("writing twice the volume's size: %v; want ENOSPC", err)
	}
	os.Remove(filepath.Join(p, "big"))

	// A new store finds the volume mounted and uses it as it is.
	s.Close()
	s = openTestStore(t, root, recs)
	p, err = s.Path("data")
	if err != nil {
		t.Fatalf("Path after reopen: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(p, "kept")); err != nil || string(b) != "yes" {
		t.Errorf("file after reopen = %q, %v; want yes", b, err)
	}
	// Unmounted (a host reboot): a new store mounts it again.
	s.Close()
	if err := unix.Unmount(filepath.Join(root, "data", dataDir), 0); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, root, recs)
	p, _ = s.Path("data")
	if b, err := os.ReadFile(filepath.Join(p, "kept")); err != nil || string(b) != "yes" {
		t.Errorf("file after remount = %q, %v; want yes", b, err)
	}
	if got := s.List(); len(got) != 1 || got[0].Name != "data" || got[0].Labels["k"] != "v" {
		t.Errorf("List = %+v; want data with its label", got)
	}

	if err := s.Remove(ctx, "data"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if mounted(t, filepath.Join(root, "data", dataDir)) {
		t.Error("volume still mounted after Remove")
	}
	if _, err := os.Lstat(filepath.Join(root, "data")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("volume directory after Remove: %v; want gone", err)
	}
	if got, _ := recs.ListVolumes(ctx); len(got) != 0 {
		t.Errorf("records after Remove: %v; want none", got)
	}
	if loopUses(t, filepath.Join(root, "data", imageFile)) {
		t.Error("a loop device still holds the removed volume's image")
	}
}

// TestRemoveBusy: a volume whose file system is in use on the host stays,
// whole and usable.
func TestRemoveBusy(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "mkfs.ext4")
	ctx := testutil.Context(t)
	s := openTestStore(t, t.TempDir(), newMemRecords())
	t.Cleanup(func() { _ = s.Remove(context.Background(), "busy"); s.Close() })
	if _, err := s.Create(ctx, "busy", MinBytes, nil); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Path("busy")
	f, err := os.Create(filepath.Join(p, "open"))
	if err != nil {
		t.Fatal(err)
	}
	err = s.Remove(ctx, "busy")
	f.Close()
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("Remove of a busy volume = %v; want failed precondition, in use", err)
	}
	p, err = s.Path("busy")
	if err != nil {
		t.Fatalf("Path after a refused Remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(p, "open")); err != nil {
		t.Errorf("file after a refused Remove: %v", err)
	}
	if err := s.Remove(ctx, "busy"); err != nil {
		t.Errorf("Remove once closed: %v", err)
	}
}

// TestOpenRemovesLeftovers: what a create cut short left (a record in
// state creating, a directory without a record) is removed by Open.
func TestOpenRemovesLeftovers(t *testing.T) {
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "mkfs.ext4")
	ctx := testutil.Context(t)
	root := t.TempDir()
	recs := newMemRecords()
	// A create killed after it mounted its image, before its record said
	// ready.
	if err := shareRoot(root); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "half")
	if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := makeImage(ctx, findMkfs(), filepath.Join(dir, imageFile), MinBytes); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(ctx, filepath.Join(dir, imageFile), filepath.Join(dir, dataDir)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmount(filepath.Join(dir, dataDir)) })
	_ = recs.PutVolume(ctx, &Volume{Name: "half", SizeBytes: MinBytes, State: StateCreating})
	if err := os.MkdirAll(filepath.Join(root, "stray", dataDir), 0o700); err != nil {
		t.Fatal(err)
	}
	// A record whose name is not a volume name (a damaged database) goes
	// without its "files": they are never looked for outside the root.
	outside := filepath.Join(filepath.Dir(root), "escape")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	_ = recs.PutVolume(ctx, &Volume{Name: "../escape", SizeBytes: MinBytes, State: StateCreating})
	s := openTestStore(t, root, recs)
	defer s.Close()
	if got := s.List(); len(got) != 0 {
		t.Errorf("List = %v; want none", got)
	}
	for _, n := range []string{"half", "stray"} {
		if _, err := os.Lstat(filepath.Join(root, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Open: %v; want gone", n, err)
		}
	}
	if got, _ := recs.ListVolumes(ctx); len(got) != 0 {
		t.Errorf("records after Open: %v; want none", got)
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("%s after Open dropped a record named ../escape: %v; want it untouched", outside, err)
	}
}

// loopUses reports whether a loop device's backing file is img.
func loopUses(t *testing.T, img string) bool {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), img) {
			return true
		}
	}
	return false
}

// TestCreateFailureLeavesNothing: a create whose mkfs fails leaves no
// record, file or mount.
func TestCreateFailureLeavesNothing(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	root := t.TempDir()
	recs := newMemRecords()
	s, err := Open(ctx, Config{Root: root, Records: recs, Mkfs: "/bin/false"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Create(ctx, "broken", MinBytes, nil); err == nil || !strings.Contains(err.Error(), "mkfs.ext4") {
		t.Fatalf("Create with a failing mkfs = %v; want its error", err)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("%s after a failed create holds %v; want nothing", root, ents)
	}
	if got, _ := recs.ListVolumes(ctx); len(got) != 0 {
		t.Errorf("records after a failed create: %v; want none", got)
	}
	if _, err := s.Create(ctx, "broken", MinBytes, nil); errdefs.IsAlreadyExists(err) {
		t.Errorf("second Create after a failed one = %v; want the name free", err)
	}
}
