package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/agentpool"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

type fixture struct {
	env     *sandboxtest.Env
	images  *fakeImages
	builder *fakeBuilder
	// uploads is the server's UploadDir.
	uploads string
	m       *sandbox.Manager
	api     *Server
	agents  *agentpool.Pool
	srv     *httptest.Server
	agent   *httptest.Server
	// agentReqs receives a summary of each request the fake agent gets.
	agentReqs chan string
	// release lets the fake agent's stream send its last chunk.
	release chan struct{}
	// abort lets one request to the fake agent's /abort end with its
	// connection closed and no answer, as when its sandbox goes.
	abort chan struct{}
	// stopping is how many more requests the fake agent answers as an
	// agent that exits after being idle (503, agentclient.StoppingHeader).
	stopping atomic.Int32
	// agentConns counts the connections the fake agent accepted.
	agentConns atomic.Int32
	// audit, when an option sets it, is the API's audit trail.
	audit *audit.Store
	// e2bDomain and ports, when an option sets them, serve E2B's domain
	// mode.
	e2bDomain string
	ports     *tunnel.Forwarder
	// outputLog, when an option sets it, serves the log files.
	outputLog OutputLog
}

// newFixture starts the API on a real Manager with sandboxtest's fakes;
// opts may change the Manager's config (before it is made).
func newFixture(t *testing.T, token string, opts ...func(*fixture, *sandbox.ManagerConfig)) *fixture {
	t.Helper()
	f := &fixture{
		env: sandboxtest.NewEnv(), images: newFakeImages(), builder: &fakeBuilder{}, uploads: t.TempDir(),
		agentReqs: make(chan string, 16), release: make(chan struct{}), abort: make(chan struct{}),
	}
	f.agent = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		summary := fmt.Sprintf("%s %s %s?%s auth=%q sbx=%q body=%q", r.Proto, r.Method, r.URL.Path, r.URL.RawQuery,
			r.Header.Get("Authorization"), r.Header.Get(SandboxIDHeader), body)
		for _, h := range []string{APIKeyHeader, AccessTokenHeader} {
			if v := r.Header.Get(h); v != "" {
				summary += fmt.Sprintf(" %s=%q", h, v) // a token leaked to the box
			}
		}
		f.agentReqs <- summary
		if f.stopping.Load() > 0 {
			f.stopping.Add(-1)
			w.Header().Set(agentclient.StoppingHeader, "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, "stopping")
			return
		}
		if r.Header.Get(agentclient.WarmUpHeader) != "" {
			// A Connect stream that ends at once, without an error.
			w.Header().Set("Content-Type", "application/connect+proto")
			_, _ = w.Write([]byte{2, 0, 0, 0, 2, '{', '}'})
			return
		}
		if r.URL.Path == "/abort" {
			<-f.abort
			panic(http.ErrAbortHandler)
		}
		if r.URL.Path == "/connectstream" {
			// A Connect stream whose agent dies after one message (in
			// the middle of the second with ?mid=1).
			w.Header().Set("Content-Type", "application/connect+proto")
			w.Header().Set(agentclient.OOMKillsHeader, "3")
			w.Write([]byte{0, 0, 0, 0, 2, 'h', 'i'})
			w.(http.Flusher).Flush()
			<-f.abort
			if r.URL.Query().Get("mid") != "" {
				w.Write([]byte{0, 0, 0, 0, 9, 'x'})
				w.(http.Flusher).Flush()
			}
			panic(http.ErrAbortHandler)
		}
		if r.URL.Path == "/process.Process/Start" && r.Header.Get("Content-Type") == "application/connect+proto" {
			w.Header().Set("Content-Type", "application/connect+proto")
			w.Write(fakeExecStream)
			return
		}
		if r.URL.Path == "/stream" {
			fmt.Fprintln(w, "first")
			w.(http.Flusher).Flush()
			<-f.release
			fmt.Fprintln(w, "last")
			return
		}
		fmt.Fprint(w, "agent ok")
	}))
	// Like the real agent: HTTP/1 and h2c.
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	f.agent.Config.Protocols = &protos
	f.agent.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			f.agentConns.Add(1)
		}
	}
	f.agent.Start()
	t.Cleanup(f.agent.Close)
	f.env.Runtime.Addr = func(string) string { return "tcp://" + f.agent.Listener.Addr().String() }
	cfg := f.env.Config()
	for _, o := range opts {
		o(f, &cfg)
	}
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	f.m = m
	f.agents = agentpool.New(agentpool.Config{})
	t.Cleanup(func() { f.agents.Close() })
	var al AuditLog
	if f.audit != nil {
		al = f.audit
	}
	s, err := New(Config{
		Manager: m, Images: f.images, Builder: f.builder, Version: rest.Version{Version: "test", Runtimes: m.Runtimes()},
		UploadDir: f.uploads, MaxUploadBytes: testMaxUpload, Agents: f.agents, Audit: al,
		E2BDomain: f.e2bDomain, Ports: f.ports, OutputLog: f.outputLog,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.api = s
	h := s.Handler()
	if token != "" {
		h = s.TokenHandler(token)
	}
	ctx := testutil.Context(t)
	f.srv = httptest.NewUnstartedServer(h)
	f.srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	f.srv.Config.Protocols = &protos // like the daemon: HTTP/1 and h2c
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

// do sends a request over HTTP/1.1 and returns the status and body.
func (f *fixture) do(t *testing.T, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	return f.doWith(t, f.srv.Client(), method, path, body, hdr...)
}

// h2cClient returns a client of the fixture's API over HTTP/2 without TLS.
func (f *fixture) h2cClient(t *testing.T) *http.Client {
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func (f *fixture) doWith(t *testing.T, c *http.Client, method, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func errCode(t *testing.T, body string) string {
	t.Helper()
	var e rest.Error
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q is not a rest.Error: %v", body, err)
	}
	return e.Error.Code
}

func TestControlPlane(t *testing.T) {
	f := newFixture(t, "")
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"web","env":{"SECRET":"s3cr3t"},"timeout_seconds":3600,"labels":{"a":"b"}}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/sandboxes = %d %s; want 201", code, body)
	}
	var sb rest.Sandbox
	if err := json.Unmarshal([]byte(body), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.State != "running" || sb.Name != "web" || sb.Deadline == nil || sb.AgentPath != "/v1/sandboxes/"+sb.ID+"/agent" {
		t.Errorf("created sandbox = %+v; want running, named web, with deadline and agent path", sb)
	}

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantErr                  string // rest error code, or "" for success
		wantBody                 string // substring
	}{
		{"health", "GET", "/health", "", 200, "", `"ok"`},
		{"openapi", "GET", "/openapi.yaml", "", 200, "", "openapi: 3.0"},
		{"version", "GET", "/v1/version", "", 200, "", `"version": "test"`},
		{"get by id", "GET", "/v1/sandboxes/" + sb.ID, "", 200, "", `"memory_limit_bytes": 1073741824`},
		{"get by name", "GET", "/v1/sandboxes/web", "", 200, "", sb.ID},
		{"get by ID prefix", "GET", "/v1/sandboxes/" + sb.ID[:5], "", 200, "", `"id": "` + sb.ID + `"`},
		{"list", "GET", "/v1/sandboxes", "", 200, "", sb.ID},
		{"get unknown", "GET", "/v1/sandboxes/nope", "", 404, "not_found", "nope"},
		{"bad json", "POST", "/v1/sandboxes", `{`, 400, "invalid_argument", "decode"},
		{"unknown field", "POST", "/v1/sandboxes", `{"imagee":"x"}`, 400, "invalid_argument", "imagee"},
		{"trailing data", "POST", "/v1/sandboxes", `{} {}`, 400, "invalid_argument", "after the JSON"},
		{"duplicate key", "POST", "/v1/sandboxes", `{"resources":{"memory_bytes":268435456,"memory_bytes":1}}`, 400, "invalid_argument", `duplicate key \"resources.memory_bytes\" in request body`},
		{"huge body", "POST", "/v1/sandboxes", `{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 400, "invalid_argument", "larger than"},
		{"bad memory", "POST", "/v1/sandboxes", `{"resources":{"memory_bytes":5}}`, 400, "invalid_argument", "resources.memory_bytes"},
		{"negative timeout", "POST", "/v1/sandboxes", `{"timeout_seconds":-1}`, 400, "invalid_argument", "timeout_seconds"},
		{"unknown image", "POST", "/v1/sandboxes", `{"image":"nope"}`, 404, "not_found", "known images: busybox, host"},
		{"dup name", "POST", "/v1/sandboxes", `{"name":"web"}`, 409, "already_exists", "web"},
		{"bad runtime", "POST", "/v1/sandboxes", `{"runtime":"runsc"}`, 400, "invalid_argument", "runtime"},
		{"bad force", "DELETE", "/v1/sandboxes/web?force=maybe", "", 400, "invalid_argument", "force"},
		{"images", "GET", "/v1/images", "", 200, "", `"default": true`},
		{"delete", "DELETE", "/v1/sandboxes/web", "", 204, "", ""},
		{"delete again", "DELETE", "/v1/sandboxes/web", "", 404, "not_found", "web"},
		{"wrong method", "PUT", "/v1/sandboxes", "", 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, tc.body)
			if code != tc.wantCode {
				t.Fatalf("%s %s = %d %s; want %d", tc.method, tc.path, code, body, tc.wantCode)
			}
			if tc.wantErr != "" {
				if got := errCode(t, body); got != tc.wantErr {
					t.Errorf("%s %s error code = %q; want %q", tc.method, tc.path, got, tc.wantErr)
				}
			}
			if !strings.Contains(body, tc.wantBody) {
				t.Errorf("%s %s body = %s; want it to contain %q", tc.method, tc.path, body, tc.wantBody)
			}
			if strings.Contains(body, "s3cr3t") && !strings.HasPrefix(tc.name, "get by") && tc.name != "list" {
				t.Errorf("%s %s body leaks an env value", tc.method, tc.path)
			}
		})
	}
	if left := f.env.Empty(); left != "" {
		t.Errorf("after delete, left: %s", left)
	}
}

func TestAuth(t *testing.T) {
	f := newFixture(t, "tok3n")
	tests := []struct {
		name, auth string
		want       int
	}{
		{"none", "", 401},
		{"wrong", "Bearer nope", 401},
		{"prefix", "Bearer tok3", 401},
		{"basic", "Basic dG9rM24=", 401},
		{"right", "Bearer tok3n", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "GET", "/v1/version", "", "Authorization", tc.auth)
			if code != tc.want {
				t.Fatalf("GET /v1/version with %q = %d %s; want %d", tc.auth, code, body, tc.want)
			}
			if code == 401 && errCode(t, body) != "unauthorized" {
				t.Errorf("401 body = %s; want code unauthorized", body)
			}
		})
	}
}

func TestProxy(t *testing.T) {
	f := newFixture(t, "tok3n")
	auth := []string{"Authorization", "Bearer tok3n"}
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"px"}`, auth...)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	var sb rest.Sandbox
	_ = json.Unmarshal([]byte(body), &sb)
	tests := []struct {
		name, method, path, body string
		hdr                      []string
		want                     string
	}{
		{"by path", "POST", "/v1/sandboxes/" + sb.ID + "/agent/process.Process/Start?x=1", "in", auth,
			`HTTP/1.1 POST /process.Process/Start?x=1 auth="" sbx="" body="in"`},
		{"by name", "GET", "/v1/sandboxes/px/agent/files?path=/etc/hosts", "", auth,
			`HTTP/1.1 GET /files?path=/etc/hosts auth="" sbx="" body=""`},
		{"header process", "POST", "/process.Process/List", "{}", append([]string{SandboxIDHeader, sb.ID}, auth...),
			`HTTP/1.1 POST /process.Process/List? auth="" sbx="" body="{}"`},
		{"header fs", "POST", "/filesystem.Filesystem/Stat", "{}", append([]string{SandboxIDHeader, sb.ID}, auth...),
			`HTTP/1.1 POST /filesystem.Filesystem/Stat? auth="" sbx="" body="{}"`},
		{"header files", "GET", "/files?path=a", "", append([]string{SandboxIDHeader, "px"}, auth...),
			`HTTP/1.1 GET /files?path=a auth="" sbx="" body=""`},
		{"header health", "GET", "/health", "", append([]string{SandboxIDHeader, "px"}, auth...),
			`HTTP/1.1 GET /health? auth="" sbx="" body=""`},
		{"by ID prefix", "GET", "/v1/sandboxes/" + sb.ID[:4] + "/agent/files?path=/p", "", auth,
			`HTTP/1.1 GET /files?path=/p auth="" sbx="" body=""`},
		{"header ID prefix", "POST", "/process.Process/List", "{}", append([]string{SandboxIDHeader, sb.ID[:3]}, auth...),
			`HTTP/1.1 POST /process.Process/List? auth="" sbx="" body="{}"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, tc.body, tc.hdr...)
			if code != 200 || body != "agent ok" {
				t.Fatalf("%s %s = %d %q; want 200 from the agent", tc.method, tc.path, code, body)
			}
			if got := <-f.agentReqs; got != tc.want {
				t.Errorf("agent got %s; want %s", got, tc.want)
			}
		})
	}
	// A request reaches the agent in the HTTP version it came in, except
	// StreamInput, which always takes HTTP/2.
	h2c := f.h2cClient(t)
	for _, tc := range []struct {
		name string
		c    *http.Client
		path string
		want string
	}{
		{"h2c", h2c, "/process.Process/Start", "HTTP/2.0 POST /process.Process/Start?"},
		{"h2c input", h2c, streamInputPath, "HTTP/2.0 POST " + streamInputPath + "?"},
		{"h1 input", f.srv.Client(), streamInputPath, "HTTP/2.0 POST " + streamInputPath + "?"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.doWith(t, tc.c, "POST", "/v1/sandboxes/px/agent"+tc.path, "x", auth...)
			if code != 200 || body != "agent ok" {
				t.Fatalf("POST %s = %d %q; want 200 from the agent", tc.path, code, body)
			}
			if got := <-f.agentReqs; !strings.HasPrefix(got, tc.want) {
				t.Errorf("agent got %s; want %s...", got, tc.want)
			}
		})
	}
	// Without the daemon's token, E2B's Basic user header passes through.
	f2 := newFixture(t, "")
	code, body = f2.do(t, "POST", "/v1/sandboxes", `{}`)
	_ = json.Unmarshal([]byte(body), &sb)
	if code, body := f2.do(t, "GET", "/files", "", SandboxIDHeader, sb.ID, "Authorization", "Basic dXNlcjo="); code != 200 {
		t.Fatalf("GET /files = %d %s", code, body)
	}
	if got := <-f2.agentReqs; !strings.Contains(got, `auth="Basic dXNlcjo="`) {
		t.Errorf("agent got %s; want the Basic header passed through", got)
	}

	for _, tc := range []struct {
		name, path string
		hdr        []string
		wantCode   int
		wantErr    string
	}{
		{"unknown by path", "/v1/sandboxes/nope/agent/files", auth, 404, "not_found"},
		{"unknown by header", "/files", append([]string{SandboxIDHeader, "nope"}, auth...), 404, "not_found"},
		{"no header", "/files", auth, 400, "invalid_argument"},
		{"no token", "/v1/sandboxes/px/agent/files", nil, 401, "unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "GET", tc.path, "", tc.hdr...)
			if code != tc.wantCode || errCode(t, body) != tc.wantErr {
				t.Errorf("GET %s = %d %s; want %d %s", tc.path, code, body, tc.wantCode, tc.wantErr)
			}
		})
	}
}

// TestProxyRetriesStoppingAgent checks that a request that reached an
// agent exiting after being idle is sent again, body and all, and that a
// client stream or an agent that never stops stopping gets the 503.
func TestProxyRetriesStoppingAgent(t *testing.T) {
	f := newFixture(t, "")
	if code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"idle"}`); code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	drain := func() []string {
		var got []string
		for {
			select {
			case r := <-f.agentReqs:
				got = append(got, r)
			default:
				return got
			}
		}
	}
	want := `HTTP/1.1 POST /process.Process/Start? auth="" sbx="" body="{\"cmd\":\"true\"}"`

	f.stopping.Store(2)
	code, body := f.do(t, "POST", "/v1/sandboxes/idle/agent/process.Process/Start", `{"cmd":"true"}`)
	if code != 200 || body != "agent ok" {
		t.Errorf("Start through two stopping agents = %d %q; want 200 from the third", code, body)
	}
	if got := drain(); len(got) != 3 || got[0] != want || got[2] != want {
		t.Errorf("agent requests = %q; want the same request 3 times", got)
	}

	// A client stream cannot be sent again.
	f.stopping.Store(1)
	code, _ = f.do(t, "POST", "/v1/sandboxes/idle/agent"+streamInputPath, "chunk")
	if got := drain(); code != 503 || len(got) != 1 {
		t.Errorf("StreamInput to a stopping agent = %d after %d requests; want 503 after 1", code, len(got))
	}

	// Retries are bounded.
	f.stopping.Store(100)
	code, _ = f.do(t, "GET", "/v1/sandboxes/idle/agent/health", "")
	if got := drain(); code != 503 || len(got) != agentpool.StoppingRetries+1 {
		t.Errorf("GET to an agent that keeps stopping = %d after %d requests; want 503 after %d", code, len(got), agentpool.StoppingRetries+1)
	}
	f.stopping.Store(0)
}

// TestProxyAgentConnection: requests to a sandbox share one connection to
// its agent (the proxy keeps it open for as long as the agent does, see
// newAgentProxy).
func TestProxyAgentConnection(t *testing.T) {
	f := newFixture(t, "")
	if code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"conn"}`); code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	for range 3 {
		if code, body := f.do(t, "GET", "/v1/sandboxes/conn/agent/health", ""); code != 200 || body != "agent ok" {
			t.Fatalf("GET /health = %d %q; want 200 from the agent", code, body)
		}
		<-f.agentReqs
	}
	if n := f.agentConns.Load(); n != 1 {
		t.Errorf("3 requests opened %d connections to the agent; want 1", n)
	}
}

// TestWarmAgent: a warm pool's warm-up (the agent pool's Warm, which the
// Manager calls) leaves the connection that the first HTTP/1.1 request
// proxied to the box (the SDK's and the CLI's) then takes.
func TestWarmAgent(t *testing.T) {
	f := newFixture(t, "")
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"warm"}`)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	var sb rest.Sandbox
	_ = json.Unmarshal([]byte(body), &sb)
	if err := f.agents.Warm(testutil.Context(t), "tcp://"+f.agent.Listener.Addr().String()); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if got := <-f.agentReqs; !strings.HasPrefix(got, "HTTP/1.1 POST /process.Process/Start?") {
		t.Errorf("warm-up reached the agent as %s; want an HTTP/1.1 Start", got)
	}
	if code, body := f.do(t, "POST", "/v1/sandboxes/warm/agent/process.Process/Start", `{}`); code != 200 || body != "agent ok" {
		t.Fatalf("Start = %d %q; want 200 from the agent", code, body)
	}
	<-f.agentReqs
	if n := f.agentConns.Load(); n != 1 {
		t.Errorf("warm-up and the first request opened %d connections to the agent; want 1", n)
	}
}

func TestProxyAgentDown(t *testing.T) {
	f := newFixture(t, "")
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"down"}`)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	f.agent.Close()
	code, body = f.do(t, "GET", "/v1/sandboxes/down/agent/health", "")
	if code != 503 || errCode(t, body) != "unavailable" {
		t.Errorf("GET to a dead agent = %d %s; want 503 unavailable", code, body)
	}
}

// TestProxyAgentGoneWithSandbox: a request whose agent connection breaks
// is "unavailable" while its sandbox runs, but "not found", saying why,
// when the sandbox was removed meanwhile (a retry cannot succeed).
func TestProxyAgentGoneWithSandbox(t *testing.T) {
	f := newFixture(t, "")
	for _, name := range []string{"stays", "goes"} {
		if code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"`+name+`"}`); code != 201 {
			t.Fatalf("create %s = %d %s", name, code, body)
		}
	}
	type answer struct {
		code int
		body string
	}
	call := func(name string, meanwhile func()) answer {
		got := make(chan answer, 1)
		go func() {
			code, body := f.do(t, "POST", "/v1/sandboxes/"+name+"/agent/abort", "x")
			got <- answer{code, body}
		}()
		if req := <-f.agentReqs; !strings.Contains(req, "/abort") {
			t.Fatalf("agent got %s; want the /abort request", req)
		}
		meanwhile()
		f.abort <- struct{}{}
		return <-got
	}
	a := call("stays", func() {})
	if a.code != 503 || errCode(t, a.body) != "unavailable" || !strings.Contains(a.body, "its agent went away while the request ran") {
		t.Errorf("broken agent connection of a running sandbox = %d %s; want 503 unavailable saying the agent went away", a.code, a.body)
	}
	a = call("goes", func() {
		if code, body := f.do(t, "DELETE", "/v1/sandboxes/goes?force=true", ""); code != 204 {
			t.Fatalf("delete = %d %s", code, body)
		}
	})
	if a.code != 404 || errCode(t, a.body) != "not_found" || !strings.Contains(a.body, "was removed while the request ran") {
		t.Errorf("request to a sandbox removed meanwhile = %d %s; want 404 not_found saying it was removed", a.code, a.body)
	}
}

