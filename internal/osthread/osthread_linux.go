package osthread

import (
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
