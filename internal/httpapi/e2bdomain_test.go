package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// domainFixture is a fixture serving E2B's domain mode for e2b.test:8443,
// whose ports in boxes are one fake app (every dial reaches it); portReqs
// receives a summary of each request the app gets.
type domainFixture struct {
	*fixture
	portReqs chan string
}

func newDomainFixture(t *testing.T) *domainFixture {
	t.Helper()
	df := &domainFixture{portReqs: make(chan string, 16)}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var leaked []string
		for _, h := range []string{APIKeyHeader, AccessTokenHeader, TrafficTokenHeader} {
			if v := r.Header.Get(h); v != "" {
				leaked = append(leaked, h+"="+v)
			}
		}
		df.portReqs <- fmt.Sprintf("%s %s host=%s auth=%q leaked=%q", r.Method, r.URL.RequestURI(), r.Host, r.Header.Get("Authorization"), leaked)
		fmt.Fprint(w, "app ok")
	}))
	t.Cleanup(app.Close)
	df.fixture = newFixture(t, "tok3n", func(f *fixture, _ *sandbox.ManagerConfig) {
		f.e2bDomain = "e2b.test:8443"
		f.ports = tunnel.NewForwarder(func(ctx context.Context, id string, port int) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", app.Listener.Addr().String())
		})
	})
	return df
}

