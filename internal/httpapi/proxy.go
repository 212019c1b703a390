package httpapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// DialFunc connects to an agent address.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// DialAgent dials "unix:///path/agent.sock", "tcp://host:port" or
// "http://host:port". Other schemes (vsock://) are errdefs.ErrNotImplemented
// here.
func DialAgent(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	switch {
	case strings.HasPrefix(addr, "unix://"):
		return d.DialContext(ctx, "unix", strings.TrimPrefix(addr, "unix://"))
	case strings.HasPrefix(addr, "tcp://"):
		return d.DialContext(ctx, "tcp", strings.TrimPrefix(addr, "tcp://"))
	case strings.HasPrefix(addr, "http://"):
		return d.DialContext(ctx, "tcp", strings.TrimSuffix(strings.TrimPrefix(addr, "http://"), "/"))
	}
	return nil, fmt.Errorf("dial agent %q: unsupported address scheme: %w", addr, errdefs.ErrNotImplemented)
}

// agentHostSuffix makes the outgoing Host of a proxied request
// "<sandbox id>.agent"; the transport's dialer resolves it to the agent's
// address, so idle connections are pooled per sandbox.
const agentHostSuffix = ".agent"

// agentProxy forwards data-plane requests to sandbox agents, streaming in
// both directions without buffering.
type agentProxy struct {
	m  *sandbox.Manager
	rp *httputil.ReverseProxy
}

type targetKey struct{}

type target struct {
	id   string
	path string
}

func newAgentProxy(m *sandbox.Manager, dial DialFunc) *agentProxy {
	p := &agentProxy{m: m}
	// Agents speak HTTP/2 without TLS (h2c), which carries Connect's
	// bidirectional streams.
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols: &protos,
		HTTP2:     &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
		DialContext: func(ctx context.Context, _, hostport string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(hostport)
			if err != nil {
				return nil, err
			}
			id, ok := strings.CutSuffix(host, agentHostSuffix)
			if !ok {
				return nil, fmt.Errorf("proxy: unexpected host %q: %w", host, errdefs.ErrInternal)
			}
			rec, err := m.Get(ctx, id)
			if err != nil {
				return nil, err
			}
			return dial(ctx, rec.AgentAddr)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(target)
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.id + agentHostSuffix
			pr.Out.URL.Path = t.path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = "sandbox"
			// The daemon's bearer token is for the daemon only: never hand it
			// to a sandbox. Other schemes (E2B's Basic user) pass through.
			if a := pr.Out.Header.Get("Authorization"); strings.HasPrefix(strings.ToLower(a), "bearer ") {
				pr.Out.Header.Del("Authorization")
			}
			pr.Out.Header.Del(SandboxIDHeader)
		},
		Transport:     tr,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t, _ := r.Context().Value(targetKey{}).(target)
			if r.Context().Err() != nil {
				return // the client went away
			}
			if !errdefs.IsNotFound(err) {
				log.G(r.Context()).Warn("proxy to agent", "sandbox", t.id, "error", err)
				err = fmt.Errorf("sandbox %s agent: %v: %w", t.id, err, errdefs.ErrUnavailable)
			}
			writeError(r.Context(), w, err)
		},
	}
	return p
}

// serve forwards r to the agent of sandbox idOrName at path.
func (p *agentProxy) serve(w http.ResponseWriter, r *http.Request, idOrName, path string) {
	rec, err := p.m.Get(r.Context(), idOrName)
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if rec.State != sandbox.StateRunning {
		writeError(r.Context(), w, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition))
		return
	}
	ctx := context.WithValue(r.Context(), targetKey{}, target{id: rec.ID, path: path})
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}
