package tunnel

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
)

// Names of the places a token can travel in.
const (
	// TokenHeader carries the token for clients that cannot set
	// Authorization (or use it for the app in the box).
	TokenHeader = "X-Corral-Tunnel-Token"
	// TokenParam is the query parameter a browser URL carries the token in.
	TokenParam = "corral_token"
	// CookiePrefix starts the name of the token cookie, "corral_tunnel_<port>".
	CookiePrefix = "corral_tunnel_"
)

// upstreamHostSuffix ends the host name the Transport sees for an upstream,
// "{port}.{sandbox}.invalid"; the dialer parses it back, so idle connections
// are pooled per sandbox and port.
const upstreamHostSuffix = ".invalid"

// Dialer connects to port inside the sandbox (the daemon implements it by
// opening a socket in the box's network namespace and connecting to
// 127.0.0.1:port there).
type Dialer func(ctx context.Context, sandbox string, port int) (net.Conn, error)

// Config configures Handler.
type Config struct {
	// Registry holds the exposures and their tokens. Required.
	Registry *Registry
	// Dial connects to a port inside a sandbox. Required.
	Dial Dialer
	// Domain, when set, enables host-based routing: a request for host
	// "{port}-{id}.{Domain}" (any port suffix on the Host header ignored)
	// goes to that sandbox's port.
	Domain string
	// Resolve maps a sandbox ID or name in a URL to its ID (nil = identity).
	// An error is answered like an unknown exposure, with a 401, so that
	// names cannot be probed.
	Resolve func(idOrName string) (string, error)
}

type handler struct {
	reg     *Registry
	resolve func(string) (string, error)
	domain  string // normalized
	tr      *http.Transport
	// dummy is compared against when there is no exposure, so that an
	// unknown exposure costs what a wrong token does.
	dummy string
}

// Handler serves tunnels:
//
//   - path form: /t/{id}/{port}/{rest...} forwards /{rest...} (query kept)
//     to the box; /t/{id}/{port} redirects to /t/{id}/{port}/;
//   - host form (when Domain is set): every path of {port}-{id}.{Domain}.
//
// A request authenticates with the first of these that holds the
// exposure's token: "Authorization: Bearer <token>", the
// X-Corral-Tunnel-Token header, the corral_token query parameter, the
// corral_tunnel_<port> cookie. Tokens are compared in constant time. A GET
// or HEAD (not an Upgrade) authenticated by the query parameter gets an
// HttpOnly, SameSite=Lax cookie scoped to the path prefix (path form) or the
// host (host form) and a 303 to the same URL without the parameter, so
// browsers keep working and the token leaves the address bar.
//
// A missing or wrong token, an unknown sandbox and an unexposed port all get
// the same 401 {"code":"unauthenticated","message":"..."}. Failing to reach
// the port gets a 502 naming the sandbox and port.
//
// Requests go through httputil.ReverseProxy, streaming (FlushInterval -1),
// with X-Forwarded-For/Proto/Host set, the Host header kept and the token
// header, parameter and cookies removed; an Authorization header is removed
// only when it carries the token. WebSocket and other Upgrade requests work.
// Connections are pooled per sandbox and port, never across sandboxes, and
// no proxy from the environment is used.
func Handler(cfg Config) http.Handler {
	h := &handler{
		reg:     cfg.Registry,
		resolve: cfg.Resolve,
		domain:  normDomain(cfg.Domain),
		dummy:   newToken(),
	}
	h.tr = newTransport(cfg.Dial)
	return h
}

// newTransport returns the Transport of requests to ports in boxes, which
// dial connects to.
func newTransport(dial Dialer) *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			sandbox, port, err := parseUpstream(addr)
			if err != nil {
				return nil, err
			}
			c, err := dial(ctx, sandbox, port)
			if err != nil {
				return nil, &dialError{sandbox: sandbox, port: port, err: err}
			}
			return c, nil
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 8,
		IdleConnTimeout:     90 * time.Second,
		// Pass Accept-Encoding and bodies through as the two ends chose.
		DisableCompression: true,
	}
}

// upstreamHost is the host name the Transport sees for port in sandbox.
func upstreamHost(sandbox string, port int) string {
	return strconv.Itoa(port) + "." + sandbox + upstreamHostSuffix
}

