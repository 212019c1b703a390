package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// AgentPool is what the proxy needs of the daemon's agent pool
// (*agentpool.Pool), which owns the connections to agents.
type AgentPool interface {
	// Transport returns the round tripper of requests to the agent at
	// addr: over HTTP/1.1 for an HTTP/1 request, else over h2c; idle
	// connections stay open; a request an idle agent refused while
	// stopping is sent again.
	Transport(addr string) http.RoundTripper
	// Check asks the agent at addr for its health on a connection of its
	// own, within ctx.
	Check(ctx context.Context, addr string) error
}

// agentProxy forwards data-plane requests to sandbox agents, streaming in
// both directions without buffering. A request to a paused or suspended
// sandbox resumes it first (auto-resume); every request counts as activity
// for the sandbox's idle timeout, from its start to its end (a long exec
// stream keeps the sandbox busy).
//
// A request goes to the agent in the HTTP version it came in: HTTP/1.1
// over h1, HTTP/2 over h2c (the agent serves both on one socket). HTTP/2
// is needed only for bidirectional streams, which an HTTP/1.1 client
// cannot make anyway, and Go's HTTP/1.1 client is the faster of the two
// for the short unary and server-streaming calls that SDKs and the CLI
// send over HTTP/1.1 (alternating series of execs of "true" through the
// daemon; the figures are in the commit that made this). The agent pool
// (AgentPool) owns the connections and picks the version.
type agentProxy struct {
	m  Manager
	rp *httputil.ReverseProxy
	// agents carries the requests to the agents.
	agents AgentPool
	// busy keeps the sandboxes of requests in flight active.
	busy *inflight
	// timeouts bound the waits on agents.
	timeouts AgentTimeouts
	// observe is told how long each exec took to start (Config.Observe).
	observe func(op string, d time.Duration, err error)
	// audit records the execs and file operations (Config.Audit); nil:
	// nothing is recorded.
	audit AuditLog
}

// busyTouchInterval is how often the sandboxes with a request in flight
// are marked active; it is below the shortest idle timeout the API takes
// (1 s).
const busyTouchInterval = 400 * time.Millisecond

// inflight counts the proxied requests in flight per sandbox and, while
// there are any, marks their sandboxes active every busyTouchInterval, so
// that a long exec stream is activity from its start to its end. Its
// goroutine runs only while a request is in flight.
type inflight struct {
	touch func(id string)

	mu sync.Mutex
	// n counts the requests in flight by sandbox ID; guarded by mu.
	n map[string]int
	// ticking is set while the goroutine runs; guarded by mu.
	ticking bool
}

func newInflight(touch func(id string)) *inflight {
	return &inflight{touch: touch, n: map[string]int{}}
}

// begin records a request to sandbox id; end must follow.
func (f *inflight) begin(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n[id]++
	if !f.ticking {
		f.ticking = true
		go f.run()
	}
}

// end records the end of a request to sandbox id, which counts as activity.
func (f *inflight) end(id string) {
	f.mu.Lock()
	if f.n[id]--; f.n[id] <= 0 {
		delete(f.n, id)
	}
	f.mu.Unlock()
	f.touch(id)
}

// run touches the busy sandboxes until none is left.
func (f *inflight) run() {
	t := time.NewTicker(busyTouchInterval)
	defer t.Stop()
	for range t.C {
		if !f.touchAll() {
			return
		}
	}
}

// touchAll marks the busy sandboxes active and reports whether there were
// any; when there were none the goroutine is done.
func (f *inflight) touchAll() bool {
	f.mu.Lock()
	ids := make([]string, 0, len(f.n))
	for id := range f.n {
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		f.ticking = false
	}
	f.mu.Unlock()
	for _, id := range ids {
		f.touch(id)
	}
	return len(ids) > 0
}

type targetKey struct{}

// target is where a proxied request goes: the agent at addr of sandbox
// id, at path.
type target struct {
	id, addr, path string
}

