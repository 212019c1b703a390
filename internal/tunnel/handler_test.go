package tunnel

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// seen is what the upstream received.
type seen struct {
	Host, Path, RawQuery string
	Header               http.Header
}

// upstream is a server standing in for a process in the box. It records
// every request and answers "ok <path>"; at /ws it switches protocols and
// echoes raw bytes.
type upstream struct {
	srv *httptest.Server

	mu sync.Mutex
	// reqs holds the requests received; guarded by mu.
	reqs []seen
}

func newUpstream(t *testing.T) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.reqs = append(u.reqs, seen{Host: r.Host, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone()})
		u.mu.Unlock()
		if r.URL.Path == "/ws" {
			if !strings.EqualFold(r.Header.Get("Upgrade"), "echo") {
				http.Error(w, "want Upgrade: echo", http.StatusBadRequest)
				return
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer c.Close()
			_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
			_ = brw.Flush()
			buf := make([]byte, 512)
			for {
				n, err := brw.Read(buf)
				if n > 0 {
					if _, werr := c.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}
		_, _ = fmt.Fprintf(w, "ok %s", r.URL.EscapedPath())
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) last(t *testing.T) seen {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("upstream received no request")
	}
	return u.reqs[len(u.reqs)-1]
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

type target struct {
	sandbox string
	port    int
}

// fixture is a tunnel handler in front of an upstream. Port 8000 of sandboxes
// sb1 and sb2 reach the upstream; port 8001 of sb1 is exposed but nothing
// listens there.
type fixture struct {
	reg    *Registry
	up     *upstream
	srv    *httptest.Server
	e      Exposure // sb1:8000
	closed Exposure // sb1:8001

	mu sync.Mutex
	// dials lists the Dialer's calls; guarded by mu.
	dials []target
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	reg, err := Open(filepath.Join(t.TempDir(), "tunnels.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{reg: reg, up: newUpstream(t)}
	f.e = mustExpose(t, reg, "sb1", 8000)
	f.closed = mustExpose(t, reg, "sb1", 8001)
	mustExpose(t, reg, "sb2", 8000)

	// A loopback port with no listener: connecting to it is refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := l.Addr().String()
	_ = l.Close()

	cfg.Registry = reg
	cfg.Dial = func(ctx context.Context, sandbox string, port int) (net.Conn, error) {
		f.mu.Lock()
		f.dials = append(f.dials, target{sandbox, port})
		f.mu.Unlock()
		var d net.Dialer
		switch {
		case port == 8000:
			return d.DialContext(ctx, "tcp", f.up.srv.Listener.Addr().String())
		case port == 8001:
			return d.DialContext(ctx, "tcp", refused)
		}
		return nil, fmt.Errorf("no route to the box: %w", errdefs.ErrUnavailable)
	}
	f.srv = httptest.NewUnstartedServer(Handler(cfg))
	f.srv.Config.BaseContext = func(net.Listener) context.Context { return testutil.Context(t) }
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) dialed() []target {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]target(nil), f.dials...)
}

// do sends a request to the handler without following redirects.
func (f *fixture) do(t *testing.T, method, path string, hdr http.Header, host string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	if host != "" {
		req.Host = host
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

func tokenHeader(tok string) http.Header { return http.Header{TokenHeader: {tok}} }

func TestPathForm(t *testing.T) {
	f := newFixture(t, Config{})
	for _, tc := range []struct {
		path, wantPath, wantQuery string
	}{
		{"/t/sb1/8000/a/b?x=1", "/a/b", "x=1"},
		{"/t/sb1/8000/", "/", ""},
		{"/t/sb1/8000/a%2Fb/c?q=a%20b&q=2", "/a%2Fb/c", "q=a%20b&q=2"},
	} {
		res, body := f.do(t, "GET", tc.path, tokenHeader(f.e.Token), "")
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s = %d %s; want 200", tc.path, res.StatusCode, body)
		}
		got := f.up.last(t)
		if got.Path != tc.wantPath || got.RawQuery != tc.wantQuery {
			t.Errorf("GET %s reached upstream as %s?%s; want %s?%s", tc.path, got.Path, got.RawQuery, tc.wantPath, tc.wantQuery)
		}
	}
	if d := f.dialed(); len(d) == 0 || d[0] != (target{"sb1", 8000}) {
		t.Errorf("dials = %v; want sb1:8000", d)
	}
}

func TestMissingSlashRedirects(t *testing.T) {
	f := newFixture(t, Config{})
	res, _ := f.do(t, "GET", "/t/sb1/8000?x=1", nil, "")
	if res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != "/t/sb1/8000/?x=1" {
		t.Errorf("GET /t/sb1/8000?x=1 = %d Location %q; want 308 to /t/sb1/8000/?x=1", res.StatusCode, res.Header.Get("Location"))
	}
}

func TestNotATunnel(t *testing.T) {
	f := newFixture(t, Config{})
	for _, p := range []string{"/", "/t/", "/t/sb1/", "/t/sb1/http/", "/t/sb1/08000/", "/t/sb1/70000/", "/x/sb1/8000/"} {
		res, body := f.do(t, "GET", p, tokenHeader(f.e.Token), "")
		if res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s = %d %s; want 404", p, res.StatusCode, body)
		}
	}
	if n := f.up.count(); n != 0 {
		t.Errorf("upstream received %d requests; want 0", n)
	}
}

func TestAuthMethods(t *testing.T) {
	f := newFixture(t, Config{})
	for _, tc := range []struct {
		name string
		hdr  http.Header
	}{
		{"bearer", http.Header{"Authorization": {"Bearer " + f.e.Token}}},
		{"bearer lowercase", http.Header{"Authorization": {"bearer " + f.e.Token}}},
		{"header", tokenHeader(f.e.Token)},
		{"cookie", http.Header{"Cookie": {"other=1; corral_tunnel_8000=" + f.e.Token}}},
		{"wrong bearer, right header", http.Header{"Authorization": {"Bearer app-secret"}, TokenHeader: {f.e.Token}}},
		{"wrong header, right cookie", http.Header{TokenHeader: {"nope"}, "Cookie": {"corral_tunnel_8000=" + f.e.Token}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := f.do(t, "GET", "/t/sb1/8000/x", tc.hdr, "")
			if res.StatusCode != http.StatusOK || body != "ok /x" {
				t.Errorf("GET = %d %q; want 200 \"ok /x\"", res.StatusCode, body)
			}
		})
	}
}

func TestQueryTokenSetsCookie(t *testing.T) {
	f := newFixture(t, Config{})
	res, _ := f.do(t, "GET", "/t/sb1/8000/p?x=1&corral_token="+f.e.Token+"&y=2", nil, "")
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("GET with corral_token = %d; want 303", res.StatusCode)
	}
	if loc := res.Header.Get("Location"); loc != "/t/sb1/8000/p?x=1&y=2" {
		t.Errorf("Location = %q; want /t/sb1/8000/p?x=1&y=2", loc)
	}
	cs := res.Cookies()
	if len(cs) != 1 {
		t.Fatalf("Set-Cookie gave %d cookies; want 1", len(cs))
	}
	c := cs[0]
	if c.Name != "corral_tunnel_8000" || c.Value != f.e.Token || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/t/sb1/8000/" || c.Domain != "" {
		t.Errorf("cookie = %+v; want corral_tunnel_8000=<token>, HttpOnly, SameSite=Lax, Path=/t/sb1/8000/, no Domain", c)
	}
	if n := f.up.count(); n != 0 {
		t.Errorf("upstream received %d requests before the redirect; want 0", n)
	}

	// A browser follows the redirect with the cookie and reaches the box.
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c2 := &http.Client{Jar: jar}
	resp, err := c2.Get(f.srv.URL + "/t/sb1/8000/p?x=1&corral_token=" + f.e.Token + "&y=2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "ok /p" {
		t.Fatalf("browser-style GET = %d %q; want 200 \"ok /p\"", resp.StatusCode, b)
	}
	got := f.up.last(t)
	if got.RawQuery != "x=1&y=2" || got.Header.Get("Cookie") != "" {
		t.Errorf("upstream saw query %q cookie %q; want x=1&y=2 and no cookie", got.RawQuery, got.Header.Get("Cookie"))
	}
	// The cookie does not open another sandbox's tunnel: its path differs.
	u, _ := url.Parse(f.srv.URL + "/t/sb2/8000/")
	if cs := jar.Cookies(u); len(cs) != 0 {
		t.Errorf("jar sends %v to sb2; want no cookie", cs)
	}
}