func TestProxyStreams(t *testing.T) {
	f := newFixture(t, "")
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"st"}`)
	if code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	resp, err := f.srv.Client().Get(f.srv.URL + "/v1/sandboxes/st/agent/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-f.agentReqs
	r := bufio.NewReader(resp.Body)
	// The agent holds its last chunk until we have read the first one: this
	// deadlocks (and the test times out) if the proxy buffers.
	line, err := r.ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first chunk = %q, %v; want first", line, err)
	}
	close(f.release)
	line, err = r.ReadString('\n')
	if err != nil || line != "last\n" {
		t.Fatalf("last chunk = %q, %v; want last", line, err)
	}
}

type fakeSystem struct{}

func (fakeSystem) Info(context.Context) (rest.Info, error) {
	return rest.Info{Version: "v9", Runtimes: []rest.RuntimeInfo{{Name: "crun", Available: true}}}, nil
}

func (fakeSystem) DiskUsage(context.Context) (rest.DiskUsage, error) {
	return rest.DiskUsage{Summary: []rest.DiskUsageRow{{Type: "images", Total: 2}}}, nil
}

func TestSystemRoutes(t *testing.T) {
	f := newFixture(t, "")
	for _, path := range []string{"/v1/info", "/v1/system/df"} {
		if code, body := f.do(t, "GET", path, ""); code != http.StatusNotImplemented || errCode(t, body) != "not_implemented" {
			t.Errorf("GET %s without System = %d %s; want 501", path, code, body)
		}
	}
	f.api.cfg.System = fakeSystem{}
	if code, body := f.do(t, "GET", "/v1/info", ""); code != 200 || !strings.Contains(body, `"version": "v9"`) || !strings.Contains(body, `"available": true`) {
		t.Errorf("GET /v1/info = %d %s; want the System's info", code, body)
	}
	if code, body := f.do(t, "GET", "/v1/system/df", ""); code != 200 || !strings.Contains(body, `"type": "images"`) {
		t.Errorf("GET /v1/system/df = %d %s; want the System's disk use", code, body)
	}
}

// The dashboard's files need no token on TCP (a browser cannot send one
// on navigation, and they hold no data); the API calls it makes do.
func TestDashboardBehindToken(t *testing.T) {
	f := newFixture(t, "s3cret")
	for _, path := range []string{"/ui", "/ui/", "/ui/app.js"} { // /ui: redirected to /ui/
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
		res, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s without a token = %d, CSP %q; want 200 with the CSP", path, res.StatusCode, res.Header.Get("Content-Security-Policy"))
		}
	}
	for _, path := range []string{"/v1/sandboxes", "/v1/stats", "/ui/../v1/sandboxes"} {
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
		req.URL.Opaque = path // as sent, not cleaned by the client
		res, err := f.srv.Client().Transport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized && res.StatusCode != http.StatusMovedPermanently || strings.Contains(string(b), "sandboxes\"") {
			t.Errorf("GET %s without a token = %d %s; want 401 (or a redirect to the clean path) and no data", path, res.StatusCode, b)
		}
	}
	if code, body := f.do(t, http.MethodGet, "/v1/sandboxes", "", "Authorization", "Bearer s3cret"); code != http.StatusOK {
		t.Errorf("GET /v1/sandboxes with the token = %d %s", code, body)
	}
	if code, _ := f.do(t, http.MethodPost, "/ui/", ""); code != http.StatusUnauthorized {
		t.Errorf("POST /ui/ without a token = %d; want 401", code)
	}
}