func newAgentProxy(m Manager, agents AgentPool, timeouts AgentTimeouts) *agentProxy {
	p := &agentProxy{m: m, agents: agents, busy: newInflight(m.Touch), timeouts: timeouts.withDefaults()}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "agent" // the pool dials t.addr
			pr.Out.URL.Path = t.path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = "sandbox"
			// The daemon's token (bearer or E2B's API key) and the
			// sandbox's access token are for the daemon only: never hand
			// them to a sandbox. Other schemes (E2B's Basic user) pass
			// through.
			if a := pr.Out.Header.Get("Authorization"); strings.HasPrefix(strings.ToLower(a), "bearer ") {
				pr.Out.Header.Del("Authorization")
			}
			pr.Out.Header.Del(APIKeyHeader)
			pr.Out.Header.Del(AccessTokenHeader)
			pr.Out.Header.Del(SandboxIDHeader)
		},
		Transport:      p,
		FlushInterval:  -1,
		ModifyResponse: p.guardStream,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t, _ := r.Context().Value(targetKey{}).(target)
			if ue := watchOf(r.Context()).unresponsive(); ue != nil {
				writeError(r.Context(), w, ue)
				return
			}
			if r.Context().Err() != nil {
				return // the client went away
			}
			switch {
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				// The agent took the request and its connection broke
				// before it answered: it died, or its sandbox went.
				err = p.brokeBeforeAnswer(r.Context(), t.id, err)
			default:
				err = p.agentError(r.Context(), t.id, err)
			}
			writeError(r.Context(), w, err)
		},
	}
	return p
}

// agentError explains a failed request to sandbox id's agent. When the
// sandbox was removed, or is being removed, while the request ran, its
// agent went with it: the caller is told so (not found, or failed
// precondition), rather than that the agent is unavailable, which invites
// a retry that cannot succeed. A sandbox suspended or paused meanwhile
// stays unavailable (the next request resumes it), with the reason.
func (p *agentProxy) agentError(ctx context.Context, id string, err error) error {
	rec, gerr := p.m.Get(ctx, id)
	switch {
	case errdefs.IsNotFound(gerr):
		return fmt.Errorf("sandbox %s was removed while the request ran (agent: %v): %w", id, err, errdefs.ErrNotFound)
	case gerr == nil && rec.State == sandbox.StateRunning:
		// The agent may be gone with the box's init.
		if rec, cerr := p.m.Check(ctx, id); cerr == nil && rec.State == sandbox.StateExited {
			return sandbox.ErrExited(rec)
		}
	case gerr != nil:
	case rec.State == sandbox.StateExited:
		return sandbox.ErrExited(rec)
	case rec.State == sandbox.StateDeleting:
		return fmt.Errorf("sandbox %s is being removed (agent: %v): %w", id, err, errdefs.ErrFailedPrecondition)
	case rec.State == sandbox.StatePaused || rec.State == sandbox.StateSuspending ||
		rec.State == sandbox.StateSuspended || rec.State == sandbox.StateResuming:
		return fmt.Errorf("sandbox %s became %s while the request ran; a new request resumes it (agent: %v): %w", id, rec.State, err, errdefs.ErrUnavailable)
	default:
		return fmt.Errorf("sandbox %s is %s (agent: %v): %w", id, rec.State, err, errdefs.ErrFailedPrecondition)
	}
	log.G(ctx).Warn("proxy to agent", "sandbox", id, "error", err)
	return fmt.Errorf("sandbox %s agent: %v: %w", id, err, errdefs.ErrUnavailable)
}

// brokeBeforeAnswer explains a request whose connection to the agent of
// sandbox id broke (cause) after the request was sent, before any answer:
// as agentError, but a box that still runs lost its agent.
func (p *agentProxy) brokeBeforeAnswer(ctx context.Context, id string, cause error) error {
	if rec, err := p.m.Get(ctx, id); err == nil && rec.State == sandbox.StateRunning {
		return p.agentDied(ctx, id, 0, false, cause)
	}
	return p.agentError(ctx, id, cause)
}

// serve forwards r to the agent of sandbox idOrName at path, resuming the
// sandbox first when it is paused or suspended.
func (p *agentProxy) serve(w http.ResponseWriter, r *http.Request, idOrName, path string) {
	rec, err := p.m.EnsureRunning(r.Context(), idOrName)
	if err == nil && (rec.State == sandbox.StateSuspending || rec.State == sandbox.StateResuming) {
		// Racing an (idle) suspend or another resume: Resume waits for
		// it to finish, then brings the sandbox back.
		rec, err = p.m.Resume(r.Context(), rec.ID)
	}
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if rec.State == sandbox.StateExited {
		writeError(r.Context(), w, sandbox.ErrExited(rec))
		return
	}
	if rec.State != sandbox.StateRunning {
		writeError(r.Context(), w, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition))
		return
	}
	p.forward(w, r, rec, path)
}

