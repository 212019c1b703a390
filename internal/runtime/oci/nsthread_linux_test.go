package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/osthread"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestRunTmpfs checks that runTmpfs, in a private mount namespace, puts a
// tmpfs on a directory that is not one and keeps its directories, files
// and symlinks reachable at the same paths, writable through to the host,
// while the host's view is unchanged.
func TestRunTmpfs(t *testing.T) {
	testutil.RequiresRoot(t)
	run := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(run, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is a tmpfs (or statfs failed: %v): nothing to do", run, err)
	}
	for p, data := range map[string]string{"corral/state/x": "x", "file": "f", "criu.kdat.tmp": "stale"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(run, p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(run, p), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("corral/state", filepath.Join(run, "link")); err != nil {
		t.Fatal(err)
	}
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	done := make(chan struct{})
	osthread.Throwaway(func() {
		defer close(done)
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			fail("unshare: %v", err)
			return
		}
		if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
			fail("rslave: %v", err)
			return
		}
		if err := runTmpfs(run); err != nil {
			fail("runTmpfs: %v", err)
			return
		}
		var st unix.Statfs_t
		if err := unix.Statfs(run, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
			fail("after runTmpfs %s is not a tmpfs (%v)", run, err)
		}
		for p, want := range map[string]string{"corral/state/x": "x", "file": "f", "link/x": "x"} {
			if b, err := os.ReadFile(filepath.Join(run, p)); err != nil || string(b) != want {
				fail("%s in the namespace = %q, %v; want %q", p, b, err, want)
			}
		}
		// Writes reach the host's directory; the cache file does not.
		if err := os.WriteFile(filepath.Join(run, "corral/state/new"), []byte("n"), 0o600); err != nil {
			fail("write through the bind: %v", err)
		}
		if err := os.WriteFile(filepath.Join(run, "criu.kdat"), []byte("k"), 0o600); err != nil {
			fail("write the cache: %v", err)
		}
		// A stale temporary cache file of the host is not bound in.
		if _, err := os.Stat(filepath.Join(run, "criu.kdat.tmp")); err == nil {
			fail("the host's criu.kdat.tmp is in the tmpfs")
		}
		// A second call sees a tmpfs and does nothing.
		if err := runTmpfs(run); err != nil {
			fail("runTmpfs again: %v", err)
		}
	})
	<-done
	for _, e := range errs {
		t.Error(e)
	}
	if b, err := os.ReadFile(filepath.Join(run, "corral/state/new")); err != nil || string(b) != "n" {
		t.Errorf("a write in the namespace is not on the host: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(run, "criu.kdat")); err == nil {
		t.Error("the namespace's tmpfs file reached the host's directory")
	}
	if err := unix.Statfs(run, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Errorf("the host's %s became a tmpfs (%v)", run, err)
	}
}
