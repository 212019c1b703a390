package network

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/netpolicy"
)

// fakeNet is a Service whose names resolve from a map and whose upstream
// dials all go to one local server, recording the address asked for.
type fakeNet struct {
	svc    *Service
	dialed chan string
}

type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// denyGuard blocks what netpolicy's Guard would, but for loopback (the fake
// upstream lives there).
type testGuard struct{}

func (testGuard) Check(ip netip.Addr) error {
	if ip == netip.MustParseAddr("169.254.169.254") {
		return errors.New("169.254.169.254 is a cloud metadata address")
	}
	return nil
}

func newFakeNet(t *testing.T, upstream string) *fakeNet {
	t.Helper()
	f := &fakeNet{dialed: make(chan string, 100)}
	svc, err := New(Config{
		StateDir: t.TempDir(),
		Resolver: mapResolver{
			"allowed.test":     {netip.MustParseAddr("192.0.2.10")},
			"api.allowed.test": {netip.MustParseAddr("192.0.2.11")},
			"forbidden.test":   {netip.MustParseAddr("192.0.2.20")},
			"rebind.test":      {netip.MustParseAddr("169.254.169.254")},
		},
		Guard: testGuard{},
		Dial: func(ctx context.Context, nw, addr string) (net.Conn, error) {
			f.dialed <- addr
			var d net.Dialer
			return d.DialContext(ctx, nw, upstream)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	f.svc = svc
	return f
}

func hostEcho() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s auth=%s", r.Host, r.Header.Get("Authorization"))
	}))
}

// get sends one HTTP request over a connection made in the box to dst.
func get(t *testing.T, ns, dst, host string) (*http.Response, string) {
	t.Helper()
	c, err := DialInNS(ns, "tcp4", dst)
	if err != nil {
		t.Fatalf("dial %s from the box: %v", dst, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, err.Error()
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestProxyAllowlist(t *testing.T) {
	ns := boxNetNS(t)
	up := hostEcho()
	defer up.Close()
	f := newFakeNet(t, up.Listener.Addr().String())
	err := f.svc.Attach(context.Background(), "box1", "/proc/1/ns/net", 1, netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"allowed.test", "rebind.test"}})
	if err == nil {
		t.Fatal("Attach in the namespace of pid 1 (the host's init) must not wire the host's namespace")
	}
	_ = ns
}

func TestProxyTransparentHTTP(t *testing.T) {
	ns := boxNetNS(t)
	up := hostEcho()
	defer up.Close()
	f := newFakeNet(t, up.Listener.Addr().String())
	pid := nsPid(ns)
	if err := f.svc.Attach(context.Background(), "box1", ns, pid, netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"allowed.test", "rebind.test"}}); err != nil {
		t.Fatal(err)
	}
	// Allowed: the proxy dials the address it resolved, not the one the
	// box connected to.
	resp, body := get(t, ns, "203.0.113.99:80", "allowed.test")
	if resp == nil || resp.StatusCode != 200 || body != "host=allowed.test auth=" {
		t.Fatalf("allowed.test: %v %q", resp, body)
	}
	if got := <-f.dialed; got != "192.0.2.10:80" {
		t.Errorf("dialled %s; want 192.0.2.10:80 (the checked address)", got)
	}
	// Forbidden name, IP literal, rebinding to metadata.
	for _, host := range []string{"forbidden.test", "192.0.2.20", "rebind.test", "2852039166", "0xa9fea9fe"} {
		resp, body := get(t, ns, "192.0.2.20:80", host)
		if resp == nil || resp.StatusCode/100 != 4 || !strings.Contains(body, "egress denied") {
			t.Errorf("Host %s: %v %q; want 4xx egress denied", host, resp, body)
		}
	}
	// A second request on the same connection for another host is
	// decided again.
	c, err := DialInNS(ns, "tcp4", "192.0.2.10:80")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\nGET / HTTP/1.1\r\nHost: forbidden.test\r\n\r\n")
	br := bufio.NewReader(c)
	r1, err := http.ReadResponse(br, nil)
	if err != nil || r1.StatusCode != 200 {
		t.Fatalf("first request: %v %v", r1, err)
	}
	io.ReadAll(r1.Body)
	r2, err := http.ReadResponse(br, nil)
	if err != nil || r2.StatusCode != http.StatusForbidden {
		t.Errorf("second request to forbidden.test on the same connection: %v %v; want 403", r2, err)
	}
	c.Close()

	// The log has allowed and denied attempts.
	time.Sleep(100 * time.Millisecond)
	var allow, deny int
	f.svc.Events("box1", func(ev Event) error {
		switch ev.Verdict {
		case Allow:
			allow++
		case Deny:
			deny++
		}
		return nil
	})
	if allow < 2 || deny < 5 {
		t.Errorf("log: %d allowed, %d denied; want >= 2 and >= 5", allow, deny)
	}
	// The counters (stats, /metrics) saw the same.
	if c := f.svc.Counters(); c.Allowed < 2 || c.Denied < 5 || c.BytesIn == 0 || c.BytesOut == 0 {
		t.Errorf("Counters() = %+v; want >= 2 allowed, >= 5 denied, bytes both ways", c)
	}
	if in, out := f.svc.Traffic("box1"); in == 0 || out == 0 {
		t.Errorf("Traffic(box1) = %d in, %d out; want both > 0", in, out)
	}

	// A policy change applies to the next connection.
	if err := f.svc.Attach(context.Background(), "box1", ns, pid, netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"forbidden.test"}}); err != nil {
		t.Fatal(err)
	}
	if resp, body := get(t, ns, "192.0.2.10:80", "allowed.test"); resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("allowed.test after the change: %v %q; want 403", resp, body)
	}
	if resp, body := get(t, ns, "192.0.2.20:80", "forbidden.test"); resp == nil || resp.StatusCode != 200 {
		t.Errorf("forbidden.test after the change: %v %q; want 200", resp, body)
	}
	if err := f.svc.Detach("box1", true); err != nil {
		t.Fatal(err)
	}
	// Detached: nothing listens in the box any more.
	if c, err := DialInNS(ns, "tcp4", "192.0.2.10:80"); err == nil {
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Error("a detached box still reaches the proxy")
		}
		c.Close()
	}
}

func TestProxyTLSByServerName(t *testing.T) {
	ns := boxNetNS(t)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tls ok") }))
	defer up.Close()
	f := newFakeNet(t, up.Listener.Addr().String())
	if err := f.svc.Attach(context.Background(), "box2", ns, nsPid(ns), netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"*.allowed.test:443"}}); err != nil {
		t.Fatal(err)
	}
	try := func(sni string) error {
		c, err := DialInNS(ns, "tcp4", "192.0.2.20:443")
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(c, &tls.Config{ServerName: sni, InsecureSkipVerify: true})
		return tc.Handshake()
	}
	if err := try("api.allowed.test"); err != nil {
		f.svc.Events("box2", func(ev Event) error { t.Logf("event %+v", ev); return nil })
		t.Errorf("SNI api.allowed.test: %v", err)
	}
	for _, sni := range []string{"allowed.test", "forbidden.test", "api.allowed.test.evil.test"} {
		if err := try(sni); err == nil {
			t.Errorf("SNI %s: handshake succeeded; want it refused", sni)
		}
	}
}
