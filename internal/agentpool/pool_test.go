package agentpool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// fakeAgent is an agent over HTTP/1.1 and h2c on loopback, reached by the
// pool through the dialer of the scheme "fake".
type fakeAgent struct {
	srv *httptest.Server
	// dials are the addresses the fake dialer was asked for.
	mu    sync.Mutex
	dials []string
	// conns counts the connections the agent accepted, closed those it
	// saw end.
	conns, closed atomic.Int32
}

func newFakeAgent(t *testing.T, h http.HandlerFunc) (*fakeAgent, *Pool) {
	t.Helper()
	f := &fakeAgent{srv: httptest.NewUnstartedServer(h)}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	f.srv.Config.Protocols = &protos
	f.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			f.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			f.closed.Add(1)
		}
	}
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	p := New(Config{Dialers: map[string]Dialer{"fake": func(ctx context.Context, addr string) (net.Conn, error) {
		f.mu.Lock()
		f.dials = append(f.dials, addr)
		f.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, "tcp", f.srv.Listener.Addr().String())
	}}})
	t.Cleanup(func() { p.Close() })
	return f, p
}

func (f *fakeAgent) dialed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.dials...)
}

// get sends GET path to the agent at addr over HTTP/1.1 and returns the
// body.
func get(t *testing.T, p *Pool, addr, path string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(testutil.Context(t), http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := p.Transport(addr).RoundTrip(req)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, addr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestDialByScheme(t *testing.T) {
	f, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	if got := get(t, p, "fake://box-1", "/x"); got != "ok" {
		t.Fatalf("GET through fake://box-1 = %q; want ok", got)
	}
	if got := get(t, p, "fake://box-1", "/x"); got != "ok" {
		t.Fatalf("second GET = %q; want ok", got)
	}
	if d := f.dialed(); len(d) != 1 || d[0] != "fake://box-1" {
		t.Errorf("dialer calls = %q; want one for fake://box-1 (the second request reuses the connection)", d)
	}
}

func TestDialUnknownScheme(t *testing.T) {
	_, p := newFakeAgent(t, func(http.ResponseWriter, *http.Request) {})
	ctx := testutil.Context(t)
	for _, tc := range []struct {
		addr string
		want error
		says string
	}{
		{"vsock://3:1024", errdefs.ErrNotImplemented, `no dialer for scheme "vsock" (this daemon dials fake)`},
		{"unix-abstract:///run/x/netns#corral-agent", errdefs.ErrNotImplemented, `scheme "unix-abstract"`},
		{"/run/agent.sock", errdefs.ErrInvalidArgument, "want <scheme>://<address>"},
		{"://x", errdefs.ErrInvalidArgument, "want <scheme>://<address>"},
	} {
		_, err := p.Dial(ctx, tc.addr)
		if !errors.Is(err, tc.want) || !strings.Contains(fmt.Sprint(err), tc.says) {
			t.Errorf("Dial(%q) = %v; want %v saying %q", tc.addr, err, tc.want, tc.says)
		}
		// Waiting for such an agent cannot help: Ready says so at once
		// (ctx has no deadline).
		if err := p.Ready(ctx, tc.addr); !errors.Is(err, tc.want) {
			t.Errorf("Ready(%q) = %v; want %v", tc.addr, err, tc.want)
		}
	}
	if n := p.Len(); n != 0 {
		t.Errorf("pool holds %d agents after failed dials; want 0", n)
	}
}

func TestDefaultDialers(t *testing.T) {
	p := New(Config{})
	for _, s := range []string{"unix-abstract", "unix", "tcp"} {
		if _, ok := p.dialers[s]; !ok {
			t.Errorf("default dialers lack %q", s)
		}
	}
	// A real agent over tcp://, through agentclient.Dial.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	if err := p.Check(testutil.Context(t), "tcp://"+srv.Listener.Addr().String()); err != nil {
		t.Errorf("Check(tcp://...) = %v; want nil", err)
	}
}

func TestDrop(t *testing.T) {
	f, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") })
	get(t, p, "fake://a", "/")
	get(t, p, "fake://b", "/")
	if n := p.Len(); n != 2 {
		t.Fatalf("pool holds %d agents; want 2 (a and b, each with an idle connection)", n)
	}
	p.Drop("fake://a")
	if n := p.Len(); n != 1 {
		t.Errorf("after Drop(a) the pool holds %d agents; want 1 (b)", n)
	}
	get(t, p, "fake://a", "/")
	get(t, p, "fake://b", "/")
	want := []string{"fake://a", "fake://b", "fake://a"}
	if d := f.dialed(); strings.Join(d, " ") != strings.Join(want, " ") {
		t.Errorf("dials = %q; want %q (only a's connection was dropped)", d, want)
	}
	p.Drop("fake://none") // nothing to drop
}

// TestDropLeavesRequestInFlight: Drop closes idle connections only; a
// response being read goes on.
func TestDropLeavesRequestInFlight(t *testing.T) {
	release := make(chan struct{})
	_, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "first ")
		w.(http.Flusher).Flush()
		<-release
		fmt.Fprint(w, "last")
	})
	req, _ := http.NewRequestWithContext(testutil.Context(t), http.MethodGet, "http://agent/stream", nil)
	resp, err := p.Transport("fake://a").RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p.Drop("fake://a")
	close(release)
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "first last" {
		t.Errorf("body read across Drop = %q, %v; want the whole of it", b, err)
	}
}

