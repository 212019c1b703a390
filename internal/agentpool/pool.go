// Package agentpool owns the daemon's connections to the agents of its
// sandboxes: it dials them by the scheme of their address, keeps the
// connections of each agent open between requests, warms a new box's up,
// checks an agent's health and drops its connections. The data-plane
// proxy (internal/httpapi) sends every request through it, and the
// sandbox Manager reaches agents through it (sandbox.Agents: readiness,
// defaults, files, warm-up, drop).
//
// An address is "<scheme>://<rest>" (Runtime.AgentAddr). The scheme picks
// the Dialer from the pool's registry (Config.Dialers): today
// "unix-abstract" (the container tiers' socket inside a box's network
// namespace), "unix" and "tcp" (tests), all through agentclient.Dial. A
// tier whose agent is reached otherwise (a VM's vsock, a multiplexed
// serial stream) registers a Dialer for its scheme; everything above the
// connection (HTTP/1.1 and h2c, pooling, retries, health) stays the same.
package agentpool

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/log"
)

// Dialer connects to the agent at addr, an address of the scheme it is
// registered for.
type Dialer func(ctx context.Context, addr string) (net.Conn, error)

// Dialers returns the dialers of the schemes agentclient.Dial knows:
// unix-abstract, tcp-netns, unix and tcp.
func Dialers() map[string]Dialer {
	return map[string]Dialer{
		"unix-abstract": agentclient.Dial,
		"tcp-netns":     agentclient.Dial,
		"unix":          agentclient.Dial,
		"tcp":           agentclient.Dial,
	}
}

// DefaultTimeout is Config.Timeout when it is zero.
const DefaultTimeout = 30 * time.Second

// Config configures a Pool.
type Config struct {
	// Dialers by address scheme ("unix-abstract", "vsock"); nil means
	// Dialers().
	Dialers map[string]Dialer
	// Timeout bounds each of Init, ReadFile and WriteFile; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Restarts, when set, is told of each answer of an agent that
	// reports failed agents before it (agentclient.RestartsHeader): the
	// agent's address, their count and how the last one ended. It is
	// called on the request's goroutine and must be quick.
	Restarts func(addr string, count uint64, failure string)
}

// Pool holds the connections to agents, by address. Its zero value is
// not usable: call New.
type Pool struct {
	dialers  map[string]Dialer
	timeout  time.Duration
	restarts func(addr string, count uint64, failure string)

	mu sync.Mutex
	// agents are the agents with a connection open or a call in
	// progress, by address; guarded by mu.
	agents map[string]*agent
}

// agent is the transports to one agent. It stays in Pool.agents while a
// call uses it or a connection of it is open, so that the pool forgets an
// agent once its box is gone (the agent's end of every connection closed).
type agent struct {
	addr string
	// h1 and h2 pool connections over HTTP/1.1 and h2c.
	h1, h2 *http.Transport
	// users counts the calls in progress, conns the open connections;
	// guarded by Pool.mu.
	users, conns int
}

