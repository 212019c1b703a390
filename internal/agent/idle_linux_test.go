package agent

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"golang.org/x/sys/unix"
)

// stopped returns a stop function for an idleClock and a way to wait for
// it.
func stopped() (stop func(), wait func(d time.Duration) bool) {
	ch := make(chan struct{})
	return func() { close(ch) }, func(d time.Duration) bool {
		select {
		case <-ch:
			return true
		case <-time.After(d):
			return false
		}
	}
}

func TestIdleClock(t *testing.T) {
	const after = 20 * time.Millisecond
	// Long enough for the clock to fire many times over if it were wrong.
	const quiet = 10 * after
	never := func() bool { return false }

	t.Run("stops when idle", func(t *testing.T) {
		stop, wait := stopped()
		newIdleClock(after, true, never, stop)
		if !wait(5 * time.Second) {
			t.Fatal("an idle agent did not stop")
		}
	})

	t.Run("not while a request is in flight", func(t *testing.T) {
		stop, wait := stopped()
		c := newIdleClock(after, true, never, stop)
		if ok, _ := c.begin(false); !ok {
			t.Fatal("begin refused")
		}
		if wait(quiet) {
			t.Fatal("stopped with a request in flight")
		}
		c.end()
		if !wait(5 * time.Second) {
			t.Fatal("did not stop after the request ended")
		}
		if ok, _ := c.begin(false); ok {
			t.Error("a request was taken after the agent stopped")
		}
	})

	t.Run("not while a command runs", func(t *testing.T) {
		stop, wait := stopped()
		var busy atomic.Bool
		busy.Store(true)
		c := newIdleClock(after, true, busy.Load, stop)
		if wait(quiet) {
			t.Fatal("stopped while a command runs")
		}
		busy.Store(false)
		c.poke() // the command ended
		if !wait(5 * time.Second) {
			t.Fatal("did not stop after the command ended")
		}
	})

	t.Run("stops once busy ends without a poke", func(t *testing.T) {
		// An ended command's record nobody collected expires.
		stop, wait := stopped()
		var busy atomic.Bool
		busy.Store(true)
		newIdleClock(after, true, busy.Load, stop)
		if wait(quiet) {
			t.Fatal("stopped while busy")
		}
		busy.Store(false)
		if !wait(5 * time.Second) {
			t.Fatal("did not stop after busy ended")
		}
	})

	t.Run("a warm box waits for its first real request", func(t *testing.T) {
		stop, wait := stopped()
		var armedBy atomic.Int32
		c := newIdleClock(after, false, never, stop)
		h := c.wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
			func() { armedBy.Add(1) })
		do := func(method, path string, warmUp bool) int {
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(method, path, nil)
			if warmUp {
				r.Header.Set(warmUpHeader, "1")
			}
			h.ServeHTTP(rec, r)
			return rec.Code
		}
		if code := do(http.MethodGet, "/health", false); code != http.StatusNoContent {
			t.Fatalf("health: %d", code)
		}
		// The daemon's warm-up exec.
		if code := do(http.MethodPost, "/process.Process/Start", true); code != http.StatusNoContent {
			t.Fatalf("warm-up: %d", code)
		}
		if wait(quiet) {
			t.Fatal("a warm box's agent stopped before any real request")
		}
		if code := do(http.MethodPost, "/init", false); code != http.StatusNoContent {
			t.Fatalf("init: %d", code)
		}
		if !wait(5 * time.Second) {
			t.Fatal("did not stop once used and idle")
		}
		if n := armedBy.Load(); n != 1 {
			t.Errorf("onArm ran %d times, want 1", n)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/process.Process/Start", nil))
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get(stoppingHeader) == "" {
			t.Errorf("request after stop: %d, %s %q; want 503 with %s (the daemon retries it)", rec.Code, stoppingHeader, rec.Header().Get(stoppingHeader), stoppingHeader)
		}
	})

	t.Run("activity restarts the clock", func(t *testing.T) {
		stop, wait := stopped()
		c := newIdleClock(quiet, true, never, stop)
		deadline := time.Now().Add(3 * quiet)
		for time.Now().Before(deadline) {
			if ok, _ := c.begin(false); !ok {
				t.Fatal("stopped while requests kept coming")
			}
			c.end()
			time.Sleep(quiet / 10)
		}
		if !wait(5 * time.Second) {
			t.Fatal("did not stop after the requests stopped")
		}
	})
}

