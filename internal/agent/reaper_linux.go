package agent

import (
	"errors"
	"os"
	"os/signal"
	"sync"

	"golang.org/x/sys/unix"
)

// reaper is the one place that calls wait4 in this process. Everything the
// agent forks is started through reaper.start, which registers the pid before
// the reaper can dispatch its exit, so no exit is ever lost or stolen.
// Orphans re-parented to the agent (PID 1 or subreaper) are reaped silently.
type reaper struct {
	mu sync.Mutex
	// waiters maps a pid to the channel that receives its wait status.
	// guarded by mu
	waiters map[int]chan exitStatus
}

var (
	theReaper     *reaper
	theReaperOnce sync.Once
	theReaperErr  error
)

// getReaper starts the process-wide reaper once. When the agent is not PID 1
// (tests, debugging) it makes this process a child subreaper so that
// grandchildren still come back to it.
func getReaper() (*reaper, error) {
	theReaperOnce.Do(func() {
		if os.Getpid() != 1 {
			if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
				theReaperErr = err
				return
			}
		}
		r := &reaper{waiters: make(map[int]chan exitStatus)}
		ch := make(chan os.Signal, 16)
		signal.Notify(ch, unix.SIGCHLD)
		// The reaper lives as long as the process: it is PID 1's duty.
		go func() {
			for range ch {
				r.reapAll()
			}
		}()
		r.reapAll()
		theReaper = r
	})
	return theReaper, theReaperErr
}

// start runs fn (which forks) with the dispatch lock held and registers the
// returned pid, so an exit reaped in between waits for the registration.
// It then watches the child's pidfd (see watch).
func (r *reaper) start(fn func() (int, error)) (int, <-chan exitStatus, error) {
	r.mu.Lock()
	pid, err := fn()
	if err != nil {
		r.mu.Unlock()
		return 0, nil, err
	}
	ch := make(chan exitStatus, 1)
	r.waiters[pid] = ch
	r.mu.Unlock()
	r.watch(pid)
	return pid, ch, nil
}

// watch reaps as soon as the child pid exits, through a pidfd that the
// runtime's poller watches: the same wake-up that reports the end of the
// child's output reports its exit. SIGCHLD still reaps (it covers orphans,
// and a child whose pidfd cannot be opened), but through the signal
// handler, the runtime's signal goroutine and os/signal's channel: that
// path added latency between a command's exit and its end event. Whichever reaps first dispatches; the pidfd never reaps itself, so
// wait4 stays the one way a status is taken.
func (r *reaper) watch(pid int) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return // already reaped (ESRCH), or no pidfd: SIGCHLD does it
	}
	r.mu.Lock()
	_, waiting := r.waiters[pid]
	r.mu.Unlock()
	if !waiting {
		// Reaped and dispatched already: the pidfd may name a process that
		// took the pid since (pids are handed out cyclically, so only
		// after a wrap-around).
		unix.Close(fd)
		return
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return
	}
	go func() {
		defer f.Close()
		// Read calls back until the pidfd is readable, which it is once
		// the process exited; the runtime's poller waits in between.
		_ = rc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(p, 0)
			return err != nil || n > 0
		})
		r.reapAll()
	}()
}

func (r *reaper) reapAll() {
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		ch, ok := r.waiters[pid]
		delete(r.waiters, pid)
		r.mu.Unlock()
		if ok {
			ch <- exitStatus{WaitStatus: ws, Rusage: ru}
		}
	}
}

// exitStatus is how a child ended and what it used (with the descendants
// it waited for), as wait4 reports them.
type exitStatus struct {
	unix.WaitStatus
	Rusage unix.Rusage
}
