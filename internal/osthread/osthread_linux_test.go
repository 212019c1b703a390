package osthread

import (
	"errors"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNeverMainThread: even when the runtime would schedule the goroutine
// on the main thread (it is locked to main here, then released), fn runs
// elsewhere, and a thread fn does not restore ends.
func TestNeverMainThread(t *testing.T) {
	for i := range 50 {
		var (
			tid  int
			wg   sync.WaitGroup
			keep = i%2 == 0
		)
		wg.Add(1)
		Locked(func() bool {
			defer wg.Done()
			tid = unix.Gettid()
			return keep
		})
		wg.Wait()
		if tid == unix.Getpid() {
			t.Fatalf("round %d: fn ran on the main thread (tid %d)", i, tid)
		}
		runtime.Gosched()
	}
}

// TestThrowawayThreadEnds: the thread of a Throwaway is gone afterwards.
func TestThrowawayThreadEnds(t *testing.T) {
	tids := make(chan int, 1)
	done := make(chan struct{})
	Throwaway(func() { tids <- unix.Gettid(); <-done })
	tid := <-tids
	if err := unix.Tgkill(unix.Getpid(), tid, 0); err != nil {
		t.Fatalf("tgkill(%d, 0) while fn runs = %v; want the thread alive", tid, err)
	}
	close(done)
	for range 10000 { // up to ~10 s on a loaded machine
		if err := unix.Tgkill(unix.Getpid(), tid, 0); errors.Is(err, unix.ESRCH) {
			return
		}
		runtime.Gosched()
		unix.Nanosleep(&unix.Timespec{Nsec: 1e6}, nil)
	}
	t.Fatalf("thread %d of a Throwaway still alive after fn returned", tid)
}
