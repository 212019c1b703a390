package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// idleClock ends an agent that corral-init started once nothing has needed
// it for a while: no request in flight (streams included), no running
// command and no polling watcher (busy), for after. It then calls stop once.
// A request that arrives while the agent stops gets 503; the daemon's next
// connection starts a new agent.
type idleClock struct {
	after time.Duration
	busy  func() bool
	stop  func()

	mu sync.Mutex
	// armed is false in a warm pool's box until its first real request.
	armed    bool
	active   int       // requests in flight
	last     time.Time // end of the last request or command
	timer    *time.Timer
	stopping bool
}

func newIdleClock(after time.Duration, armed bool, busy func() bool, stop func()) *idleClock {
	c := &idleClock{after: after, armed: armed, busy: busy, stop: stop, last: time.Now()}
	c.mu.Lock()
	c.armLocked()
	c.mu.Unlock()
	return c
}

// warmUpHeader marks the daemon's requests that warm a pool's box up
// (agentclient.WarmUpHeader): like GET /health, they do not start a warm
// box's idle clock.
const warmUpHeader = "Corral-Warm-Up"

// stoppingHeader marks the 503 of a stopping agent, which the daemon's
// proxy retries (agentclient.StoppingHeader).
const stoppingHeader = "Corral-Agent-Stopping"

// oomKillsHeader carries, on the answer of process.Process Start and
// Connect, the box's OOM kill counter when the command started (or the
// Connect came): if the stream then breaks because the agent died and the
// counter has grown, the daemon says the OOM killer killed the agent.
const oomKillsHeader = "Corral-Oom-Kills"

// restartsHeader and failureHeader report the agents of the box that
// failed before this one (corral-init's count, in restartsEnv and
// failureEnv): the daemon's agentclient.RestartsHeader and FailureHeader.
const (
	restartsHeader = "Corral-Agent-Restarts"
	failureHeader  = "Corral-Agent-Last-Failure"
	restartsEnv    = "CORRAL_AGENT_RESTARTS"
	failureEnv     = "CORRAL_AGENT_LAST_FAILURE"
)

// withRestarts makes h report the failed agents that corral-init counted
// in env (restartsEnv, failureEnv) on every answer; h itself when none.
func withRestarts(h http.Handler, getenv func(string) string) http.Handler {
	n, err := strconv.ParseUint(getenv(restartsEnv), 10, 64)
	if err != nil || n == 0 {
		return h
	}
	count := strconv.FormatUint(n, 10)
	last := headerSafe(getenv(failureEnv))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(restartsHeader, count)
		if last != "" {
			w.Header().Set(failureHeader, last)
		}
		h.ServeHTTP(w, r)
	})
}

// headerSafe keeps s safe as a header value: at most 64 bytes of
// printable ASCII.
func headerSafe(s string) string {
	b := []byte(s[:min(len(s), 64)])
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// wrap counts h's requests in flight. onArm runs (outside the lock) when a
// warm agent's first real request arms the clock.
func (c *idleClock) wrap(h http.Handler, onArm func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		warmUp := r.Method == http.MethodGet && r.URL.Path == "/health" || r.Header.Get(warmUpHeader) != ""
		ok, armed := c.begin(warmUp)
		if !ok {
			w.Header().Set("Retry-After", "0")
			w.Header().Set(stoppingHeader, "1")
			writeJSONError(w, http.StatusServiceUnavailable, errors.New("the agent is stopping after being idle: retry, and a new one starts"))
			return
		}
		defer c.end()
		if armed && onArm != nil {
			onArm()
		}
		h.ServeHTTP(w, r)
	})
}

// begin counts a request; ok is false once the agent is stopping. armed
// is true when this request armed the clock (any but a warm-up).
func (c *idleClock) begin(warmUp bool) (ok, armed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return false, false
	}
	c.active++
	if !warmUp && !c.armed {
		c.armed, armed = true, true
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	return true, armed
}

func (c *idleClock) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.active--
	c.last = time.Now()
	c.armLocked()
}

// poke restarts the clock when a command ends.
func (c *idleClock) poke() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last = time.Now()
	c.armLocked()
}

func (c *idleClock) armLocked() {
	if c.after <= 0 || !c.armed || c.active > 0 || c.stopping {
		return
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(c.after, c.fire)
		return
	}
	c.timer.Reset(c.after)
}

func (c *idleClock) fire() {
	c.mu.Lock()
	if c.stopping || c.active > 0 || !c.armed {
		// A request re-arms the clock when it ends.
		c.mu.Unlock()
		return
	}
	if c.busy() {
		// A command that ends pokes the clock; an ended command's
		// record that nobody collects keeps the agent only for a while:
		// look again later.
		c.timer.Reset(c.after)
		c.mu.Unlock()
		return
	}
	if left := c.after - time.Since(c.last); left > 0 {
		c.timer.Reset(left)
		c.mu.Unlock()
		return
	}
	c.stopping = true
	c.mu.Unlock()
	c.stop()
}

// agentState is what an agent under corral-init leaves for the next one.
type agentState struct {
	// Defaults are the live command defaults (POST /init), if set.
	Defaults *InitRequest `json:"defaults,omitempty"`
	// Used is true once a warm pool's box had a real request: the next
	// agents' idle clocks start at once.
	Used bool `json:"used,omitempty"`
}

// maxStateBytes bounds the state read back (the defaults are at most
// maxInitBytes of JSON).
const maxStateBytes = 4 << 20

// stateFile is the memfd, owned by corral-init, that holds agentState.
type stateFile struct {
	mu sync.Mutex
	f  *os.File
	st agentState
}

// openState reads the state in fd. It is made close-on-exec so that
// commands never inherit it.
func openState(fd int) (*stateFile, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("state fd %d: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("state fd %d is not a file (mode %o)", fd, st.Mode)
	}
	unix.CloseOnExec(fd)
	s := &stateFile{f: os.NewFile(uintptr(fd), "agent-state")}
	b, err := io.ReadAll(io.LimitReader(io.NewSectionReader(s.f, 0, maxStateBytes+1), maxStateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	if len(b) > maxStateBytes {
		return nil, fmt.Errorf("state is over %d bytes", maxStateBytes)
	}
	if len(b) > 0 {
		if err := json.Unmarshal(b, &s.st); err != nil {
			return nil, fmt.Errorf("read state: %w", err)
		}
	}
	return s, nil
}

// update changes the state with fn and writes it for the next agent.
func (s *stateFile) update(fn func(*agentState)) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.st)
	b, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	if _, err := s.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := s.f.Truncate(int64(len(b))); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func (s *stateFile) get() agentState {
	if s == nil {
		return agentState{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// outputOffsetHeader is the response header of a Connect with replay (and
// no tail) that gives the offset of the first byte replayed
// (ConnectRequest.from_offset): the daemon's output log files resume there.
const outputOffsetHeader = "Corral-Output-Offset"
