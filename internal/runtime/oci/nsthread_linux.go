package oci

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/osthread"
)

// nsThread is one OS thread in a private mount namespace that runs every
// runtime invocation and every rootfs mount.
//
// Why: crun refuses a hybrid cgroup host ("cgroups in hybrid mode not
// supported") while a cgroup2 file system is mounted at
// /sys/fs/cgroup/unified. The thread unshares its mount namespace, makes "/"
// recursively a slave (nothing propagates back to the host) and lazily
// unmounts that cgroup2 mount, in its own view only. Processes started with
// os/exec from the thread fork on it and inherit the namespace. Rootfs mounts
// are made there too: they are invisible on the host and vanish with the
// thread if the daemon dies, so nothing leaks.
//
// The thread is never unlocked: when its goroutine ends, the Go runtime
// terminates the thread instead of reusing it elsewhere. It is never the
// process's main thread (see package osthread).
type nsThread struct {
	reqs chan func()
	tid  int
	quit chan struct{} // closed by close
	done chan struct{} // closed when the thread's goroutine ends
	once sync.Once
}

// errClosed is returned by Do once the thread is closed.
var errClosed = fmt.Errorf("oci runtime is closed: %w", errdefs.ErrUnavailable)

// unifiedMount is the cgroup2 mount point of a hybrid host.
const unifiedMount = "/sys/fs/cgroup/unified"

func newNSThread() (*nsThread, error) {
	t := &nsThread{reqs: make(chan func()), quit: make(chan struct{}), done: make(chan struct{})}
	errc := make(chan error, 1)
	osthread.Throwaway(func() { // never unlocked: the thread dies with the goroutine
		defer close(t.done)
		if err := setupMountNS(); err != nil {
			errc <- err
			return
		}
		t.tid = unix.Gettid()
		errc <- nil
		for {
			select {
			case fn := <-t.reqs:
				fn()
			case <-t.quit:
				return
			}
		}
	})
	if err := <-errc; err != nil {
		return nil, err
	}
	return t, nil
}

func setupMountNS() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / rslave: %w", err)
	}
	hybrid, err := isCgroup2Mount(unifiedMount)
	if err != nil {
		return err
	}
	if hybrid {
		if err := unix.Unmount(unifiedMount, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("hide %s: %w", unifiedMount, err)
		}
	}
	return nil
}

// isCgroup2Mount reports whether p is a cgroup2 mount on a host whose
// /sys/fs/cgroup is not itself cgroup2.
func isCgroup2Mount(p string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("statfs /sys/fs/cgroup: %w", err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return false, nil
	}
	if err := unix.Statfs(p, &st); err != nil {
		return false, nil //nolint:nilerr // no unified hierarchy: nothing to hide
	}
	return st.Type == unix.CGROUP2_SUPER_MAGIC, nil
}

// Do runs fn on the thread and returns its error.
func (t *nsThread) Do(fn func() error) error {
	errc := make(chan error, 1)
	select {
	case t.reqs <- func() { errc <- fn() }:
	case <-t.done:
		return errClosed
	}
	return <-errc
}

// mountInfoPath is the mountinfo of the thread's namespace.
func (t *nsThread) mountInfoPath() string {
	return fmt.Sprintf("/proc/%d/task/%d/mountinfo", os.Getpid(), t.tid)
}

// close ends the thread (and with it the namespace and its mounts, unless
// processes started from it still hold them).
func (t *nsThread) close() {
	t.once.Do(func() { close(t.quit) })
	<-t.done
}
