package volume

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
)

// mountOptions: no device files or set-user-ID programs from a volume.
var mountOptions = []string{"loop", "nosuid", "nodev", "noatime"}

// makeImage makes img, a sparse file of size bytes formatted ext4 with a
// journal (a volume's data outlives crashes), its root owned by uid and gid
// 0: box root's in every box (the runtime idmaps the volume into a box with
// a user namespace).
func makeImage(ctx context.Context, mkfs, img string, size int64) error {
	f, err := os.OpenFile(img, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("disk image: %w", err)
	}
	cmd := exec.CommandContext(ctx, mkfs, "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,nodiscard,root_owner=0:0", img)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mkfs.ext4: %w: %s", err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// mountImage mounts img on dir through a loop device, unless a file
// system is mounted there already (left by an earlier daemon). A new
// volume's lost+found is removed: a volume starts empty.
func mountImage(ctx context.Context, img, dir string) error {
	// The mount table is read and changed from one thread, in the daemon's
	// mount namespace.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	src, fstype, ok, err := mount.At("/proc/thread-self/mountinfo", dir)
	if err != nil {
		return err
	}
	if ok {
		if fstype != "ext4" {
			return fmt.Errorf("%s has a %s file system (%s) mounted, not the volume's: %w", dir, fstype, src, errdefs.ErrFailedPrecondition)
		}
		log.G(ctx).Debug("volume already mounted", "dir", dir, "source", src)
		return nil
	}
	if err := (mount.Mount{Type: "ext4", Source: img, Options: mountOptions}).Mount(dir); err != nil {
		return err
	}
	if err := unix.Rmdir(dir + "/lost+found"); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTEMPTY) {
		log.G(ctx).Debug("volume: keep lost+found", "dir", dir, "error", err)
	}
	return nil
}

// unmount unmounts dir, never lazily (a lazily detached volume would keep
// its loop device and image while nothing shows them). Nothing mounted
// there is success; a busy file system is errdefs.ErrFailedPrecondition.
func unmount(dir string) error {
	for range 8 { // stacked mounts
		err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW)
		switch {
		case err == nil:
			continue
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			return fmt.Errorf("unmount %s: its file system is in use on the host: %w", dir, errdefs.ErrFailedPrecondition)
		default:
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
	}
	return fmt.Errorf("unmount %s: too many stacked mounts", dir)
}

// shareRoot makes root a mount point of its own (a bind on itself) with
// shared propagation, so that the volumes mounted under it later appear in
// the mount namespaces copied from the daemon's before (the runtimes',
// which are slaves of the host's): a runtime can bind a volume only from a
// mount of its own namespace. Without it, on a host whose "/" is private
// (no systemd), a volume made after the daemon started would not be there.
func shareRoot(root string) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, _, ok, err := mount.At("/proc/thread-self/mountinfo", root)
	if err != nil {
		return err
	}
	if !ok {
		if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on itself: %w", root, err)
		}
	}
	if err := unix.Mount("", root, "", unix.MS_SHARED, ""); err != nil {
		return fmt.Errorf("make %s shared: %w", root, err)
	}
	return nil
}

// unshareRoot undoes shareRoot's bind (nothing mounted is success).
func unshareRoot(root string) error {
	if err := unix.Unmount(root, unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", root, err)
	}
	return nil
}

// usage is statfs of the volume's root at p.
func usage(p string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return Usage{}, fmt.Errorf("volume usage: %w", err)
	}
	bs := uint64(st.Bsize) //nolint:gosec // block sizes are positive
	return Usage{UsedBytes: (st.Blocks - st.Bfree) * bs, TotalBytes: st.Blocks * bs}, nil
}

// allocated returns the bytes of file's blocks, 0 when unknown.
func allocated(file string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}

func findMkfs() string {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