// TestDialOutlivesRequest: a dial the transport goes on with after its
// request ended keeps the agent in the pool, so that Drop finds the
// connection it makes.
func TestDialOutlivesRequest(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ok") }))
	t.Cleanup(srv.Close)
	entered, release := make(chan struct{}), make(chan struct{})
	p := New(Config{Dialers: map[string]Dialer{"fake": func(ctx context.Context, _ string) (net.Conn, error) {
		close(entered)
		<-release
		var d net.Dialer
		return d.DialContext(context.WithoutCancel(ctx), "tcp", srv.Listener.Addr().String())
	}}})
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithCancel(testutil.Context(t))
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/", nil)
	errc := make(chan error, 1)
	go func() {
		resp, err := p.Transport("fake://a").RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("RoundTrip(cancelled while dialling) = %v; want context.Canceled", err)
	}
	if n := p.Len(); n != 1 {
		t.Errorf("pool holds %d agents while a dial goes on; want 1", n)
	}
	close(release)
}

func TestCheck(t *testing.T) {
	var sick atomic.Bool
	f, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" && !sick.Load() {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if r.URL.Path == "/health" {
			http.Error(w, "sick", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	ctx := testutil.Context(t)
	get(t, p, "fake://a", "/") // leaves an idle connection
	if err := p.Check(ctx, "fake://a"); err != nil {
		t.Errorf("Check(healthy) = %v; want nil", err)
	}
	sick.Store(true)
	if err := p.Check(ctx, "fake://a"); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("Check(sick) = %v; want the 500", err)
	}
	// Each check dialled a connection of its own and closed it.
	if d := f.dialed(); len(d) != 3 {
		t.Errorf("dials = %d; want 3 (the request's, then one per check)", len(d))
	}
	get(t, p, "fake://a", "/")
	if d := f.dialed(); len(d) != 3 {
		t.Errorf("dials after the checks = %d; want still 3 (the request's idle connection is reused)", len(d))
	}
}

// TestReady starts the agent's listener only after Ready began polling.
func TestReady(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var attempts atomic.Int32
	started := make(chan struct{})
	p := New(Config{Dialers: map[string]Dialer{"fake": func(ctx context.Context, _ string) (net.Conn, error) {
		if attempts.Add(1) == 3 {
			close(started)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}}})
	errc := make(chan error, 1)
	go func() { errc <- p.Ready(testutil.Context(t), "fake://a") }()
	<-started
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken meanwhile: %v", addr, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	if err := <-errc; err != nil {
		t.Fatalf("Ready() = %v; want nil", err)
	}
	if n := p.Len(); n != 0 {
		t.Errorf("pool holds %d agents after Ready; want 0 (no connection stays open)", n)
	}

	ctx, cancel := context.WithCancel(testutil.Context(t))
	cancel()
	if err := p.Ready(ctx, "fake://gone"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Ready(ended ctx) = %v; want ErrUnavailable", err)
	}
}

func TestProtocols(t *testing.T) {
	protos := make(chan string, 4)
	_, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) { protos <- r.Proto })
	for _, tc := range []struct {
		name  string
		major int
		path  string
		want  string
	}{
		{"h1 request", 1, "/process.Process/Start", "HTTP/1.1"},
		{"h2 request", 2, "/process.Process/Start", "HTTP/2.0"},
		{"h1 StreamInput", 1, streamInputPath, "HTTP/2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(testutil.Context(t), http.MethodPost, "http://agent"+tc.path, strings.NewReader("{}"))
			req.ProtoMajor = tc.major
			resp, err := p.Transport("fake://a").RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if got := <-protos; got != tc.want {
				t.Errorf("agent got %s; want %s", got, tc.want)
			}
		})
	}
}

func TestRetryStopping(t *testing.T) {
	var stopping atomic.Int32
	stopping.Store(2)
	bodies := make(chan string, 8)
	_, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- string(b)
		if stopping.Add(-1) >= 0 {
			w.Header().Set(agentclient.StoppingHeader, "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	})
	req, _ := http.NewRequestWithContext(testutil.Context(t), http.MethodPost, "http://agent/x", strings.NewReader("payload"))
	resp, err := p.Transport("fake://a").RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("status = %d; want 200 after two stopping agents", resp.StatusCode)
	}
	for i := range 3 {
		if b := <-bodies; b != "payload" {
			t.Errorf("attempt %d body = %q; want payload", i+1, b)
		}
	}

	// A body that cannot be sent again gets the 503.
	stopping.Store(1)
	req, _ = http.NewRequestWithContext(testutil.Context(t), http.MethodPost, "http://agent/x", io.NopCloser(strings.NewReader("stream")))
	resp, err = p.Transport("fake://a").RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("status of a stream body = %d; want 503", resp.StatusCode)
	}
}

