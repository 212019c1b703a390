package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/testutil"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// fakeNetworker is the sandbox.Networker of the Manager: it records the
// settings each box is attached with.
type fakeNetworker struct {
	mu sync.Mutex
	// attached holds the settings of attached boxes; guarded by mu.
	attached map[string]netpolicy.Settings
}

func (n *fakeNetworker) Prepare(string, netpolicy.Settings) ([]byte, error) { return nil, nil }

func (n *fakeNetworker) Attach(_ context.Context, id, _ string, _ int, set netpolicy.Settings) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.attached[id] = set
	return nil
}

func (n *fakeNetworker) Detach(id string, _ bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.attached, id)
	return nil
}

func (n *fakeNetworker) Attached(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.attached[id]
	return ok
}

func (n *fakeNetworker) settings(id string) (netpolicy.Settings, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	set, ok := n.attached[id]
	return set, ok
}

// fakeLog is a NetworkLog. Follow works for IDs in attached only.
type fakeLog struct {
	mu sync.Mutex
	// recorded are the events of each box; attached the boxes that can be
	// followed; subs the followers; stops counts stop calls. Guarded by mu.
	recorded map[string][]network.Event
	attached map[string]bool
	subs     map[string][]chan network.Event
	stops    int
	// duringRead, if set, is called after Events has passed its first
	// event (without mu held).
	duringRead func()
}

func newFakeLog() *fakeLog {
	return &fakeLog{recorded: map[string][]network.Event{}, attached: map[string]bool{}, subs: map[string][]chan network.Event{}}
}

// add records ev and sends it to the followers, as the real log does.
func (l *fakeLog) add(ev network.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recorded[ev.Sandbox] = append(l.recorded[ev.Sandbox], ev)
	for _, ch := range l.subs[ev.Sandbox] {
		ch <- ev
	}
}

// detach closes the followers of id.
func (l *fakeLog) detach(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ch := range l.subs[id] {
		close(ch)
	}
	delete(l.subs, id)
	delete(l.attached, id)
}

func (l *fakeLog) Events(id string, fn func(network.Event) error) error {
	for i := 0; ; i++ {
		l.mu.Lock()
		if i >= len(l.recorded[id]) {
			l.mu.Unlock()
			return nil
		}
		ev, hook := l.recorded[id][i], l.duringRead
		l.mu.Unlock()
		if err := fn(ev); err != nil {
			return err
		}
		if i == 0 && hook != nil {
			hook()
		}
	}
}

func (l *fakeLog) Follow(id string) (<-chan network.Event, func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.attached[id] {
		return nil, nil, fmt.Errorf("sandbox %s has no network attached: %w", id, errdefs.ErrFailedPrecondition)
	}
	ch := make(chan network.Event, 16)
	l.subs[id] = append(l.subs[id], ch)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.stops++
			if i := slices.Index(l.subs[id], ch); i >= 0 {
				l.subs[id] = slices.Delete(l.subs[id], i, i+1)
				close(ch)
			}
		})
	}, nil
}

type netFixture struct {
	*fixture
	net     *fakeNetworker
	log     *fakeLog
	secrets *secrets.Store
	tunnels *tunnel.Registry
}

const testTunnelBase = "http://127.0.0.1:7080"

