package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
)

// runDirSource is the source of the tmpfs the daemon mounts on run_dir, as
// /proc/self/mountinfo shows it: the daemon only ever unmounts a tmpfs
// with this name, never one that the host's boot configuration made.
const runDirSource = "corral-run"

// mountRunDir mounts a tmpfs on dir (run_dir) when dir is on a disk file
// system and empty, and reports whether it did.
//
// Why: each create and removal writes and deletes a dozen files and
// directories in run_dir (the runtime's state, the bundle, the bind mount
// of the box's network namespace). On a disk file system that is work
// for its journal (or, on ext4 without one, a scan past every inode freed
// in the last 30 s at each file creation), and the metadata database's
// fsyncs wait for it. systemd hosts have a tmpfs on /run already; this
// covers hosts and containers whose /run is an ordinary directory.
//
// A directory that holds files is left alone: they may be the state of
// boxes that a daemon without this mount left, which a tmpfs would hide.
// The mount stays when the daemon stops or is killed while boxes exist, so
// that the next daemon finds their state (a tmpfs is then already there);
// a daemon that stops with no box left unmounts it (unmountRunDir), and a
// reboot clears it like /run.
func mountRunDir(dir string) (bool, error) {
	var fst unix.Statfs_t
	if err := unix.Statfs(dir, &fst); err != nil {
		return false, err
	}
	if fst.Type == unix.TMPFS_MAGIC {
		return false, nil
	}
	empty, err := isEmptyDir(dir)
	if err != nil || !empty {
		return false, err
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return false, err
	}
	// Nothing is executed from run_dir; the box's processes that write to
	// the agent's log there are charged for it in their memory cgroup.
	opts := fmt.Sprintf("mode=%o", st.Mode&0o7777)
	if err := unix.Mount(runDirSource, dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return false, fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return true, nil
}

// isEmptyDir reports whether directory dir has no entries.
func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	return false, err
}

// unmountRunDir unmounts the tmpfs that mountRunDir (of this daemon or of
// an earlier one) put on dir. The caller makes sure that no box is left,
// and that the API socket in it is closed. A tmpfs of another origin is
// never touched; one still in use stays.
func unmountRunDir(ctx context.Context, dir string) error {
	source, fstype, ok, err := mount.At("/proc/self/mountinfo", dir)
	if err != nil || !ok || fstype != "tmpfs" || source != runDirSource {
		return err
	}
	if err := unix.Unmount(dir, 0); err != nil {
		if errors.Is(err, unix.EBUSY) {
			log.G(ctx).Warn("run_dir in use: its tmpfs is left mounted", "dir", dir)
			return nil
		}
		return fmt.Errorf("unmount the tmpfs on run_dir %s: %w", dir, err)
	}
	log.G(ctx).Info("run_dir: tmpfs unmounted", "dir", dir)
	return nil
}