func TestQueryTokenNotRedirected(t *testing.T) {
	f := newFixture(t, Config{})
	// Other methods and Upgrade requests cannot follow a 303: they are
	// forwarded with the parameter removed.
	res, body := f.do(t, "POST", "/t/sb1/8000/p?corral_token="+f.e.Token+"&a=b", nil, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST with corral_token = %d %s; want 200", res.StatusCode, body)
	}
	if got := f.up.last(t); got.RawQuery != "a=b" {
		t.Errorf("upstream saw query %q; want a=b", got.RawQuery)
	}
}

func TestUnauthenticated(t *testing.T) {
	resolve := func(s string) (string, error) {
		if s == "ghost" {
			return "", fmt.Errorf("sandbox %s: %w", s, errdefs.ErrNotFound)
		}
		return s, nil
	}
	f := newFixture(t, Config{Resolve: resolve})
	other := f.reg.List("sb2")[0]
	var firstBody string
	for _, tc := range []struct {
		name, path string
		hdr        http.Header
	}{
		{"no token", "/t/sb1/8000/", nil},
		{"wrong token", "/t/sb1/8000/", tokenHeader("wrong")},
		{"wrong bearer", "/t/sb1/8000/", http.Header{"Authorization": {"Bearer wrong"}}},
		{"wrong query", "/t/sb1/8000/?corral_token=wrong", nil},
		{"wrong cookie", "/t/sb1/8000/", http.Header{"Cookie": {"corral_tunnel_8000=wrong"}}},
		{"cookie of another port", "/t/sb1/8000/", http.Header{"Cookie": {"corral_tunnel_8001=" + f.e.Token}}},
		{"token of another sandbox", "/t/sb1/8000/", tokenHeader(other.Token)},
		{"unknown sandbox", "/t/nobox/8000/", tokenHeader(f.e.Token)},
		{"unresolvable name", "/t/ghost/8000/", tokenHeader(f.e.Token)},
		{"unexposed port", "/t/sb1/9999/", tokenHeader(f.e.Token)},
		{"empty token", "/t/sb1/8000/", tokenHeader("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := f.do(t, "GET", tc.path, tc.hdr, "")
			if res.StatusCode != http.StatusUnauthorized {
				t.Fatalf("GET %s = %d %s; want 401", tc.path, res.StatusCode, body)
			}
			var eb errorBody
			if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Code != "unauthenticated" || eb.Message == "" {
				t.Errorf("body = %q (%v); want JSON with code unauthenticated and a message", body, err)
			}
			if firstBody == "" {
				firstBody = body
			} else if body != firstBody {
				t.Errorf("body = %q; want the same body as every other 401, %q", body, firstBody)
			}
			if len(res.Cookies()) != 0 {
				t.Errorf("401 set cookies %v", res.Cookies())
			}
		})
	}
	if n := f.up.count(); n != 0 {
		t.Errorf("upstream received %d requests; want 0", n)
	}
	if d := f.dialed(); len(d) != 0 {
		t.Errorf("Dialer called %v; want no call", d)
	}
}