func newNetFixture(t *testing.T) *netFixture {
	t.Helper()
	store, err := secrets.Open(filepath.Join(t.TempDir(), "secrets"))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tunnel.Open(filepath.Join(t.TempDir(), "tunnels.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &netFixture{
		fixture: &fixture{env: sandboxtest.NewEnv(), images: newFakeImages()},
		net:     &fakeNetworker{attached: map[string]netpolicy.Settings{}},
		log:     newFakeLog(), secrets: store, tunnels: reg,
	}
	cfg := f.env.Config()
	cfg.Network = f.net
	cfg.Secrets = store
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	f.m = m
	s, err := New(Config{
		Manager: m, Images: f.images, Network: f.log, Secrets: store,
		Tunnels: reg, TunnelBase: testTunnelBase,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testutil.Context(t)
	f.srv = httptest.NewUnstartedServer(s.Handler())
	f.srv.Config.BaseContext = func(net.Listener) context.Context { return ctx }
	f.srv.Start()
	t.Cleanup(f.srv.Close)
	return f
}

func decodeSandbox(t *testing.T, body string) rest.Sandbox {
	t.Helper()
	var sb rest.Sandbox
	if err := json.Unmarshal([]byte(body), &sb); err != nil {
		t.Fatalf("body %q is not a rest.Sandbox: %v", body, err)
	}
	return sb
}

func TestCreateWithNetworkAndSecrets(t *testing.T) {
	f := newNetFixture(t)
	if err := f.secrets.Set("API_KEY", []byte("s3cr3t-value")); err != nil {
		t.Fatal(err)
	}
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"web","network":{"mode":"allowlist","allow":["api.example.org","*.pypi.example"],"limits":{"connections_per_minute":30}},"secrets":[{"name":"API_KEY"}]}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/sandboxes = %d %s; want 201", code, body)
	}
	sb := decodeSandbox(t, body)
	wantNet := &rest.Network{Mode: "allowlist", Allow: []string{"api.example.org", "*.pypi.example"}, Limits: &rest.NetworkLimits{ConnectionsPerMinute: 30}}
	if !reflect.DeepEqual(sb.Network, wantNet) {
		t.Errorf("network = %+v; want %+v", sb.Network, wantNet)
	}
	// Hosts default to the allowlist's host rules.
	wantSecrets := []rest.SecretBinding{{Name: "API_KEY", Hosts: []string{"api.example.org", "*.pypi.example"}}}
	if !reflect.DeepEqual(sb.Secrets, wantSecrets) {
		t.Errorf("secrets = %+v; want %+v", sb.Secrets, wantSecrets)
	}
	set, ok := f.net.settings(sb.ID)
	if !ok || set.Mode != "allowlist" || len(set.Secrets) != 1 || set.Secrets[0].Placeholder == "" {
		t.Fatalf("attached settings = %+v, %v; want allowlist with one secret and its placeholder", set, ok)
	}
	// The placeholder is in the box's env, but the API shows neither it
	// (outside env) nor the value.
	_, got := f.do(t, "GET", "/v1/sandboxes/web", "")
	if strings.Contains(got, "s3cr3t-value") || strings.Contains(got, "placeholder") {
		t.Errorf("GET sandbox = %s; want no value and no placeholder field", got)
	}
	if sb := decodeSandbox(t, got); sb.Env["API_KEY"] != set.Secrets[0].Placeholder || !reflect.DeepEqual(sb.Network, wantNet) {
		t.Errorf("GET sandbox = %+v; want the placeholder in env and the network", sb)
	}

	tests := []struct {
		name, body, wantMsg string
	}{
		{"secrets without hosts or policy", `{"secrets":[{"name":"API_KEY"}]}`, "say which hosts"},
		{"unknown secret", `{"network":{"mode":"full"},"secrets":[{"name":"NOPE","hosts":["a.example"]}]}`, `corral secret set NOPE`},
		{"bad mode", `{"network":{"mode":"open-ish"}}`, "network mode"},
		{"placeholder is not input", `{"secrets":[{"name":"API_KEY","hosts":["a.example"],"placeholder":"x"}]}`, "unknown field"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "POST", "/v1/sandboxes", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(body, tc.wantMsg) {
				t.Errorf("POST %s = %d %s; want 400 with %q", tc.body, code, body, tc.wantMsg)
			}
		})
	}

	// Secrets with hosts and no policy: mode none.
	code, body = f.do(t, "POST", "/v1/sandboxes", `{"secrets":[{"name":"API_KEY","hosts":["api.example.org"]}]}`)
	if sb := decodeSandbox(t, body); code != http.StatusCreated || sb.Network == nil || sb.Network.Mode != "none" || len(sb.Secrets) != 1 {
		t.Errorf("POST secrets only = %d %s; want 201, mode none, one secret", code, body)
	}
	// No network at all: no network field.
	code, body = f.do(t, "POST", "/v1/sandboxes", `{}`)
	if sb := decodeSandbox(t, body); code != http.StatusCreated || sb.Network != nil || sb.Secrets != nil {
		t.Errorf("POST {} = %d %s; want 201 without network", code, body)
	}
}