func TestFilesAndInit(t *testing.T) {
	var mu sync.Mutex
	files := map[string]string{"/etc/hosts": "127.0.0.1 localhost\n"}
	var initBody string
	_, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		q := r.URL.Query()
		switch {
		case r.URL.Path == "/init" && r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			initBody = string(b)
			w.WriteHeader(http.StatusNoContent)
		case r.URL.Path == "/files" && q.Get("username") != "root":
			http.Error(w, "want root", http.StatusForbidden)
		case r.URL.Path == "/files" && r.Method == http.MethodGet:
			c, ok := files[q.Get("path")]
			if !ok {
				http.Error(w, "no such file", http.StatusNotFound)
				return
			}
			fmt.Fprint(w, c)
		case r.URL.Path == "/files" && r.Method == http.MethodPost:
			b, _ := io.ReadAll(r.Body)
			files[q.Get("path")] = string(b)
		default:
			http.Error(w, "no", http.StatusBadRequest)
		}
	})
	ctx := testutil.Context(t)
	if err := p.Init(ctx, "fake://a", []string{"A=1"}, "user", "/w"); err != nil {
		t.Fatalf("Init: %v", err)
	}
	if want := `{"env":["A=1"],"user":"user","workdir":"/w"}`; initBody != want {
		t.Errorf("POST /init body = %s; want %s", initBody, want)
	}
	if b, err := p.ReadFile(ctx, "fake://a", "/etc/hosts"); err != nil || string(b) != files["/etc/hosts"] {
		t.Errorf("ReadFile(/etc/hosts) = %q, %v", b, err)
	}
	if _, err := p.ReadFile(ctx, "fake://a", "/none"); !errdefs.IsNotFound(err) {
		t.Errorf("ReadFile(/none) = %v; want ErrNotFound", err)
	}
	if err := p.WriteFile(ctx, "fake://a", "/etc/x y", []byte("data")); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	if b, err := p.ReadFile(ctx, "fake://a", "/etc/x y"); err != nil || string(b) != "data" {
		t.Errorf("ReadFile after WriteFile = %q, %v; want data", b, err)
	}
}

func TestWarm(t *testing.T) {
	reqs := make(chan string, 4)
	f, p := newFakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		reqs <- fmt.Sprintf("%s %s %s warm=%q", r.Proto, r.Method, r.URL.Path, r.Header.Get(agentclient.WarmUpHeader))
		if r.URL.Path == "/process.Process/Start" {
			// A Connect stream that ends at once, without an error.
			w.Header().Set("Content-Type", "application/connect+proto")
			_, _ = w.Write([]byte{2, 0, 0, 0, 2, '{', '}'})
			return
		}
		fmt.Fprint(w, "ok")
	})
	if err := p.Warm(testutil.Context(t), "fake://a"); err != nil {
		t.Fatalf("Warm: %v", err)
	}
	if got, want := <-reqs, `HTTP/1.1 POST /process.Process/Start warm="1"`; got != want {
		t.Errorf("warm-up reached the agent as %s; want %s", got, want)
	}
	get(t, p, "fake://a", "/")
	if n := f.conns.Load(); n != 1 {
		t.Errorf("warm-up and the next request opened %d connections; want 1", n)
	}
}

// TestRestartsReported checks that an answer carrying the agent's count
// of failed predecessors is reported with the agent's address, and that
// answers without it are not.
func TestRestartsReported(t *testing.T) {
	var failed atomic.Bool
	_, p := newFakeAgent(t, func(w http.ResponseWriter, _ *http.Request) {
		if failed.Load() {
			w.Header().Set(agentclient.RestartsHeader, "3")
			w.Header().Set(agentclient.FailureHeader, "killed by signal 9")
		}
		fmt.Fprint(w, "ok")
	})
	type report struct {
		addr    string
		n       uint64
		failure string
	}
	var mu sync.Mutex
	var got []report
	p.restarts = func(addr string, n uint64, failure string) {
		mu.Lock()
		got = append(got, report{addr, n, failure})
		mu.Unlock()
	}
	get(t, p, "fake://a", "/health")
	failed.Store(true)
	get(t, p, "fake://a", "/health")
	mu.Lock()
	defer mu.Unlock()
	if want := []report{{"fake://a", 3, "killed by signal 9"}}; !slices.Equal(got, want) {
		t.Errorf("reports = %+v; want %+v", got, want)
	}
}