func TestResolve(t *testing.T) {
	f := newFixture(t, Config{Resolve: func(s string) (string, error) {
		if s == "web" {
			return "sb1", nil
		}
		return "", errdefs.ErrNotFound
	}})
	res, body := f.do(t, "GET", "/t/web/8000/x", tokenHeader(f.e.Token), "")
	if res.StatusCode != http.StatusOK || body != "ok /x" {
		t.Errorf("GET /t/web/8000/x = %d %q; want 200 \"ok /x\"", res.StatusCode, body)
	}
	if d := f.dialed(); len(d) != 1 || d[0] != (target{"sb1", 8000}) {
		t.Errorf("dials = %v; want [sb1:8000]", d)
	}
}

func TestTokenNotForwarded(t *testing.T) {
	f := newFixture(t, Config{})
	tok := f.e.Token
	res, body := f.do(t, "POST", "/t/sb1/8000/x?a=1&corral_token="+tok+"&b=2", http.Header{
		"Authorization":   {"Bearer " + tok},
		TokenHeader:       {tok},
		"Cookie":          {"app=1; corral_tunnel_8000=" + tok + "; corral_tunnel_9000=x; z=2"},
		"X-Forwarded-For": {"6.6.6.6"},
	}, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("POST = %d %s; want 200", res.StatusCode, body)
	}
	got := f.up.last(t)
	if got.RawQuery != "a=1&b=2" {
		t.Errorf("upstream query = %q; want a=1&b=2", got.RawQuery)
	}
	if v := got.Header.Get("Authorization"); v != "" {
		t.Errorf("upstream Authorization = %q; want none", v)
	}
	if v := got.Header.Get(TokenHeader); v != "" {
		t.Errorf("upstream %s = %q; want none", TokenHeader, v)
	}
	if v := got.Header.Values("Cookie"); len(v) != 1 || v[0] != "app=1; z=2" {
		t.Errorf("upstream Cookie = %q; want [\"app=1; z=2\"]", v)
	}
	for _, v := range got.Header {
		for _, s := range v {
			if strings.Contains(s, tok) {
				t.Errorf("upstream header value %q carries the token", s)
			}
		}
	}
	srvHost := strings.TrimPrefix(f.srv.URL, "http://")
	if got.Host != srvHost {
		t.Errorf("upstream Host = %q; want the tunnel's %q", got.Host, srvHost)
	}
	if v := got.Header.Get("X-Forwarded-For"); v != "127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For = %q; want 127.0.0.1 (the client's value dropped)", v)
	}
	if v := got.Header.Get("X-Forwarded-Host"); v != srvHost {
		t.Errorf("upstream X-Forwarded-Host = %q; want %q", v, srvHost)
	}
	if v := got.Header.Get("X-Forwarded-Proto"); v != "http" {
		t.Errorf("upstream X-Forwarded-Proto = %q; want http", v)
	}
}