func TestSetNetwork(t *testing.T) {
	f := newNetFixture(t)
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"web","network":{"mode":"allowlist","allow":["a.example"],"limits":{"egress_bytes":1000}}}`)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/sandboxes = %d %s", code, body)
	}
	id := decodeSandbox(t, body).ID

	code, body = f.do(t, "PUT", "/v1/sandboxes/web/network", `{"mode":"full"}`)
	if code != http.StatusOK {
		t.Fatalf("PUT network = %d %s; want 200", code, body)
	}
	// Limits left out are kept.
	want := &rest.Network{Mode: "full", Limits: &rest.NetworkLimits{EgressBytes: 1000}}
	if sb := decodeSandbox(t, body); !reflect.DeepEqual(sb.Network, want) {
		t.Errorf("PUT network answered %+v; want %+v", sb.Network, want)
	}
	if set, _ := f.net.settings(id); set.Mode != "full" || set.Limits.EgressBytes != 1000 {
		t.Errorf("attached settings = %+v; want mode full, budget kept", set)
	}
	code, body = f.do(t, "PUT", "/v1/sandboxes/"+id+"/network", `{"mode":"allowlist","allow":["b.example:443"],"limits":{"connections_per_minute":5}}`)
	want = &rest.Network{Mode: "allowlist", Allow: []string{"b.example:443"}, Limits: &rest.NetworkLimits{ConnectionsPerMinute: 5}}
	if sb := decodeSandbox(t, body); code != http.StatusOK || !reflect.DeepEqual(sb.Network, want) {
		t.Errorf("PUT network = %d %s; want %+v", code, body, want)
	}

	tests := []struct {
		name, path, body string
		wantCode         int
		wantErr          string
	}{
		{"unknown sandbox", "/v1/sandboxes/nope/network", `{"mode":"full"}`, 404, CodeNotFound},
		{"bad mode", "/v1/sandboxes/web/network", `{"mode":"sometimes"}`, 400, CodeInvalidArgument},
		{"bad rule", "/v1/sandboxes/web/network", `{"mode":"allowlist","allow":["http://x/"]}`, 400, CodeInvalidArgument},
		{"secrets cannot change", "/v1/sandboxes/web/network", `{"mode":"full","secrets":[{"name":"A"}]}`, 400, CodeInvalidArgument},
		{"negative limit", "/v1/sandboxes/web/network", `{"mode":"full","limits":{"egress_bytes":-1}}`, 400, CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "PUT", tc.path, tc.body)
			if code != tc.wantCode || errCode(t, body) != tc.wantErr {
				t.Errorf("PUT %s %s = %d %s; want %d %s", tc.path, tc.body, code, body, tc.wantCode, tc.wantErr)
			}
		})
	}
}

func testEvent(id string, n int) network.Event {
	return network.Event{
		Time: time.Date(2025, 1, 2, 3, 4, 5, n, time.UTC), Sandbox: id, Kind: "tcp", Host: fmt.Sprintf("h%d.example", n),
		Addr: "192.0.2.10", Port: 443, Verdict: network.Allow, Reason: "h.example", BytesOut: 10, BytesIn: 20,
		Exec: &network.ProcRef{Pid: 7, Command: "curl https://h.example"}, Secrets: []string{"API_KEY"},
	}
}

// readLines reads n NDJSON lines of NetworkEvent from r.
func readLines(t *testing.T, sc *bufio.Scanner, n int) []rest.NetworkEvent {
	t.Helper()
	var out []rest.NetworkEvent
	for range n {
		if !sc.Scan() {
			t.Fatalf("stream ended after %d lines (%v); want %d", len(out), sc.Err(), n)
		}
		var ev rest.NetworkEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	return out
}

func hosts(evs []rest.NetworkEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Host)
	}
	return out
}

func TestNetworkLog(t *testing.T) {
	f := newNetFixture(t)
	_, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"web","network":{"mode":"full"}}`)
	id := decodeSandbox(t, body).ID
	f.log.add(testEvent(id, 1))
	f.log.add(testEvent(id, 2))

	code, body := f.do(t, "GET", "/v1/sandboxes/web/network/log", "")
	if code != http.StatusOK {
		t.Fatalf("GET log = %d %s; want 200", code, body)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	evs := readLines(t, sc, 2)
	if sc.Scan() {
		t.Errorf("extra line %q", sc.Text())
	}
	want := rest.NetworkEvent{
		Time: time.Date(2025, 1, 2, 3, 4, 5, 1, time.UTC), Sandbox: id, Kind: "tcp", Host: "h1.example",
		Addr: "192.0.2.10", Port: 443, Verdict: "allow", Reason: "h.example", BytesOut: 10, BytesIn: 20,
		Exec: &rest.ProcessRef{Pid: 7, Command: "curl https://h.example"}, Secrets: []string{"API_KEY"},
	}
	if !reflect.DeepEqual(evs[0], want) {
		t.Errorf("first event = %+v; want %+v", evs[0], want)
	}

	// An empty log is an empty 200.
	_, body = f.do(t, "POST", "/v1/sandboxes", `{}`)
	other := decodeSandbox(t, body).ID
	if code, body := f.do(t, "GET", "/v1/sandboxes/"+other+"/network/log", ""); code != 200 || body != "" {
		t.Errorf("GET empty log = %d %q; want 200 and nothing", code, body)
	}

	tests := []struct {
		name, path string
		wantCode   int
		wantErr    string
	}{
		{"unknown sandbox", "/v1/sandboxes/nope/network/log", 404, CodeNotFound},
		{"follow without network", "/v1/sandboxes/" + other + "/network/log?follow=1", 412, CodeFailedPrecondition},
		{"bad follow", "/v1/sandboxes/web/network/log?follow=maybe", 400, CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "GET", tc.path, "")
			if code != tc.wantCode || errCode(t, body) != tc.wantErr {
				t.Errorf("GET %s = %d %s; want %d %s", tc.path, code, body, tc.wantCode, tc.wantErr)
			}
		})
	}
}

