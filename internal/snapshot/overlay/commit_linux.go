package overlay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/osthread"
)

// Commit makes a committed layer from the changes in the writable layer
// active (its overlay upper directory, in overlay form: deleted files are
// 0/0 character devices, opaque directories carry trusted.overlay.opaque),
// on active's parent. fill copies from upper into the empty directory dir
// (parent is the new layer's parent) and returns the new layer's key and diff ID, as for AddLayer.
//
// The writable layer must not be mounted any more (its sandbox deleted from
// the runtime). Commit mounts its disk read-only in a private mount
// namespace on a thread of its own and detaches the mount at once: the open
// upper directory keeps it alive until fill returns, nothing is visible in
// any other namespace, and a crash leaves no mount and no loop device. The
// writable layer is left as it was; remove it with Remove.
func (s *Store) Commit(ctx context.Context, active string, fill func(parent string, upper *os.Root, dir string) (key, diffID string, err error)) (string, bool, error) {
	if err := identifiers.Validate("layer key", active); err != nil {
		return "", false, err
	}
	m, err := s.activeMeta(active)
	if err != nil {
		return "", false, err
	}
	disk := mount.Mount{
		Type: "ext4", Source: s.mountSource(s.diskImage(active, m)),
		Options: []string{"loop", "ro", "nosuid", "nodev", "noexec"},
	}
	upper, err := openPrivateMount(disk, s.path("active", active, "disk"), "upper")
	if err != nil {
		return "", false, fmt.Errorf("commit %s: %w", active, err)
	}
	defer upper.Close()
	return s.AddLayer(ctx, m.Parent, func(dir string) (string, string, error) {
		return fill(m.Parent, upper, dir)
	})
}

// openPrivateMount mounts m on target in a new private mount namespace of a
// dedicated OS thread, opens target/sub, detaches the mount and returns the
// open directory. The thread is never returned to the Go scheduler, so it
// and its namespace end when this returns.
func openPrivateMount(m mount.Mount, target, sub string) (*os.Root, error) {
	type result struct {
		root *os.Root
		err  error
	}
	ch := make(chan result, 1)
	// The thread exits with the goroutine, taking its mount namespace
	// with it.
	osthread.Throwaway(func() {
		ch <- func() result {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return result{err: fmt.Errorf("unshare mount namespace: %w", err)}
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return result{err: fmt.Errorf("make mounts private: %w", err)}
			}
			if err := m.Mount(target); err != nil {
				return result{err: err}
			}
			defer unix.Unmount(target, unix.MNT_DETACH)
			root, err := os.OpenRoot(filepath.Join(target, sub))
			return result{root: root, err: err}
		}()
	})
	r := <-ch
	return r.root, r.err
}
