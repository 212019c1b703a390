package bench

import (
	"errors"
	"fmt"
	"os/exec"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/osthread"
)

// nsThread is one locked OS thread in a private mount namespace from which
// the peers that are not driven through oci.Runtime (podman, the idle crun
// containers of the density peer) are started. It mirrors what the daemon
// does (internal/runtime/oci nsthread_linux.go): "/" is made a recursive
// slave and, on a hybrid cgroup host, the cgroup2 mount at
// /sys/fs/cgroup/unified is hidden, without which crun refuses to run
// ("cgroups in hybrid mode not supported"). Mounts the peers make live and
// die in that namespace, never on the host.
type nsThread struct {
	reqs chan func()
	done chan struct{}
}

const unifiedMount = "/sys/fs/cgroup/unified"

func newNSThread() (*nsThread, error) {
	t := &nsThread{reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	osthread.Throwaway(func() { // the thread dies with the goroutine
		defer close(t.done)
		if err := privateMountNS(); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for fn := range t.reqs {
			fn()
		}
	})
	if err := <-errc; err != nil {
		return nil, err
	}
	return t, nil
}

func privateMountNS() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("unshare mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / rslave: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil || st.Type == unix.CGROUP2_SUPER_MAGIC {
		return nil //nolint:nilerr // no cgroup fs or pure cgroup2: nothing to hide
	}
	if err := unix.Statfs(unifiedMount, &st); err != nil || st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil //nolint:nilerr // not a hybrid host
	}
	if err := unix.Unmount(unifiedMount, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("hide %s: %w", unifiedMount, err)
	}
	return nil
}

// start starts cmd from the thread, so that it runs in the namespace.
func (t *nsThread) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	t.reqs <- func() { errc <- cmd.Start() }
	return <-errc
}

// run starts cmd from the thread and waits for it; the error carries the
// command's combined output.
func (t *nsThread) run(cmd *exec.Cmd) ([]byte, error) {
	var out limitedBuffer
	if cmd.Stdout == nil {
		cmd.Stdout = &out
	}
	if cmd.Stderr == nil {
		cmd.Stderr = &out
	}
	if err := t.start(cmd); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	if err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", cmd.Args[0], err, out.String())
	}
	return out.Bytes(), nil
}

// close ends the thread and with it the namespace, once the processes
// started from it are gone.
func (t *nsThread) close() {
	close(t.reqs)
	<-t.done
}