func TestNetworkLogFollow(t *testing.T) {
	f := newNetFixture(t)
	_, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"web","network":{"mode":"full"}}`)
	id := decodeSandbox(t, body).ID
	f.log.mu.Lock()
	f.log.attached[id] = true
	f.log.mu.Unlock()
	f.log.add(testEvent(id, 1))
	// An event logged while the recorded ones are read is both in the file
	// and in the live feed: it must be sent once.
	f.log.duringRead = func() { f.log.add(testEvent(id, 2)) }

	req, err := http.NewRequestWithContext(t.Context(), "GET", f.srv.URL+"/v1/sandboxes/web/network/log?follow=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("GET log?follow=1 = %d %s; want 200 NDJSON", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	if got := hosts(readLines(t, sc, 2)); !slices.Equal(got, []string{"h1.example", "h2.example"}) {
		t.Errorf("recorded events = %q; want h1, h2", got)
	}
	// Live events arrive as they happen (the stream is flushed).
	f.log.add(testEvent(id, 3))
	if got := hosts(readLines(t, sc, 1)); !slices.Equal(got, []string{"h3.example"}) {
		t.Errorf("live event = %q; want h3 (and h2 not repeated)", got)
	}
	f.log.add(testEvent(id, 4))
	if got := hosts(readLines(t, sc, 1)); !slices.Equal(got, []string{"h4.example"}) {
		t.Errorf("live event = %q; want h4", got)
	}
	// The box's network goes away: the stream ends.
	f.log.detach(id)
	if sc.Scan() {
		t.Errorf("line %q after the network went away; want the end", sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Errorf("stream error %v; want a clean end", err)
	}
}

func TestNetworkLogNotConfigured(t *testing.T) {
	f := newFixture(t, "")
	_, body := f.do(t, "POST", "/v1/sandboxes", `{}`)
	id := decodeSandbox(t, body).ID
	for _, tc := range []struct{ method, path, body, wantMsg string }{
		{"GET", "/v1/sandboxes/" + id + "/network/log", "", "network service"},
		{"GET", "/v1/secrets", "", "secret store"},
		{"PUT", "/v1/secrets/A", `{"value":"x"}`, "secret store"},
		{"DELETE", "/v1/secrets/A", "", "secret store"},
		{"POST", "/v1/sandboxes/" + id + "/ports", `{"port":80}`, "[tunnels] listen"},
		{"GET", "/v1/sandboxes/" + id + "/ports", "", "[tunnels] listen"},
		{"DELETE", "/v1/sandboxes/" + id + "/ports/80", "", "[tunnels] listen"},
	} {
		code, body := f.do(t, tc.method, tc.path, tc.body)
		if code != http.StatusNotImplemented || errCode(t, body) != CodeNotImplemented || !strings.Contains(body, tc.wantMsg) {
			t.Errorf("%s %s = %d %s; want 501 mentioning %q", tc.method, tc.path, code, body, tc.wantMsg)
		}
	}
	// Secrets need the network service too (the Manager says so).
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"network":{"mode":"full"}}`)
	if code != http.StatusBadRequest || !strings.Contains(body, "network service") {
		t.Errorf("POST mode full without a network service = %d %s; want 400", code, body)
	}
}

