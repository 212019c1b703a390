package oci

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"

	"golang.org/x/sys/unix"
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
// terminates the thread instead of reusing it elsewhere.
type nsThread struct {
	reqs chan func()
	tid  int
	done chan struct{}
}

// unifiedMount is the cgroup2 mount point of a hybrid host.
const unifiedMount = "/sys/fs/cgroup/unified"

func newNSThread() (*nsThread, error) {
	t := &nsThread{reqs: make(chan func()), done: make(chan struct{})}
	errc := make(chan error, 1)
	go func() {
		defer close(t.done)
		goruntime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := setupMountNS(); err != nil {
			errc <- err
			return
		}
		t.tid = unix.Gettid()
		errc <- nil
		for fn := range t.reqs {
			fn()
		}
	}()
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
	t.reqs <- func() { errc <- fn() }
	return <-errc
}

// mountInfoPath is the mountinfo of the thread's namespace.
func (t *nsThread) mountInfoPath() string {
	return fmt.Sprintf("/proc/%d/task/%d/mountinfo", os.Getpid(), t.tid)
}

// close ends the thread (and with it the namespace and its mounts, unless
// processes started from it still hold them).
func (t *nsThread) close() {
	close(t.reqs)
	<-t.done
}

// isMountPoint reports whether p is a mount point in the namespace whose
// mountinfo is at info.
func isMountPoint(info, p string) (bool, error) {
	b, err := os.ReadFile(info)
	if err != nil {
		return false, fmt.Errorf("read mountinfo: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && unescapeMountinfo(f[4]) == p {
			return true, nil
		}
	}
	return false, nil
}

// unescapeMountinfo undoes the octal escapes (\040 for space...) of a
// mountinfo field.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