func TestAppAuthorizationKept(t *testing.T) {
	f := newFixture(t, Config{})
	res, _ := f.do(t, "GET", "/t/sb1/8000/", http.Header{"Authorization": {"Bearer app-secret"}, TokenHeader: {f.e.Token}}, "")
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET = %d; want 200", res.StatusCode)
	}
	if v := f.up.last(t).Header.Get("Authorization"); v != "Bearer app-secret" {
		t.Errorf("upstream Authorization = %q; want the app's own \"Bearer app-secret\"", v)
	}
}

func TestHostForm(t *testing.T) {
	f := newFixture(t, Config{Domain: "Tunnel.Test."})
	host := "8000-sb1.tunnel.test:7080"
	res, body := f.do(t, "GET", "/any/path?y=1", tokenHeader(f.e.Token), host)
	if res.StatusCode != http.StatusOK || body != "ok /any/path" {
		t.Fatalf("GET host form = %d %q; want 200 \"ok /any/path\"", res.StatusCode, body)
	}
	if got := f.up.last(t); got.RawQuery != "y=1" || got.Host != host {
		t.Errorf("upstream saw query %q host %q; want y=1 and %q", got.RawQuery, got.Host, host)
	}
	// Under the domain, /t/... is an ordinary path of the box.
	res, body = f.do(t, "GET", "/t/sb2/8000/", tokenHeader(f.e.Token), "8000-sb1.tunnel.test")
	if res.StatusCode != http.StatusOK || body != "ok /t/sb2/8000/" {
		t.Errorf("GET /t/sb2/8000/ on sb1's host = %d %q; want it forwarded to sb1", res.StatusCode, body)
	}

	// The query token sets a host-only cookie for "/".
	res, _ = f.do(t, "GET", "/p?corral_token="+f.e.Token, nil, host)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/p" {
		t.Fatalf("GET ?corral_token = %d Location %q; want 303 to /p", res.StatusCode, res.Header.Get("Location"))
	}
	cs := res.Cookies()
	if len(cs) != 1 || cs[0].Path != "/" || cs[0].Domain != "" || cs[0].Name != "corral_tunnel_8000" {
		t.Fatalf("cookies = %+v; want one corral_tunnel_8000 for path / and no Domain", cs)
	}
	res, body = f.do(t, "GET", "/p", http.Header{"Cookie": {cs[0].Name + "=" + cs[0].Value}}, host)
	if res.StatusCode != http.StatusOK || body != "ok /p" {
		t.Errorf("GET with cookie = %d %q; want 200", res.StatusCode, body)
	}

	// "//evil.example/" must stay a path in the redirect.
	res, _ = f.do(t, "GET", "//evil.example/?corral_token="+f.e.Token, nil, host)
	if loc := res.Header.Get("Location"); strings.HasPrefix(loc, "//") {
		t.Errorf("Location = %q; want a path, not another host", loc)
	}

	// The wrong token and an unknown host-form sandbox get the same 401.
	for _, h := range []string{"8000-sb1.tunnel.test", "8000-nobox.tunnel.test"} {
		hdr := tokenHeader("wrong")
		if h != "8000-sb1.tunnel.test" {
			hdr = tokenHeader(f.e.Token)
		}
		if res, body := f.do(t, "GET", "/", hdr, h); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET on %s = %d %s; want 401", h, res.StatusCode, body)
		}
	}
	// Hosts that are not tunnel hosts fall back to the path form.
	for _, h := range []string{"tunnel.test", "x-sb1.tunnel.test", "8000-sb1.other.test", "8000-sb1.x.tunnel.test"} {
		if res, body := f.do(t, "GET", "/", tokenHeader(f.e.Token), h); res.StatusCode != http.StatusNotFound {
			t.Errorf("GET / on %s = %d %s; want 404", h, res.StatusCode, body)
		}
	}
}