// New returns an empty pool.
func New(cfg Config) *Pool {
	if cfg.Dialers == nil {
		cfg.Dialers = Dialers()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Pool{dialers: cfg.Dialers, timeout: cfg.Timeout, restarts: cfg.Restarts, agents: map[string]*agent{}}
}

// Scheme returns the scheme of addr ("unix-abstract" of
// "unix-abstract:///run/x/netns#corral-agent").
func Scheme(addr string) (string, error) {
	scheme, _, ok := strings.Cut(addr, "://")
	if !ok || scheme == "" {
		return "", fmt.Errorf("agent address %q: want <scheme>://<address>: %w", addr, errdefs.ErrInvalidArgument)
	}
	return scheme, nil
}

// Dial connects to the agent at addr with the Dialer of its scheme. An
// address without a scheme is errdefs.ErrInvalidArgument, a scheme
// without a Dialer errdefs.ErrNotImplemented.
func (p *Pool) Dial(ctx context.Context, addr string) (net.Conn, error) {
	scheme, err := Scheme(addr)
	if err != nil {
		return nil, err
	}
	dial, ok := p.dialers[scheme]
	if !ok {
		known := slices.Sorted(func(yield func(string) bool) {
			for s := range p.dialers {
				if !yield(s) {
					return
				}
			}
		})
		return nil, fmt.Errorf("agent address %q: no dialer for scheme %q (this daemon dials %s): %w",
			addr, scheme, strings.Join(known, ", "), errdefs.ErrNotImplemented)
	}
	return dial(ctx, addr)
}

// acquire returns the agent at addr, made if need be, for a call; release
// must follow.
func (p *Pool) acquire(addr string) *agent {
	p.mu.Lock()
	defer p.mu.Unlock()
	a := p.agents[addr]
	if a == nil {
		a = p.newAgent(addr)
		p.agents[addr] = a
	}
	a.users++
	return a
}

// release ends a call of acquire.
func (p *Pool) release(a *agent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	a.users--
	p.forgetLocked(a)
}

// forgetLocked drops a from the pool when nothing uses it; guarded by mu.
func (p *Pool) forgetLocked(a *agent) {
	if a.users == 0 && a.conns == 0 && p.agents[a.addr] == a {
		delete(p.agents, a.addr)
	}
}

// newAgent makes the transports to the agent at addr.
func (p *Pool) newAgent(addr string) *agent {
	a := &agent{addr: addr}
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		// A dial counts as a use of a: the transport may go on with it
		// after the request that started it ended, and its connection
		// then waits in a's idle pool, where Drop must find it.
		p.mu.Lock()
		if p.agents[addr] != a {
			p.mu.Unlock()
			// a was forgotten, so no request waits for this dial.
			return nil, fmt.Errorf("dial agent %s: no request waits for it: %w", addr, context.Canceled)
		}
		a.users++
		p.mu.Unlock()
		c, err := p.Dial(ctx, addr)
		p.mu.Lock()
		defer p.mu.Unlock()
		a.users--
		if err != nil {
			p.forgetLocked(a)
			return nil, err
		}
		a.conns++
		return &countedConn{Conn: c, closed: func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			a.conns--
			p.forgetLocked(a)
		}}, nil
	}
	// HTTP/2 without TLS (h2c) carries Connect's bidirectional streams.
	var h2 http.Protocols
	h2.SetUnencryptedHTTP2(true)
	a.h2 = &http.Transport{
		Protocols:   &h2,
		HTTP2:       &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
		DialContext: dial,
		// Proxied requests hold up to 4 idle connections per agent.
		MaxIdleConnsPerHost: 4,
		// No idle timeout: a warm pool's sandbox can wait for minutes
		// before it is handed out, and its first request must not dial
		// again (measured: a pooled box's first exec after a wait longer
		// than an idle timeout was slower). The agent ends the
		// connection when it exits after being idle (a GOAWAY, or a close
		// over HTTP/1.1) or when its sandbox goes (EOF); over h2c a paused
		// box's fails the PING above. The proxy sends a request to a
		// paused box only after it resumed it.
		IdleConnTimeout:    0,
		DisableCompression: true,
	}
	var h1 http.Protocols
	h1.SetHTTP1(true)
	a.h1 = a.h2.Clone()
	a.h1.Protocols, a.h1.HTTP2 = &h1, nil
	return a
}

// countedConn calls closed once when it is closed.
type countedConn struct {
	net.Conn
	once   sync.Once
	closed func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.closed)
	return err
}

// Transport returns the round tripper of requests to the agent at addr
// (any URL host: the address decides where they go). See RoundTrip.
func (p *Pool) Transport(addr string) http.RoundTripper { return transport{p: p, addr: addr} }

type transport struct {
	p    *Pool
	addr string
}

// streamInputPath is the one agent RPC whose request body is a stream
// that ends only when the client is done with it.
const streamInputPath = "/process.Process/StreamInput"

// StoppingRetries is how many times a request is sent again to an agent
// that said it is stopping: an agent that says so forever costs a few
// tens of milliseconds.
const StoppingRetries = 5

