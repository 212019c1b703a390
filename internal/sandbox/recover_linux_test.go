package sandbox

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestRemoveSettled checks that an orphan checkpoint that cannot be removed
// yet (here a mount point inside it, standing for a CRIU still writing) is
// removed once it can be, within the wait, and that the error comes back
// once the wait is over.
func TestRemoveSettled(t *testing.T) {
	testutil.RequiresRoot(t)
	busyDir := func(t *testing.T) (dir, mnt string) {
		dir = filepath.Join(t.TempDir(), "fork-aaaaaaaaaaaa")
		mnt = filepath.Join(dir, "busy")
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		if err := os.RemoveAll(dir); err == nil {
			t.Fatal("RemoveAll of a directory holding a mount point succeeded; the test needs it to fail")
		}
		return dir, mnt
	}

	dir, mnt := busyDir(t)
	go func() {
		time.Sleep(200 * time.Millisecond)
		_ = unix.Unmount(mnt, 0)
	}()
	if err := removeSettled(context.Background(), dir, 10*time.Second); err != nil {
		t.Fatalf("removeSettled = %v; want the directory removed once it could be", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(dir) after removeSettled = %v; want it gone", err)
	}

	dir, _ = busyDir(t)
	start := time.Now()
	if err := removeSettled(context.Background(), dir, 150*time.Millisecond); err == nil {
		t.Error("removeSettled of a directory that stays busy = nil; want its error")
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > 5*time.Second {
		t.Errorf("removeSettled gave up after %v; want about the wait (150ms)", d)
	}
}
