package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// TestNSThreads checks that the runtime's threads share one mount namespace
// that is not the host's, run requests at the same time, and refuse
// requests once closed.
func TestNSThreads(t *testing.T) {
	testutil.RequiresRoot(t)
	ns, err := newNSThread()
	if err != nil {
		t.Fatalf("newNSThread() = %v", err)
	}
	defer ns.close()
	host, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}

	// nsThreads requests that each wait for all the others run only when
	// every thread takes one; each reports its thread and namespace.
	type seen struct {
		tid int
		mnt string
	}
	var arrived sync.WaitGroup
	arrived.Add(nsThreads)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	results := make(chan seen, nsThreads)
	errs := make(chan error, nsThreads)
	for range nsThreads {
		go func() {
			errs <- ns.Do(func() error {
				arrived.Done()
				select {
				case <-all:
				case <-time.After(10 * time.Second):
					return errors.New("the other requests did not run meanwhile")
				}
				mnt, err := os.Readlink("/proc/thread-self/ns/mnt")
				results <- seen{unix.Gettid(), mnt}
				return err
			})
		}()
	}
	tids := map[int]bool{}
	var mnts []string
	for range nsThreads {
		if err := <-errs; err != nil {
			t.Fatalf("Do() = %v", err)
		}
		r := <-results
		tids[r.tid] = true
		mnts = append(mnts, r.mnt)
	}
	if len(tids) != nsThreads {
		t.Errorf("requests ran on %d threads; want %d", len(tids), nsThreads)
	}
	for _, m := range mnts {
		if m != mnts[0] || m == host {
			t.Errorf("mount namespaces of the threads = %v (host %s); want one, not the host's", mnts, host)
			break
		}
	}

	// A mount made on one thread is seen from every other.
	dir := t.TempDir()
	if err := ns.Do(func() error { return unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m") }); err != nil {
		t.Fatal(err)
	}
	arrived.Add(nsThreads)
	all2 := make(chan struct{})
	go func() { arrived.Wait(); close(all2) }()
	for range nsThreads {
		go func() {
			errs <- ns.Do(func() error {
				arrived.Done()
				<-all2
				var st unix.Statfs_t
				if err := unix.Statfs(dir, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
					return fmt.Errorf("thread %d does not see the tmpfs at %s (%v)", unix.Gettid(), dir, err)
				}
				return nil
			})
		}()
	}
	for range nsThreads {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Errorf("the host sees the namespace's tmpfs at %s (%v)", dir, err)
	}

	ns.close()
	if err := ns.Do(func() error { return nil }); !errors.Is(err, errClosed) {
		t.Errorf("Do() after close = %v; want errClosed", err)
	}
}
