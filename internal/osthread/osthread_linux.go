package osthread

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Locked runs fn in a new goroutine locked to an OS thread that is not the
// process's main thread. When fn returns true (it put the thread back as
// it found it) the thread is unlocked and returns to the Go runtime;
// otherwise it ends with the goroutine, and whatever fn did to it goes
// with it. Locked does not wait for fn.
func Locked(fn func() (restored bool)) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// Stay locked to the main thread while another goroutine,
			// which must then get another thread, does the work.
			done := make(chan struct{})
			Locked(func() bool { defer close(done); return fn() })
			<-done
			runtime.UnlockOSThread()
			return
		}
		if fn() {
			runtime.UnlockOSThread()
		}
	}()
}

// Throwaway runs fn in a new goroutine on an OS thread that ends with it
// (never the main thread). It does not wait for fn.
func Throwaway(fn func()) {
	Locked(func() bool { fn(); return false })
}

// nsNames are the /proc/<tid>/ns entries of the namespace types InNamespace
// takes.
var nsNames = map[int]string{
	unix.CLONE_NEWNET: "net",
	unix.CLONE_NEWUTS: "uts",
	unix.CLONE_NEWIPC: "ipc",
}

// InNamespace runs fn on a locked thread (see Locked) that has joined the
// namespace nsFD of type nstype (unix.CLONE_NEWNET, CLONE_NEWUTS or
// CLONE_NEWIPC), then returns the thread to its own namespace, and returns
// fn's error. fn does not run when the thread cannot join (the error wraps
// setns's, EINVAL when nsFD is not of that type). When the thread cannot
// return it ends with its goroutine, so nothing else ever runs in that
// namespace, and the error says so (joined to fn's).
func InNamespace(nsFD, nstype int, fn func() error) error {
	name, ok := nsNames[nstype]
	if !ok {
		return fmt.Errorf("namespace type %#x: %w", nstype, unix.EINVAL)
	}
	errc := make(chan error, 1)
	Locked(func() bool {
		orig, err := unix.Open("/proc/thread-self/ns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- fmt.Errorf("open own %s namespace: %w", name, err)
			return true
		}
		defer unix.Close(orig)
		if err := unix.Setns(nsFD, nstype); err != nil {
			errc <- fmt.Errorf("join %s namespace: %w", name, err)
			return true
		}
		ferr := fn()
		if err := unix.Setns(orig, nstype); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("return to own %s namespace: %w", name, err))
			return false
		}
		errc <- ferr
		return true
	})
	return <-errc
}