// parseUpstream reverses upstreamHost on a "host:port" dial address.
func parseUpstream(addr string) (string, int, error) {
	host, _, err := net.SplitHostPort(addr)
	if err == nil {
		var ok bool
		if host, ok = strings.CutSuffix(host, upstreamHostSuffix); ok {
			ps, sandbox, _ := strings.Cut(host, ".")
			if port, ok := parsePort(ps); ok && sandbox != "" {
				return sandbox, port, nil
			}
		}
	}
	return "", 0, fmt.Errorf("tunnel: unexpected upstream address %q: %w", addr, errdefs.ErrInternal)
}

// dialError is a failure to connect to the port in the box.
type dialError struct {
	sandbox string
	port    int
	err     error
}

func (e *dialError) Error() string {
	return fmt.Sprintf("connect to port %d in sandbox %s: %v", e.port, e.sandbox, e.err)
}

func (e *dialError) Unwrap() error { return e.err }

// source is where a request's token came from.
type source int

const (
	fromNone source = iota
	fromBearer
	fromHeader
	fromQuery
	fromCookie
)

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := h.route(w, r)
	if !ok {
		return
	}
	id := rt.idOrName
	if h.resolve != nil {
		var err error
		if id, err = h.resolve(rt.idOrName); err != nil {
			id = ""
		}
	}
	e, found := Exposure{}, false
	if id != "" {
		e, found = h.reg.lookup(id, rt.port)
	}
	want := h.dummy
	if found {
		want = e.Token
	}
	src := authenticate(r, rt.port, want)
	if !found || src == fromNone {
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral tunnel"`)
		writeError(w, http.StatusUnauthorized, "unauthenticated", "missing or invalid tunnel token")
		return
	}
	if src == fromQuery && (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.Header.Get("Upgrade") == "" {
		h.setCookie(w, r, rt, e)
		return
	}
	h.proxy(w, r, rt, e)
}

// route parses r into a route. It answers the requests that are not tunnel
// requests itself and then returns false.
func (h *handler) route(w http.ResponseWriter, r *http.Request) (route, bool) {
	if id, port, ok := parseHost(r.Host, h.domain); ok {
		p := r.URL.EscapedPath()
		if p == "" {
			p = "/"
		}
		return route{idOrName: id, port: port, path: p, cookiePath: "/"}, true
	}
	rt, slash, ok := parsePath(r.URL.EscapedPath())
	if slash {
		loc := rt.cookiePath
		if r.URL.RawQuery != "" {
			loc += "?" + r.URL.RawQuery
		}
		w.Header().Set("Location", loc)
		w.WriteHeader(http.StatusPermanentRedirect)
		return route{}, false
	}
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "not a tunnel URL: want /t/{sandbox}/{port}/")
		return route{}, false
	}
	return rt, true
}

// authenticate returns where the first copy of want in r came from, trying
// the bearer header, the token header, the query parameter and the cookies
// in that order.
func authenticate(r *http.Request, port int, want string) source {
	eq := func(got string) bool {
		return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
	}
	if tok, ok := bearer(r.Header.Get("Authorization")); ok && eq(tok) {
		return fromBearer
	}
	for _, v := range r.Header.Values(TokenHeader) {
		if eq(strings.TrimSpace(v)) {
			return fromHeader
		}
	}
	for _, v := range paramValues(r.URL.RawQuery, TokenParam) {
		if eq(v) {
			return fromQuery
		}
	}
	name := CookiePrefix + strconv.Itoa(port)
	for _, c := range r.CookiesNamed(name) {
		if eq(c.Value) {
			return fromCookie
		}
	}
	return fromNone
}

// bearer returns the token of an "Authorization: Bearer <token>" value.
func bearer(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(tok), true
}

// setCookie answers a browser that brought the token in the query: it
// stores the token in a cookie and sends the browser to the same URL
// without it.
func (h *handler) setCookie(w http.ResponseWriter, r *http.Request, rt route, e Exposure) {
	http.SetCookie(w, &http.Cookie{
		Name:     CookiePrefix + strconv.Itoa(e.Port),
		Value:    e.Token,
		Path:     rt.cookiePath,
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteLaxMode,
	})
	loc := r.URL.EscapedPath()
	if strings.HasPrefix(loc, "//") {
		// "//host/..." would be read as another host: keep it a path.
		loc = "/." + loc
	}
	if q := withoutParam(r.URL.RawQuery, TokenParam); q != "" {
		loc += "?" + q
	}
	w.Header().Set("Location", loc)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(http.StatusSeeOther)
}

