package overlay

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestCommit: changes made in a mounted writable layer (a new file, a
// deleted lower file) reach fill as the upper directory, in overlay form,
// and become a layer on the writable layer's parent; the mount Commit made
// is gone afterwards and committing identical content again is
// deduplicated.
func TestCommit(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := testutil.Context(t)
	storeRoot := t.TempDir()
	s, err := New(storeRoot, WithDefaultDiskBytes(16<<20), WithPoolSize(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.CreateLayer(ctx, "base", "", writeFile("gone", "base")); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Prepare(ctx, "sb", "base", sandbox.PrepareOpts{})
	if err != nil {
		t.Fatal(err)
	}
	root := mountRoot(t, ms)
	if err := os.WriteFile(filepath.Join(root, "new"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "gone")); err != nil {
		t.Fatal(err)
	}
	unmountRoot(t, ms, root)

	copyUpper := func(parent string, upper *os.Root, dir string) (string, string, error) {
		if parent != "base" {
			t.Errorf("fill got parent %q, want base", parent)
		}
		b, err := upper.ReadFile("new")
		if err != nil {
			return "", "", err
		}
		fi, err := upper.Lstat("gone")
		if err != nil {
			return "", "", err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeCharDevice == 0 || st.Rdev != 0 {
			t.Errorf("deleted file in upper: mode %v rdev %d, want a 0/0 character device", fi.Mode(), st.Rdev)
		}
		return "committed", "sha256:test", os.WriteFile(filepath.Join(dir, "new"), b, 0o644)
	}
	key, existed, err := s.Commit(ctx, "sb", copyUpper)
	if err != nil || key != "committed" || existed {
		t.Fatalf("Commit = %q, %v, %v; want committed, false, nil", key, existed, err)
	}
	l, err := s.Layer("committed")
	if err != nil {
		t.Fatal(err)
	}
	if l.Parent != "base" || l.DiffID != "sha256:test" {
		t.Errorf("layer = %+v, want parent base and diff ID sha256:test", l)
	}
	if b, err := os.ReadFile(filepath.Join(storeRoot, "layers", "committed", "fs", "new")); err != nil || string(b) != "hello" {
		t.Errorf("committed file = %q, %v", b, err)
	}
	if loops := loopsBacking(t, storeRoot); len(loops) > 0 {
		t.Errorf("loop devices left after Commit: %v", loops)
	}
	if _, existed, err := s.Commit(ctx, "sb", copyUpper); err != nil || !existed {
		t.Errorf("second Commit: existed %v, err %v; want a deduplicated layer", existed, err)
	}
	if err := s.Remove(ctx, "sb"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Commit(ctx, "sb", copyUpper); !errdefs.IsNotFound(err) {
		t.Errorf("Commit of a removed layer = %v, want ErrNotFound", err)
	}
}
