//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/mount"
)

// runDirMount returns the source and type of the file system mounted on
// d's run_dir in the host's mount namespace, or ok false.
func (d *daemon) runDirMount() (source, fstype string, ok bool) {
	d.t.Helper()
	source, fstype, ok, err := mount.At("/proc/self/mountinfo", d.run)
	if err != nil {
		d.t.Fatal(err)
	}
	return source, fstype, ok
}

// TestRunDirTmpfs: on a host whose run_dir is on a disk file system (this
// machine's /tmp, where the tests put it), the daemon mounts a tmpfs on the
// empty run_dir; the mount and the boxes' state in it outlive a killed
// daemon, the next daemon recovers the box from it, and a daemon that stops
// with no box left unmounts it. A run_dir that holds files, or
// run_dir_tmpfs = false, gets no mount.
func TestRunDirTmpfs(t *testing.T) {
	if !onDiskFS(t, os.TempDir()) {
		t.Skip("the tests' run_dir is on a tmpfs already here: nothing to mount")
	}
	t.Run("kept-across-crash", func(t *testing.T) {
		d := startDaemon(t)
		if src, fstype, ok := d.runDirMount(); !ok || fstype != "tmpfs" || src != "corral-run" {
			t.Fatalf("run_dir %s: mounted %v, type %q, source %q; want the daemon's tmpfs (corral-run)", d.run, ok, fstype, src)
		}
		id := d.create("--no-pool")
		d.kill()
		if _, fstype, ok := d.runDirMount(); !ok || fstype != "tmpfs" {
			t.Fatalf("run_dir tmpfs gone after the daemon was killed with a box running")
		}
		if boxes, _ := filepath.Glob(filepath.Join(d.run, "*", "sandboxes", id)); len(boxes) != 1 {
			t.Fatalf("the box's run-time state is not in the run_dir tmpfs: %v", boxes)
		}
		d.start()
		if out := d.must("exec", id, "echo", "recovered"); strings.TrimSpace(out) != "recovered" {
			t.Fatalf("exec after restart = %q", out)
		}
		d.must("rm", "-f", id)
		d.stop()
		if _, _, ok := d.runDirMount(); ok {
			t.Fatalf("run_dir %s still mounted after the daemon stopped with no box left", d.run)
		}
		d.requireNoLeftovers()
	})
	t.Run("holds-files", func(t *testing.T) {
		d := startDaemonWith(t, func(_ *string, dir string) {
			if err := os.MkdirAll(filepath.Join(dir, "run"), 0o711); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "run", "left-by-someone"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		})
		if _, _, ok := d.runDirMount(); ok {
			t.Fatalf("the daemon mounted a tmpfs over a run_dir that held a file")
		}
		if _, err := os.Stat(filepath.Join(d.run, "left-by-someone")); err != nil {
			t.Fatalf("the file in run_dir: %v", err)
		}
		if log := readFile(d.logFile); !strings.Contains(log, "is not a tmpfs") {
			t.Fatalf("no warning about run_dir in the daemon log:\n%s", tail(log, 20))
		}
		id := d.create("--no-pool")
		d.must("rm", "-f", id)
	})
	t.Run("disabled", func(t *testing.T) {
		d := startDaemonWith(t, func(cfg *string, _ string) { *cfg += "run_dir_tmpfs = false\n" })
		if _, _, ok := d.runDirMount(); ok {
			t.Fatalf("run_dir mounted with run_dir_tmpfs = false")
		}
	})
}

// onDiskFS reports whether dir is on a file system other than a tmpfs.
func onDiskFS(t *testing.T, dir string) bool {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type != unix.TMPFS_MAGIC
}