func TestDialFailure(t *testing.T) {
	f := newFixture(t, Config{})
	for _, tc := range []struct {
		name, path, tok, want string
	}{
		{"refused", "/t/sb1/8001/", f.closed.Token, "nothing is listening on port 8001 in sandbox sb1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := f.do(t, "GET", tc.path, tokenHeader(tc.tok), "")
			if res.StatusCode != http.StatusBadGateway {
				t.Fatalf("GET %s = %d %s; want 502", tc.path, res.StatusCode, body)
			}
			var eb errorBody
			if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Message != tc.want {
				t.Errorf("body = %q (%v); want message %q", body, err, tc.want)
			}
		})
	}

	// Any other dial error names the sandbox and port too.
	e := mustExpose(t, f.reg, "sb3", 5000)
	res, body := f.do(t, "GET", "/t/sb3/5000/", tokenHeader(e.Token), "")
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(body, "port 5000 in sandbox sb3") || !strings.Contains(body, "no route to the box") {
		t.Errorf("GET /t/sb3/5000/ = %d %s; want 502 naming port 5000 and sandbox sb3 and the cause", res.StatusCode, body)
	}
}

func TestConnectionsNotSharedAcrossSandboxes(t *testing.T) {
	f := newFixture(t, Config{})
	tok2 := f.reg.List("sb2")[0].Token
	for i := range 3 {
		for _, tc := range []struct{ path, tok string }{{"/t/sb1/8000/", f.e.Token}, {"/t/sb2/8000/", tok2}} {
			if res, body := f.do(t, "GET", tc.path, tokenHeader(tc.tok), ""); res.StatusCode != http.StatusOK {
				t.Fatalf("round %d: GET %s = %d %s", i, tc.path, res.StatusCode, body)
			}
		}
	}
	n := map[target]int{}
	for _, d := range f.dialed() {
		n[d]++
	}
	if n[target{"sb1", 8000}] == 0 || n[target{"sb2", 8000}] == 0 {
		t.Errorf("dials = %v; want each sandbox dialed on its own (no connection reused across sandboxes)", n)
	}
}