// proxy forwards r to the exposure's port.
func (h *handler) proxy(w http.ResponseWriter, r *http.Request, rt route, e Exposure) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := pr.Out.URL
			u.Scheme = "http"
			u.Host = upstreamHost(e.Sandbox, e.Port)
			u.RawPath = rt.path
			u.Path, _ = url.PathUnescape(rt.path) // rt.path is the escaped path of a parsed URL
			u.RawQuery = withoutParam(u.RawQuery, TokenParam)
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()

			hd := pr.Out.Header
			hd.Del(TokenHeader)
			if tok, ok := bearer(hd.Get("Authorization")); ok && subtle.ConstantTimeCompare([]byte(tok), []byte(e.Token)) == 1 {
				hd.Del("Authorization")
			}
			stripCookies(hd, CookiePrefix)
		},
		Transport:     h.tr,
		FlushInterval: -1,
		ErrorHandler:  portError(e.Sandbox, e.Port),
	}
	rp.ServeHTTP(w, r)
}

// portError answers a request that could not reach port in sandbox with
// a 502 that says why.
func portError(sandbox string, port int) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		if r.Context().Err() != nil {
			return // the client went away
		}
		var de *dialError
		msg := fmt.Sprintf("port %d in sandbox %s: %v", port, sandbox, err)
		switch {
		case errors.As(err, &de) && errors.Is(err, syscall.ECONNREFUSED):
			msg = fmt.Sprintf("nothing is listening on port %d in sandbox %s", port, sandbox)
		case errors.As(err, &de):
			msg = de.Error()
		}
		log.G(r.Context()).Warn("forward to sandbox port", "sandbox", sandbox, "port", port, "error", err)
		writeError(w, http.StatusBadGateway, "unavailable", msg)
	}
}

// Forwarder sends requests to ports in boxes without exposures (E2B's
// domain mode, where the caller has checked the request): it shares
// Handler's way of connecting, streaming and pooling connections per box
// and port.
type Forwarder struct {
	tr *http.Transport
}

// NewForwarder returns a Forwarder that connects with dial.
func NewForwarder(dial Dialer) *Forwarder {
	return &Forwarder{tr: newTransport(dial)}
}

// Forward sends r as it is (path, query, headers, Host unless host is
// set) to port in sandbox, with X-Forwarded-For/Proto/Host set and the
// headers named in strip removed, and streams the answer back; failing to
// reach the port is a 502 naming the sandbox and port.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, sandbox string, port int, host string, strip ...string) {
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := pr.Out.URL
			u.Scheme = "http"
			u.Host = upstreamHost(sandbox, port)
			pr.Out.Host = pr.In.Host
			if host != "" {
				pr.Out.Host = host
			}
			pr.SetXForwarded()
			for _, h := range strip {
				pr.Out.Header.Del(h)
			}
		},
		Transport:     f.tr,
		FlushInterval: -1,
		ErrorHandler:  portError(sandbox, port),
	}
	rp.ServeHTTP(w, r)
}

// ParseHost parses a Host header of the form "{port}-{id}.{domain}" (an
// optional ":port" suffix and trailing dot ignored; domain matched without
// regard to case or its own port) into the sandbox ID and port.
func ParseHost(host, domain string) (id string, port int, ok bool) {
	if h, _, err := net.SplitHostPort(domain); err == nil {
		domain = h
	}
	return parseHost(host, normDomain(domain))
}

// errorBody is the JSON body of an error answered by the tunnel itself.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorBody{Code: code, Message: msg}) // the client went away; nothing to do
}

// URL returns the URL a user is given for e. base is the tunnel listener's
// base URL (for example "http://127.0.0.1:7080"). With a domain the URL is
// "{scheme}://{port}-{id}.{domain}{:port of base}/?corral_token=...",
// otherwise base + "/t/{id}/{port}/?corral_token=...".
func URL(base, domain string, e Exposure) string {
	q := "?" + TokenParam + "=" + url.QueryEscape(e.Token)
	if domain = normDomain(domain); domain != "" {
		scheme, hostPort := "http", ""
		if u, err := url.Parse(base); err == nil {
			if u.Scheme != "" {
				scheme = u.Scheme
			}
			if p := u.Port(); p != "" {
				hostPort = ":" + p
			}
		}
		return scheme + "://" + strconv.Itoa(e.Port) + "-" + e.Sandbox + "." + domain + hostPort + "/" + q
	}
	return strings.TrimRight(base, "/") + pathPrefix + url.PathEscape(e.Sandbox) + "/" + strconv.Itoa(e.Port) + "/" + q
}