func TestSecretsAPI(t *testing.T) {
	f := newNetFixture(t)
	const value = "v4lue-never-returned"
	if code, body := f.do(t, "PUT", "/v1/secrets/API_KEY", `{"value":"`+value+`"}`); code != http.StatusNoContent || body != "" {
		t.Fatalf("PUT secret = %d %q; want 204", code, body)
	}
	if got, err := f.secrets.Get("API_KEY"); err != nil || string(got) != value {
		t.Errorf("stored value = %q, %v; want %q", got, err, value)
	}
	if code, _ := f.do(t, "PUT", "/v1/secrets/OTHER", `{"value":"x"}`); code != http.StatusNoContent {
		t.Errorf("PUT OTHER = %d; want 204", code)
	}
	code, body := f.do(t, "GET", "/v1/secrets", "")
	var l rest.SecretList
	if err := json.Unmarshal([]byte(body), &l); code != 200 || err != nil || len(l.Secrets) != 2 ||
		l.Secrets[0].Name != "API_KEY" || l.Secrets[1].Name != "OTHER" || l.Secrets[0].Updated.IsZero() {
		t.Errorf("GET secrets = %d %s; want API_KEY and OTHER with times", code, body)
	}
	if strings.Contains(body, value) {
		t.Errorf("GET secrets = %s; contains the value", body)
	}

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantErr                  string
	}{
		{"lower-case name", "PUT", "/v1/secrets/api_key", `{"value":"x"}`, 400, CodeInvalidArgument},
		{"empty value", "PUT", "/v1/secrets/A", `{"value":""}`, 400, CodeInvalidArgument},
		{"NUL in value", "PUT", "/v1/secrets/A", `{"value":"a\u0000b"}`, 400, CodeInvalidArgument},
		{"unknown field", "PUT", "/v1/secrets/A", `{"value":"x","hosts":["a"]}`, 400, CodeInvalidArgument},
		{"delete", "DELETE", "/v1/secrets/OTHER", "", 204, ""},
		{"delete again", "DELETE", "/v1/secrets/OTHER", "", 404, CodeNotFound},
		{"delete bad name", "DELETE", "/v1/secrets/a-b", "", 400, CodeInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, tc.body)
			if code != tc.wantCode || (tc.wantErr != "" && errCode(t, body) != tc.wantErr) {
				t.Errorf("%s %s = %d %s; want %d %s", tc.method, tc.path, code, body, tc.wantCode, tc.wantErr)
			}
			if strings.Contains(body, value) {
				t.Errorf("%s %s = %s; contains the value", tc.method, tc.path, body)
			}
		})
	}
	if l, _ := f.secrets.List(); len(l) != 1 {
		t.Errorf("secrets after delete = %+v; want API_KEY only", l)
	}
}