func TestUpgrade(t *testing.T) {
	f := newFixture(t, Config{})
	c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "GET /t/sb1/8000/ws?corral_token=" + f.e.Token + " HTTP/1.1\r\n" +
		"Host: " + f.srv.Listener.Addr().String() + "\r\n" +
		"Connection: Upgrade\r\n" +
		"Upgrade: echo\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read upgrade response: %v", err)
	}
	if res.StatusCode != http.StatusSwitchingProtocols || !strings.EqualFold(res.Header.Get("Upgrade"), "echo") {
		t.Fatalf("upgrade response = %s, Upgrade %q; want 101 echo", res.Status, res.Header.Get("Upgrade"))
	}
	for _, msg := range []string{"hello", "again, longer"} {
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatalf("read echo: %v", err)
		}
		if string(buf) != msg {
			t.Errorf("echo = %q; want %q", buf, msg)
		}
	}
	if got := f.up.last(t); got.RawQuery != "" || got.Path != "/ws" {
		t.Errorf("upstream saw %s?%s; want /ws without the token", got.Path, got.RawQuery)
	}
}

func TestURL(t *testing.T) {
	e := Exposure{Sandbox: "sb1", Port: 8000, Token: "tok-_en"}
	for _, tc := range []struct {
		base, domain, want string
	}{
		{"http://127.0.0.1:7080", "", "http://127.0.0.1:7080/t/sb1/8000/?corral_token=tok-_en"},
		{"http://127.0.0.1:7080/", "", "http://127.0.0.1:7080/t/sb1/8000/?corral_token=tok-_en"},
		{"http://127.0.0.1:7080", "corral.example", "http://8000-sb1.corral.example:7080/?corral_token=tok-_en"},
		{"https://tunnel.example", "Corral.Example.", "https://8000-sb1.corral.example/?corral_token=tok-_en"},
	} {
		if got := URL(tc.base, tc.domain, e); got != tc.want {
			t.Errorf("URL(%q, %q) = %q; want %q", tc.base, tc.domain, got, tc.want)
		}
	}
}

func TestURLRoundTrip(t *testing.T) {
	// The URL a user is given works as is.
	f := newFixture(t, Config{})
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := (&http.Client{Jar: jar}).Get(URL(f.srv.URL, "", f.e))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "ok /" {
		t.Errorf("GET URL() = %d %q; want 200 \"ok /\"", res.StatusCode, b)
	}
}

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		sandbox string
		port    int
	}{{"sb1", 8000}, {"a.b_c-d", 1}, {"X", 65535}} {
		s, p, err := parseUpstream(upstreamHost(tc.sandbox, tc.port) + ":80")
		if err != nil || s != tc.sandbox || p != tc.port {
			t.Errorf("parseUpstream(upstreamHost(%q, %d)) = %q, %d, %v", tc.sandbox, tc.port, s, p, err)
		}
	}
	for _, addr := range []string{"example.com:80", "sb1:80", "x.sb1.invalid:80", ".invalid:80", "8000..invalid:80", "8000.sb1.invalid"} {
		if _, _, err := parseUpstream(addr); !errors.Is(err, errdefs.ErrInternal) {
			t.Errorf("parseUpstream(%q) = %v; want ErrInternal", addr, err)
		}
	}
}