func TestStateFile(t *testing.T) {
	fd, err := unix.MemfdCreate("agent-state-test", 0)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	again, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	s, err := openState(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer s.f.Close()
	if flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Errorf("state fd flags %#x, %v: want close-on-exec, so commands never inherit it", flags, err)
	}
	if got := s.get(); got.Used || got.Defaults != nil {
		t.Fatalf("empty memfd read as %+v", got)
	}
	long := InitRequest{Env: []string{"A=" + string(make([]byte, 1000))}, User: "nobody", Workdir: "/srv"}
	if err := s.update(func(st *agentState) { st.Defaults = &long }); err != nil {
		t.Fatal(err)
	}
	// A shorter state after a longer one: nothing of the old one is left.
	short := InitRequest{Env: []string{"B=2"}, Workdir: "/w"}
	if err := s.update(func(st *agentState) { st.Defaults, st.Used = &short, true }); err != nil {
		t.Fatal(err)
	}

	// The next agent reads it back.
	next, err := openState(again)
	if err != nil {
		t.Fatal(err)
	}
	defer next.f.Close()
	got := next.get()
	if !got.Used || got.Defaults == nil || len(got.Defaults.Env) != 1 || got.Defaults.Env[0] != "B=2" || got.Defaults.Workdir != "/w" || got.Defaults.User != "" {
		t.Errorf("next agent read %+v (defaults %+v)", got, got.Defaults)
	}

	// Not a file: a clear error.
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := openState(p[0]); err == nil {
		t.Error("a pipe was taken as state")
	}
	if _, err := openState(1 << 20); err == nil {
		t.Error("a closed fd was taken as state")
	}
	// A nil state (no fd from corral-init) is a no-op.
	var none *stateFile
	if err := none.update(func(st *agentState) { st.Used = true }); err != nil || none.get().Used {
		t.Error("nil state")
	}
}

// TestHeaderNames keeps the agent's copies of the header names equal to
// the daemon's (the agent does not import agentclient).
func TestHeaderNames(t *testing.T) {
	if restartsHeader != agentclient.RestartsHeader || failureHeader != agentclient.FailureHeader {
		t.Errorf("agent restart headers %q, %q; daemon's %q, %q", restartsHeader, failureHeader, agentclient.RestartsHeader, agentclient.FailureHeader)
	}
	if warmUpHeader != agentclient.WarmUpHeader || stoppingHeader != agentclient.StoppingHeader || oomKillsHeader != agentclient.OOMKillsHeader || outputOffsetHeader != agentclient.OutputOffsetHeader {
		t.Errorf("agent headers %q, %q, %q; daemon's %q, %q, %q", warmUpHeader, stoppingHeader, oomKillsHeader,
			agentclient.WarmUpHeader, agentclient.StoppingHeader, agentclient.OOMKillsHeader)
	}
}

// TestWithRestarts checks that an agent reports on every answer the
// failed agents corral-init counted, and adds nothing when none failed.
func TestWithRestarts(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	for _, tc := range []struct {
		name           string
		env            map[string]string
		count, failure string
	}{
		{"none", map[string]string{}, "", ""},
		{"zero", map[string]string{restartsEnv: "0"}, "", ""},
		{"garbage", map[string]string{restartsEnv: "x"}, "", ""},
		{"two", map[string]string{restartsEnv: "2", failureEnv: "killed by signal 9"}, "2", "killed by signal 9"},
		{"control characters", map[string]string{restartsEnv: "1", failureEnv: "a\r\nb"}, "1", "a??b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := withRestarts(ok, func(k string) string { return tc.env[k] })
			for range 2 {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/health", nil))
				if got := rec.Header().Get(restartsHeader); got != tc.count {
					t.Errorf("%s = %q; want %q", restartsHeader, got, tc.count)
				}
				if got := rec.Header().Get(failureHeader); got != tc.failure {
					t.Errorf("%s = %q; want %q", failureHeader, got, tc.failure)
				}
			}
		})
	}
}