func TestPortsAPI(t *testing.T) {
	f := newNetFixture(t)
	_, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"web"}`)
	id := decodeSandbox(t, body).ID

	req, err := http.NewRequest("POST", f.srv.URL+"/v1/sandboxes/web/ports", strings.NewReader(`{"port":8000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var p rest.Port
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/sandboxes/"+id+"/ports/8000" {
		t.Fatalf("POST ports = %d %+v (%v), Location %q; want 201", resp.StatusCode, p, err, resp.Header.Get("Location"))
	}
	exps := f.tunnels.List(id)
	if len(exps) != 1 {
		t.Fatalf("registry = %+v; want one exposure of %s (the ID, not the name)", exps, id)
	}
	if want := tunnel.URL(testTunnelBase, "", exps[0]); p.Sandbox != id || p.Port != 8000 || p.URL != want || !p.Created.Equal(exps[0].Created) {
		t.Errorf("port = %+v; want sandbox %s, port 8000, URL %s", p, id, want)
	}
	if !strings.Contains(p.URL, exps[0].Token) {
		t.Errorf("URL %q lacks the token", p.URL)
	}
	// Exposing again gives the same URL.
	if code, body := f.do(t, "POST", "/v1/sandboxes/"+id+"/ports", `{"port":8000}`); code != 201 || !strings.Contains(body, p.URL) {
		t.Errorf("POST ports again = %d %s; want the same URL", code, body)
	}
	f.do(t, "POST", "/v1/sandboxes/web/ports", `{"port":3000}`)
	code, body := f.do(t, "GET", "/v1/sandboxes/web/ports", "")
	var l rest.PortList
	if err := json.Unmarshal([]byte(body), &l); code != 200 || err != nil || len(l.Ports) != 2 || l.Ports[0].Port != 3000 || l.Ports[1].URL != p.URL {
		t.Errorf("GET ports = %d %s; want 3000 and 8000", code, body)
	}

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantErr                  string
	}{
		{"port 0", "POST", "/v1/sandboxes/web/ports", `{"port":0}`, 400, CodeInvalidArgument},
		{"port too big", "POST", "/v1/sandboxes/web/ports", `{"port":70000}`, 400, CodeInvalidArgument},
		{"unknown sandbox", "POST", "/v1/sandboxes/nope/ports", `{"port":80}`, 404, CodeNotFound},
		{"list unknown sandbox", "GET", "/v1/sandboxes/nope/ports", "", 404, CodeNotFound},
		{"unexpose", "DELETE", "/v1/sandboxes/web/ports/3000", "", 204, ""},
		{"unexpose again", "DELETE", "/v1/sandboxes/web/ports/3000", "", 404, CodeNotFound},
		{"unexpose not a number", "DELETE", "/v1/sandboxes/web/ports/http", "", 400, CodeInvalidArgument},
		{"unexpose unknown sandbox", "DELETE", "/v1/sandboxes/nope/ports/8000", "", 404, CodeNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, tc.body)
			if code != tc.wantCode || (tc.wantErr != "" && errCode(t, body) != tc.wantErr) {
				t.Errorf("%s %s = %d %s; want %d %s", tc.method, tc.path, code, body, tc.wantCode, tc.wantErr)
			}
		})
	}

	// Removing the sandbox (by name) drops its exposures.
	if code, body := f.do(t, "DELETE", "/v1/sandboxes/web", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE sandbox = %d %s", code, body)
	}
	if exps := f.tunnels.List(""); len(exps) != 0 {
		t.Errorf("exposures after removing the sandbox = %+v; want none", exps)
	}
}

func TestRecentSet(t *testing.T) {
	s := newRecentSet(2)
	s.add([]byte("a"))
	s.add([]byte("a"))
	s.add([]byte("b")) // pushes out the first "a"
	if !s.take([]byte("a")) || s.take([]byte("a")) {
		t.Error("take(a) after adding a, a, b into a window of 2: want exactly one copy")
	}
	if !s.take([]byte("b")) || s.take([]byte("c")) {
		t.Error("take(b) = false or take(c) = true; want b once, never c")
	}
}

func TestOpenAPINetworkSchemas(t *testing.T) {
	doc := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Network": rest.Network{}, "NetworkLimits": rest.NetworkLimits{}, "SecretBinding": rest.SecretBinding{},
		"NetworkEvent": rest.NetworkEvent{}, "ProcessRef": rest.ProcessRef{}, "Secret": rest.Secret{},
		"SecretList": rest.SecretList{}, "SetSecretRequest": rest.SetSecretRequest{}, "Port": rest.Port{},
		"PortList": rest.PortList{}, "ExposePortRequest": rest.ExposePortRequest{},
	} {
		schema, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s is missing from api/openapi.yaml", name)
			continue
		}
		var tags, props []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			if tag, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ","); tag != "" && tag != "-" {
				tags = append(tags, tag)
			}
		}
		for p := range schema.Properties {
			props = append(props, p)
		}
		slices.Sort(tags)
		slices.Sort(props)
		if !slices.Equal(tags, props) {
			t.Errorf("schema %s properties = %v; want the json tags of rest.%s %v", name, props, name, tags)
		}
	}
	// The events mirror the back end's JSON field for field.
	a, b := reflect.TypeOf(rest.NetworkEvent{}), reflect.TypeOf(network.Event{})
	if a.NumField() != b.NumField() {
		t.Fatalf("rest.NetworkEvent has %d fields; network.Event %d", a.NumField(), b.NumField())
	}
	for i := range a.NumField() {
		if a.Field(i).Tag.Get("json") != b.Field(i).Tag.Get("json") {
			t.Errorf("rest.NetworkEvent field %d json %q; network.Event %q", i, a.Field(i).Tag.Get("json"), b.Field(i).Tag.Get("json"))
		}
	}
}