// at sends a request for host and returns the status and body.
func (df *domainFixture) at(t *testing.T, method, host, path string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, df.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := df.srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s%s: %v", method, host, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (df *domainFixture) create(t *testing.T, name string, e *sandbox.E2BSettings) sandbox.Record {
	t.Helper()
	rec, err := df.m.Create(t.Context(), sandbox.CreateRequest{Name: name, E2B: e})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func wantE2BError(t *testing.T, what string, code int, body string, want int) {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != want || e.Code != want || e.Message == "" {
		t.Errorf("%s = %d %s; want %d with E2B's error body", what, code, body, want)
	}
}

// TestE2BDomainEnvd checks requests for 49983-{id}.{domain}: any path goes
// to the box's agent, authenticated as E2B's data plane.
func TestE2BDomainEnvd(t *testing.T) {
	df := newDomainFixture(t)
	rec := df.create(t, "envd", &sandbox.E2BSettings{})
	host := "49983-" + rec.ID + ".E2B.test:8443"
	code, body := df.at(t, "GET", host, "/envs?x=1", AccessTokenHeader, rec.AccessToken, "Authorization", "Basic dXNlcjo=")
	if code != http.StatusOK || body != "agent ok" {
		t.Fatalf("GET /envs at %s with the access token = %d %q; want the agent's answer", host, code, body)
	}
	if got, want := <-df.agentReqs, `HTTP/1.1 GET /envs?x=1 auth="Basic dXNlcjo=" sbx="" body=""`; got != want {
		t.Errorf("agent got %s; want %s", got, want)
	}
	if code, body := df.at(t, "GET", host, "/health", APIKeyHeader, "tok3n"); code != http.StatusOK {
		t.Errorf("GET /health at %s with the daemon's token = %d %s; want 200", host, code, body)
	} else {
		<-df.agentReqs
	}
	code, body = df.at(t, "GET", host, "/health")
	wantE2BError(t, "GET /health at "+host+" without a token", code, body, http.StatusUnauthorized)
	code, body = df.at(t, "GET", host, "/health", AccessTokenHeader, rec.AccessToken+"x")
	wantE2BError(t, "GET /health at "+host+" with a wrong token", code, body, http.StatusUnauthorized)
	code, body = df.at(t, "GET", "49983-0123456789ab.e2b.test", "/health", AccessTokenHeader, rec.AccessToken)
	wantE2BError(t, "GET /health of an unknown sandbox", code, body, http.StatusBadGateway)
	// The control plane on the same listener, by another name.
	if code, body := df.at(t, "GET", "api.e2b.test:8443", "/v1/sandboxes", APIKeyHeader, "tok3n"); code != http.StatusOK {
		t.Errorf("GET /v1/sandboxes at api.e2b.test = %d %s; want 200", code, body)
	}
	if code, _ := df.at(t, "GET", "49983-"+rec.ID+".other.test", "/health", AccessTokenHeader, rec.AccessToken); code != http.StatusUnauthorized {
		t.Errorf("GET /health for another domain = %d; want 401 (not routed by host)", code)
	}
}

// TestE2BDomainPorts checks requests for {port}-{id}.{domain}, port not
// envd's: public for a box made through E2B's API, behind its traffic
// token when it asked for that, behind the daemon's token for other
// boxes; tokens never reach the app; maskRequestHost sets the Host.
func TestE2BDomainPorts(t *testing.T) {
	df := newDomainFixture(t)
	public := df.create(t, "public", &sandbox.E2BSettings{MaskRequestHost: "localhost:${PORT}"})
	private := df.create(t, "private", &sandbox.E2BSettings{TrafficToken: "traffic1"})
	own := df.create(t, "own", nil)

	code, body := df.at(t, "GET", "3000-"+public.ID+".e2b.test:8443", "/a?b=c", AccessTokenHeader, public.AccessToken)
	if code != http.StatusOK || body != "app ok" {
		t.Fatalf("GET a public port = %d %q; want the app's answer", code, body)
	}
	if got, want := <-df.portReqs, `GET /a?b=c host=localhost:3000 auth="" leaked=[]`; got != want {
		t.Errorf("app got %s; want %s", got, want)
	}

	host := "8080-" + private.ID + ".e2b.test:8443"
	code, body = df.at(t, "GET", host, "/")
	wantE2BError(t, "GET a private port without its traffic token", code, body, http.StatusForbidden)
	code, body = df.at(t, "GET", host, "/", TrafficTokenHeader, "traffic2")
	wantE2BError(t, "GET a private port with a wrong traffic token", code, body, http.StatusForbidden)
	if code, body := df.at(t, "GET", host, "/", TrafficTokenHeader, "traffic1", "Authorization", "Basic YXBwOg=="); code != http.StatusOK {
		t.Fatalf("GET a private port with its traffic token = %d %s; want 200", code, body)
	}
	if got, want := <-df.portReqs, `GET / host=`+host+` auth="Basic YXBwOg==" leaked=[]`; got != want {
		t.Errorf("app got %s; want %s", got, want)
	}

	host = "8080-" + own.ID + ".e2b.test"
	code, body = df.at(t, "GET", host, "/")
	wantE2BError(t, "GET a port of a box not made through E2B's API, without the daemon's token", code, body, http.StatusUnauthorized)
	if code, body := df.at(t, "GET", host, "/", "Authorization", "Bearer tok3n"); code != http.StatusOK {
		t.Fatalf("GET a port of a box not made through E2B's API with the daemon's token = %d %s; want 200", code, body)
	}
	if got, want := <-df.portReqs, `GET / host=`+host+` auth="" leaked=[]`; got != want {
		t.Errorf("app got %s; want %s", got, want)
	}
	// With the API key, the app's own bearer token passes.
	if code, body := df.at(t, "GET", host, "/", APIKeyHeader, "tok3n", "Authorization", "Bearer app"); code != http.StatusOK {
		t.Fatalf("GET a port with the API key = %d %s; want 200", code, body)
	}
	if got, want := <-df.portReqs, `GET / host=`+host+` auth="Bearer app" leaked=[]`; got != want {
		t.Errorf("app got %s; want %s", got, want)
	}
}

// TestE2BAutoResume checks that a paused box made with autoResume is
// resumed by its data plane and its ports, and one without stays paused.
func TestE2BAutoResume(t *testing.T) {
	df := newDomainFixture(t)
	auto := df.create(t, "auto", &sandbox.E2BSettings{AutoResume: true})
	manual := df.create(t, "manual", &sandbox.E2BSettings{})
	for _, rec := range []sandbox.Record{auto, manual} {
		if _, err := df.m.Pause(t.Context(), rec.ID); err != nil {
			t.Fatal(err)
		}
	}
	code, body := df.at(t, "GET", "49983-"+manual.ID+".e2b.test", "/health", AccessTokenHeader, manual.AccessToken)
	wantE2BError(t, "GET /health of a paused box without autoResume", code, body, http.StatusBadGateway)
	code, body = df.at(t, "GET", "3000-"+manual.ID+".e2b.test", "/")
	wantE2BError(t, "GET a port of a paused box without autoResume", code, body, http.StatusBadGateway)
	if got, _ := df.m.Get(t.Context(), manual.ID); got.State != sandbox.StatePaused {
		t.Errorf("box without autoResume is %s after requests; want paused", got.State)
	}

	// By the E2b-Sandbox-Id header, as with E2B_SANDBOX_URL.
	code, body = df.do(t, "GET", "/health", "", SandboxIDHeader, auto.ID, AccessTokenHeader, auto.AccessToken)
	if code != http.StatusOK {
		t.Fatalf("GET /health of a paused box with autoResume = %d %s; want 200", code, body)
	}
	<-df.agentReqs
	if got, _ := df.m.Get(t.Context(), auto.ID); got.State != sandbox.StateRunning {
		t.Errorf("box with autoResume is %s after a request; want running", got.State)
	}
	// By a port.
	if _, err := df.m.Pause(t.Context(), auto.ID); err != nil {
		t.Fatal(err)
	}
	if code, body := df.at(t, "GET", "3000-"+auto.ID+".e2b.test", "/"); code != http.StatusOK || !strings.Contains(body, "app ok") {
		t.Fatalf("GET a port of a paused box with autoResume = %d %s; want 200", code, body)
	}
	<-df.portReqs
	if got, _ := df.m.Get(t.Context(), auto.ID); got.State != sandbox.StateRunning {
		t.Errorf("box with autoResume is %s after a port request; want running", got.State)
	}
}