// RoundTrip sends r over HTTP/1.1 when it is an HTTP/1 request (a proxied
// request keeps the version it came in, and Go's HTTP/1.1 client is the
// faster one for the short unary and server-streaming calls that SDKs and
// the CLI send over HTTP/1.1), and over h2c otherwise; StreamInput always
// goes over h2c, where its request body can stream while the response
// does. Idle connections stay open for the agent's next request.
//
// An agent under corral-init that exits after being idle answers 503 with
// agentclient.StoppingHeader: it did nothing with the request, and the
// next connection starts a new agent. RoundTrip then sends the request
// again (a few times, a few milliseconds apart), unless its body cannot be
// sent again (no GetBody: a client stream, a large upload), which gets
// the 503.
func (t transport) RoundTrip(r *http.Request) (*http.Response, error) {
	a := t.p.acquire(t.addr)
	defer t.p.release(a)
	rt := a.h2
	if r.ProtoMajor == 1 && r.URL.Path != streamInputPath {
		rt = a.h1
	}
	for attempt := 1; ; attempt++ {
		resp, err := rt.RoundTrip(r)
		if err == nil && t.p.restarts != nil {
			if h := resp.Header.Get(agentclient.RestartsHeader); h != "" {
				if n, perr := strconv.ParseUint(h, 10, 64); perr == nil {
					t.p.restarts(t.addr, n, resp.Header.Get(agentclient.FailureHeader))
				}
			}
		}
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(agentclient.StoppingHeader) == "" || attempt > StoppingRetries {
			return resp, err
		}
		if r.Body != nil && r.Body != http.NoBody && r.GetBody == nil {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		log.G(r.Context()).Debug("agent stopping: sending the request again", "agent", t.addr, "attempt", attempt)
		select {
		case <-r.Context().Done():
			return nil, r.Context().Err()
		case <-time.After(time.Duration(attempt) * 2 * time.Millisecond):
		}
		next := r.Clone(r.Context())
		if r.GetBody != nil {
			b, err := r.GetBody()
			if err != nil {
				return nil, err
			}
			next.Body = b
		}
		r = next
	}
}

// Drop closes the idle connections to the agent at addr; the next request
// dials again. Connections in use by a request are left alone. A
// checkpoint (suspend, fork with memory state) cannot save a box that has
// a connection to the daemon, and an agent stopping on SIGTERM waits for
// its idle connections.
func (p *Pool) Drop(addr string) {
	p.mu.Lock()
	a := p.agents[addr]
	p.mu.Unlock()
	if a != nil {
		a.h1.CloseIdleConnections()
		a.h2.CloseIdleConnections()
	}
}

// Close closes the idle connections to every agent.
func (p *Pool) Close() error {
	p.mu.Lock()
	agents := make([]*agent, 0, len(p.agents))
	for _, a := range p.agents {
		agents = append(agents, a)
	}
	p.mu.Unlock()
	for _, a := range agents {
		a.h1.CloseIdleConnections()
		a.h2.CloseIdleConnections()
	}
	return nil
}

// Len returns how many agents the pool holds a connection to or a call
// for.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.agents)
}

// Check asks the agent at addr for GET /health on a connection of its
// own (not one a stuck request may hold), closed before it returns,
// within ctx.
func (p *Pool) Check(ctx context.Context, addr string) error {
	c, err := p.Dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Now()) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, baseURL+"/health", nil)
	if err != nil {
		return err
	}
	req.Close = true
	if err := req.Write(c); err != nil {
		return errors.Join(ctx.Err(), fmt.Errorf("health: %w", err))
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return errors.Join(ctx.Err(), fmt.Errorf("health: %w", err))
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// baseURL is the base of requests to an agent; the host is not used.
const baseURL = "http://agent"

// Ready polls the agent at addr for its health until it answers or ctx
// ends. The first retries come after ~100µs and double up to 20ms: this is
// on the sandbox create path, where the agent is usually up within a
// millisecond. No connection stays open.
func (p *Pool) Ready(ctx context.Context, addr string) error {
	delay := 100 * time.Microsecond
	for {
		err := p.Check(ctx, addr)
		if err == nil {
			return nil
		}
		if errdefs.IsNotImplemented(err) || errdefs.IsInvalidArgument(err) {
			return err // a scheme without a dialer, a bad address: waiting does not help
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for agent: %w (last error: %w)", errdefs.ErrUnavailable, errors.Join(ctx.Err(), err))
		case <-t.C:
		}
		delay = min(delay*2, 20*time.Millisecond)
	}
}