// forward sends r to the agent of the running sandbox rec at path.
func (p *agentProxy) forward(w http.ResponseWriter, r *http.Request, rec sandbox.Record, path string) {
	if err := replayable(r, path); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.proxied = true
	}
	// The request is activity from its start (EnsureRunning) to its end.
	p.busy.begin(rec.ID)
	defer p.busy.end(rec.ID)
	// Every wait on the agent is bounded (agentWatch).
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	var execT time.Duration
	if path == startPath {
		execT = execTimeout(r)
	}
	aw := p.watch(ctx, cancel, rec.ID, rec.AgentAddr, execT)
	defer aw.stop()
	ctx = context.WithValue(ctx, watchKey{}, aw)
	ctx = context.WithValue(ctx, targetKey{}, target{id: rec.ID, addr: rec.AgentAddr, path: path})
	if path == startPath && p.observe != nil {
		o := &execObserver{ResponseWriter: w, start: time.Now(), status: http.StatusOK, fn: p.observe}
		defer o.end()
		w = o
	}
	if p.audit != nil {
		var done func()
		if w, ctx, done = p.record(w, r, ctx, rec.ID, path); done != nil {
			defer done()
		}
	}
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// record wraps w to add the audit event of the exec or file operation r
// carries: done, called once the request is over, adds the file event or
// ends the exec's record (whose events come as its answer streams).
// Other requests are left as they are (done is nil).
func (p *agentProxy) record(w http.ResponseWriter, r *http.Request, ctx context.Context, id, path string) (http.ResponseWriter, context.Context, func()) {
	op := ""
	if path != startPath {
		if op = audit.FileOp(r.Method, path); op == "" {
			return w, ctx, nil
		}
	}
	aw := &auditWriter{ResponseWriter: w, status: http.StatusOK}
	who := ""
	add := func(ev rest.AuditEvent) {
		if who == "" {
			who = clientOf(r).remote
		}
		ev.Client = who
		p.audit.Add(ev)
	}
	if path == startPath {
		er := audit.NewExec(add, id, r)
		if dl, ok := p.audit.(detachedLog); ok {
			er.Detach = dl.Detached
		}
		return aw, context.WithValue(ctx, execRecordKey{}, er), func() { er.Finish(aw.status) }
	}
	var body []byte
	if r.GetBody != nil && op != "write" {
		if b, err := r.GetBody(); err == nil {
			body, _ = io.ReadAll(b)
		}
	}
	in := &countedBody{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = in
	}
	return aw, ctx, func() { add(audit.FileEvent(id, op, r, body, aw.status, in.n.Load(), aw.n)) }
}

// maxReplayBody is the largest request body the proxy keeps, so that the
// agent pool can send the request again to a new agent when the one it
// reached was stopping after being idle.
const maxReplayBody = 1 << 20

// startPath is the agent RPC that starts a command (an exec).
const startPath = "/process.Process/Start"

// streamInputPath is the one agent RPC whose request body is a stream
// that ends only when the client is done with it.
const streamInputPath = "/process.Process/StreamInput"

// replayable reads r's body whole first, when it is at most maxReplayBody
// and not a client stream, and gives r a GetBody, so that the agent pool
// can send it again. A larger body streams through as it comes (its
// request is not retried).
func replayable(r *http.Request, path string) error {
	if r.Body == nil || r.Body == http.NoBody || path == streamInputPath || r.ContentLength > maxReplayBody {
		return nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, maxReplayBody+1))
	if err != nil {
		return fmt.Errorf("read request body: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	if len(buf) > maxReplayBody {
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return nil
	}
	r.Body.Close()
	r.ContentLength = int64(len(buf))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
	r.Body, _ = r.GetBody()
	return nil
}

// RoundTrip sends r to its target's agent through the agent pool. The
// wait for the answer, and every read of its body, is a wait of the
// request's agentWatch.
func (p *agentProxy) RoundTrip(r *http.Request) (*http.Response, error) {
	t, _ := r.Context().Value(targetKey{}).(target)
	rt := p.agents.Transport(t.addr)
	w := watchOf(r.Context())
	if w == nil {
		return rt.RoundTrip(r)
	}
	w.begin()
	resp, err := rt.RoundTrip(r)
	w.end()
	if err != nil {
		if ue := w.unresponsive(); ue != nil {
			return nil, ue
		}
		return nil, err
	}
	resp.Body = &watchedBody{ReadCloser: resp.Body, w: w}
	return resp, nil
}
