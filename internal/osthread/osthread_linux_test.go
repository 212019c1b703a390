package osthread

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/testutil"
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

// TestInNamespace: fn runs in the namespace joined (here a new UTS
// namespace with its own hostname), the thread comes back, and a
// namespace of another type is refused before fn runs.
func TestInNamespace(t *testing.T) {
	testutil.RequiresRoot(t) // makes a UTS namespace
	// A UTS namespace to join, made on a thread that ends afterwards.
	nsc := make(chan *os.File, 1)
	Throwaway(func() {
		if err := unix.Unshare(unix.CLONE_NEWUTS); err != nil {
			nsc <- nil
			return
		}
		_ = unix.Sethostname([]byte("osthread-test"))
		f, _ := os.Open("/proc/thread-self/ns/uts")
		nsc <- f
	})
	ns := <-nsc
	if ns == nil {
		t.Skip("cannot make a UTS namespace here")
	}
	defer ns.Close()
	host, _ := os.Hostname()
	var inside string
	if err := InNamespace(int(ns.Fd()), unix.CLONE_NEWUTS, func() error {
		var u unix.Utsname
		if err := unix.Uname(&u); err != nil {
			return err
		}
		inside = unix.ByteSliceToString(u.Nodename[:])
		return nil
	}); err != nil {
		t.Fatalf("InNamespace(uts) = %v", err)
	}
	if inside != "osthread-test" {
		t.Errorf("hostname inside = %q; want osthread-test", inside)
	}
	if now, _ := os.Hostname(); now != host {
		t.Errorf("hostname outside = %q after InNamespace; want %q", now, host)
	}
	ran := false
	err := InNamespace(int(ns.Fd()), unix.CLONE_NEWNET, func() error { ran = true; return nil })
	if !errors.Is(err, unix.EINVAL) || ran {
		t.Errorf("InNamespace(uts file as net) = %v, ran %v; want EINVAL before fn", err, ran)
	}
}
