//go:build integration

package integration

import (
	"strings"
	"testing"
)

// TestForkAfterDaemonKillHasUnsyncedWrites forks a box that wrote a file
// without syncing it, after the daemon was SIGKILLed and started again:
// the copy must have the file. The box's mounts then live only in its own
// mount namespace (the daemon's runtime namespace died with it), and a
// flush of the recorded mount points in the new daemon's namespace
// flushed the host's file system instead of the box's disk, so the copy
// was made from a disk without the write (scripts/soak.sh --cycles found
// it).
func TestForkAfterDaemonKillHasUnsyncedWrites(t *testing.T) {
	d := startDaemon(t)
	id := d.create("--image", "busybox")
	d.must("exec", id, "--", "sh", "-c", "echo unsynced > /f")
	d.kill()
	d.start()
	copyID := strings.TrimSpace(d.must("fork", id))
	if out, errOut, err := d.corral("exec", copyID, "--", "cat", "/f"); err != nil || out != "unsynced\n" {
		t.Errorf("the fork made after a daemon restart reads /f as %q (%s, %v); want %q", out, errOut, err, "unsynced\n")
	}
	d.must("rm", "-f", id, copyID)
	d.requireNoLeftovers()
}
