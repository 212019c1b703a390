package e2bapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/secrets"
)

// fakeManager keeps records in memory; only the image "host" exists.
type fakeManager struct {
	mu   sync.Mutex
	recs map[string]sandbox.Record
	n    int
	now  time.Time
	// created is the last CreateRequest.
	created sandbox.CreateRequest
	// suspended records the SuspendRequests.
	suspended []sandbox.SuspendRequest
	// forks records the ForkRequests; noMemory makes one with
	// MemoryState fail as not implemented, noCheckpoint as a box whose
	// memory cannot be saved (a user namespace, the gvisor tier).
	forks        []sandbox.ForkRequest
	noMemory     bool
	noCheckpoint bool
	// images are the snapshots made (and the store's other images).
	images map[string]sandbox.Image
	// network is the last SetNetwork's settings.
	network *netpolicy.Settings
}

func newFakeManager(now time.Time) *fakeManager {
	return &fakeManager{recs: map[string]sandbox.Record{}, now: now, images: map[string]sandbox.Image{"host": {Name: "host"}}}
}

func (f *fakeManager) Create(_ context.Context, req sandbox.CreateRequest) (sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = req
	if _, ok := f.images[req.Image]; !ok {
		return sandbox.Record{}, fmt.Errorf("image %q: %w", req.Image, errdefs.ErrNotFound)
	}
	f.n++
	rec := sandbox.Record{
		ID: fmt.Sprintf("sbx%03d", f.n), AgentAddr: fmt.Sprintf("tcp://agent%03d", f.n), Image: req.Image, State: sandbox.StateRunning, Env: req.Env, Labels: req.Labels,
		Created: f.now.Add(time.Duration(f.n) * time.Second), Timeout: req.Timeout, Network: req.Network,
		TimeoutAction: req.TimeoutAction, AccessToken: fmt.Sprintf("token%d", f.n), E2B: req.E2B, Volumes: req.Volumes,
		Resources: sandbox.Resources{CPUs: 0.5, MemoryBytes: 512 << 20, DiskBytes: 1 << 30},
	}
	if req.Timeout > 0 {
		rec.Deadline = rec.Created.Add(req.Timeout)
	}
	f.recs[rec.ID] = rec
	return rec, nil
}

func (f *fakeManager) Get(_ context.Context, id string) (sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	if !ok {
		return rec, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	return rec, nil
}

func (f *fakeManager) List(context.Context) ([]sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Record
	for _, r := range f.recs {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakeManager) Delete(_ context.Context, id string, _ bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.recs[id]; !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	delete(f.recs, id)
	return nil
}

func (f *fakeManager) setState(id string, st sandbox.RecordState) (sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	if !ok {
		return rec, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	rec.State = st
	f.recs[id] = rec
	return rec, nil
}

func (f *fakeManager) Pause(_ context.Context, id string) (sandbox.Record, error) {
	return f.setState(id, sandbox.StatePaused)
}

func (f *fakeManager) Suspend(_ context.Context, id string, req sandbox.SuspendRequest) (sandbox.Record, error) {
	f.mu.Lock()
	f.suspended = append(f.suspended, req)
	f.mu.Unlock()
	return f.setState(id, sandbox.StateSuspended)
}

func (f *fakeManager) Resume(_ context.Context, id string) (sandbox.Record, error) {
	return f.setState(id, sandbox.StateRunning)
}

func (f *fakeManager) SetDeadline(_ context.Context, id string, t time.Time) (sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	if !ok {
		return rec, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	rec.Deadline = t
	f.recs[id] = rec
	return rec, nil
}

func (f *fakeManager) Fork(_ context.Context, id string, req sandbox.ForkRequest) ([]sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forks = append(f.forks, req)
	src, ok := f.recs[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if req.MemoryState && f.noMemory {
		return nil, fmt.Errorf("runtime cannot copy memory state: %w", errdefs.ErrNotImplemented)
	}
	if req.MemoryState && f.noCheckpoint {
		return nil, fmt.Errorf("fork %s: the box runs in a user namespace: %w", id, sandbox.ErrCheckpoint)
	}
	var out []sandbox.Record
	for range req.Count {
		f.n++
		rec := src
		rec.ID, rec.Origin, rec.AccessToken = fmt.Sprintf("sbx%03d", f.n), src.ID, fmt.Sprintf("token%d", f.n)
		f.recs[rec.ID] = rec
		out = append(out, rec)
	}
	return out, nil
}

func (f *fakeManager) Snapshot(_ context.Context, id, name string) (sandbox.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.recs[id]; !ok {
		return sandbox.Image{}, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if _, ok := f.images[name]; ok {
		return sandbox.Image{}, fmt.Errorf("snapshot name %q is used by an image: %w", name, errdefs.ErrAlreadyExists)
	}
	img := sandbox.Image{Name: name, Disk: "snap-" + name, Origin: id}
	f.images[name] = img
	return img, nil
}

func (f *fakeManager) SetNetwork(_ context.Context, id string, set netpolicy.Settings) (sandbox.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rec, ok := f.recs[id]
	if !ok {
		return rec, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if rec.State != sandbox.StateRunning {
		return rec, fmt.Errorf("sandbox %s is %s: %w", id, rec.State, errdefs.ErrFailedPrecondition)
	}
	f.network = &set
	rec.Network = &set
	f.recs[id] = rec
	return rec, nil
}

// List and Remove make the fake the image store too.
func (f *fakeManager) ListImages() []sandbox.Image {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Image
	for _, img := range f.images {
		out = append(out, img)
	}
	return out
}

type fakeImages struct{ m *fakeManager }

func (i fakeImages) List(context.Context) ([]sandbox.Image, error) { return i.m.ListImages(), nil }

func (i fakeImages) Remove(_ context.Context, name string) error {
	i.m.mu.Lock()
	defer i.m.mu.Unlock()
	if _, ok := i.m.images[name]; !ok {
		return fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
	}
	delete(i.m.images, name)
	return nil
}

// fakeSecrets is a secret store in memory.
type fakeSecrets struct {
	mu   sync.Mutex
	vals map[string]string
}

func (s *fakeSecrets) Set(name string, value []byte) error {
	if err := secrets.ValidName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vals[name] = string(value)
	return nil
}

func (s *fakeSecrets) Delete(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vals[name]; !ok {
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	delete(s.vals, name)
	return nil
}

func (s *fakeSecrets) List() ([]secrets.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []secrets.Info
	for n := range s.vals {
		out = append(out, secrets.Info{Name: n, Updated: testNow})
	}
	slices.SortFunc(out, func(a, b secrets.Info) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

var testNow = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

type fixture struct {
	m       *fakeManager
	secrets *fakeSecrets
	volumes *fakeVolumes
	srv     *httptest.Server
	// removed lists the IDs passed to Config.Removed.
	removed []string
	// trail is the audit trail of the logs routes.
	trail *fakeTrail
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{m: newFakeManager(testNow), secrets: &fakeSecrets{vals: map[string]string{}}, trail: &fakeTrail{}, volumes: &fakeVolumes{used: map[string]bool{}}}
	a, err := New(Config{
		Manager: f.m, Images: fakeImages{f.m}, Secrets: f.secrets, Volumes: f.volumes, Now: func() time.Time { return testNow }, Audit: f.trail,
		Removed: func(_ context.Context, id string) { f.removed = append(f.removed, id) },
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for p, h := range a.Routes() {
		mux.HandleFunc(p, h)
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// do sends a request and returns the status, the body and the headers.
func (f *fixture) do(t *testing.T, method, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// create makes a sandbox through the API and returns its ID.
func (f *fixture) create(t *testing.T, body string) string {
	t.Helper()
	code, out, _ := f.do(t, "POST", "/v2/sandboxes", body)
	if code != http.StatusCreated {
		t.Fatalf("POST /v2/sandboxes %s = %d %s; want 201", body, code, out)
	}
	var sb sandboxJSON
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		t.Fatal(err)
	}
	return sb.SandboxID
}

// wantError checks an E2B error body with status code.
func wantError(t *testing.T, what string, code int, body string, want int) {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil || code != want || e.Code != want || e.Message == "" {
		t.Errorf("%s = %d %s; want %d with body code %d and a message", what, code, body, want, want)
	}
}

func TestCreate(t *testing.T) {
	f := newFixture(t)
	code, out, _ := f.do(t, "POST", "/v2/sandboxes",
		`{"templateID":"host","timeout":60,"envVars":{"A":"1"},"metadata":{"user":"ann"},"autoPause":true,"future":"ignored"}`)
	if code != http.StatusCreated {
		t.Fatalf("create = %d %s; want 201", code, out)
	}
	var got map[string]any
	_ = json.Unmarshal([]byte(out), &got)
	want := map[string]any{
		"templateID": "host", "sandboxID": "sbx001", "clientID": ClientID, "envdVersion": EnvdVersion,
		"envdAccessToken": "token1", "domain": nil,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("create answered %v; want %v", got, want)
	}
	c := f.m.created
	if c.Image != "host" || c.Env["A"] != "1" || c.Labels["user"] != "ann" || c.Timeout != time.Minute ||
		c.TimeoutAction != sandbox.TimeoutPause || c.Network != nil {
		t.Errorf("CreateRequest = %+v; want image host, env A=1, label user=ann, timeout 1m, pause at timeout, no network", c)
	}
	// The v1 route takes the same body; no timeout is E2B's default.
	if code, out, _ := f.do(t, "POST", "/sandboxes", `{"templateID":"host"}`); code != http.StatusCreated {
		t.Errorf("POST /sandboxes = %d %s; want 201", code, out)
	}
	if f.m.created.Timeout != DefaultTimeout || f.m.created.TimeoutAction != "" {
		t.Errorf("create without timeout: Timeout %s, action %q; want %s, remove", f.m.created.Timeout, f.m.created.TimeoutAction, DefaultTimeout)
	}
	code, out, _ = f.do(t, "POST", "/v2/sandboxes", `{"templateID":"nope"}`)
	wantError(t, "create from an unknown template", code, out, http.StatusNotFound)
}

func TestCreateNetwork(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       string // mode and allowlist, or "" for no settings
	}{
		{"default", `{}`, ""},
		{"internet", `{"allow_internet_access":true}`, "full []"},
		{"no internet", `{"allow_internet_access":false}`, "none []"},
		{"allowlist", `{"network":{"allowOut":["example.com","1.1.1.1/32"],"denyOut":["0.0.0.0/0"]}}`, "allowlist [example.com 1.1.1.1/32]"},
		{"allowlist wins", `{"allow_internet_access":false,"network":{"allowOut":["example.com"]}}`, "allowlist [example.com]"},
		{"deny all", `{"network":{"denyOut":["0.0.0.0/0"]}}`, "none []"},
		{"deny all and more", `{"network":{"allowOut":["1.1.1.1"],"denyOut":["10.0.0.0/8","0.0.0.0/0","192.168.1.1"]}}`, "allowlist [1.1.1.1]"},
		{"public traffic", `{"network":{"allowPublicTraffic":true}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var req newSandbox
			if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
				t.Fatal(err)
			}
			set, err := networkOf(req)
			got := ""
			if set != nil {
				got = fmt.Sprintf("%s %v", set.Mode, set.Allow)
			}
			if err != nil || got != tc.want {
				t.Errorf("networkOf(%s) = %q, %v; want %q", tc.body, got, err, tc.want)
			}
		})
	}
}

// TestCreateE2BSettings checks what create keeps for the data plane and
// the ports: autoResume, allowPublicTraffic false (a traffic token,
// answered at create and in getInfo's network) and maskRequestHost.
func TestCreateE2BSettings(t *testing.T) {
	f := newFixture(t)
	code, out, _ := f.do(t, "POST", "/v2/sandboxes", `{"templateID":"host"}`)
	if code != http.StatusCreated || strings.Contains(out, "trafficAccessToken") {
		t.Errorf("create = %d %s; want 201 without trafficAccessToken", code, out)
	}
	if e := f.m.created.E2B; e == nil || *e != (sandbox.E2BSettings{}) {
		t.Errorf("create with no settings: E2B = %+v; want set and empty (public ports, no auto-resume)", e)
	}
	code, out, _ = f.do(t, "POST", "/v2/sandboxes",
		`{"templateID":"host","autoPause":true,"autoResume":{"enabled":true},"network":{"allowPublicTraffic":false,"maskRequestHost":"localhost:${PORT}"}}`)
	if code != http.StatusCreated {
		t.Fatalf("create = %d %s; want 201", code, out)
	}
	e := f.m.created.E2B
	if e == nil || !e.AutoResume || e.TrafficToken == "" || e.MaskRequestHost != "localhost:${PORT}" {
		t.Fatalf("create: E2B = %+v; want auto-resume, a traffic token, the host mask", e)
	}
	var sb sandboxJSON
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.TrafficAccessToken == nil || *sb.TrafficAccessToken != e.TrafficToken {
		t.Errorf("create answered %s; want trafficAccessToken %q", out, e.TrafficToken)
	}
	code, out, _ = f.do(t, "GET", "/sandboxes/"+sb.SandboxID, "")
	var d struct {
		Lifecycle lifecycle     `json:"lifecycle"`
		Network   networkConfig `json:"network"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || code != http.StatusOK || !d.Lifecycle.AutoResume ||
		d.Network.AllowPublicTraffic == nil || *d.Network.AllowPublicTraffic || d.Network.MaskRequestHost != "localhost:${PORT}" {
		t.Errorf("GET /sandboxes/%s = %d %s; want lifecycle.autoResume, network.allowPublicTraffic false and the mask", sb.SandboxID, code, out)
	}
}

func TestCreateRefuses(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, body, field string
	}{
		{"no template", `{}`, "templateID"},
		{"negative timeout", `{"templateID":"host","timeout":-1}`, "timeout"},
		{"deny list", `{"templateID":"host","network":{"denyOut":["10.0.0.0/8"]}}`, "denyOut"},
		{"rules", `{"templateID":"host","network":{"rules":{"example.com":[{}]}}}`, "network.rules"},
		{"deny a name", `{"templateID":"host","network":{"denyOut":["0.0.0.0/0","example.com"]}}`, "denyOut"},
		{"egress proxy", `{"templateID":"host","network":{"egressProxy":{"address":"p:1080"}}}`, "network.egressProxy"},
		{"https ports", `{"templateID":"host","network":{"httpsPorts":[8443]}}`, "network.httpsPorts"},
		{"mask with a path", `{"templateID":"host","network":{"maskRequestHost":"a/b"}}`, "maskRequestHost"},
		{"pause without memory", `{"templateID":"host","autoPause":true,"autoPauseMemory":false}`, "autoPauseMemory"},
		{"volume without path", `{"templateID":"host","volumeMounts":[{"name":"v"}]}`, "volumeMounts[0]"},
		{"mcp", `{"templateID":"host","mcp":{"x":{}}}`, "mcp"},
		{"not json", `{"templateID":`, "request body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.m.created = sandbox.CreateRequest{}
			code, out, _ := f.do(t, "POST", "/v2/sandboxes", tc.body)
			wantError(t, "create "+tc.body, code, out, http.StatusBadRequest)
			if !strings.Contains(out, tc.field) {
				t.Errorf("create %s = %s; want the message to name %s", tc.body, out, tc.field)
			}
			if f.m.created.Image != "" {
				t.Errorf("create %s reached the manager", tc.body)
			}
		})
	}
}

// TestCreateVolumeMounts: E2B's volumeMounts are named volumes at their
// paths, and GET answers them.
func TestCreateVolumeMounts(t *testing.T) {
	f := newFixture(t)
	id := f.create(t, `{"templateID":"host","volumeMounts":[{"name":"data","path":"/data"}]}`)
	want := []sandbox.VolumeMount{{Name: "data", Target: "/data"}}
	if !slices.Equal(f.m.created.Volumes, want) {
		t.Errorf("create with volumeMounts: Volumes %+v; want %+v", f.m.created.Volumes, want)
	}
	_, out, _ := f.do(t, "GET", "/sandboxes/"+id, "")
	var d sandboxDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	if len(d.VolumeMounts) != 1 || d.VolumeMounts[0] != (volumeMount{Name: "data", Path: "/data"}) {
		t.Errorf("GET = %s; want volumeMounts data at /data", out)
	}
}

func TestGetAndKill(t *testing.T) {
	f := newFixture(t)
	id := f.create(t, `{"templateID":"host","timeout":30,"metadata":{"k":"v"},"allow_internet_access":true}`)
	code, out, _ := f.do(t, "GET", "/sandboxes/"+id, "")
	if code != http.StatusOK {
		t.Fatalf("GET = %d %s", code, out)
	}
	var d sandboxDetail
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	rec, _ := f.m.Get(t.Context(), id)
	if d.SandboxID != id || d.TemplateID != "host" || d.State != "running" || d.Metadata["k"] != "v" ||
		!d.StartedAt.Equal(rec.Created) || !d.EndAt.Equal(rec.Created.Add(30*time.Second)) ||
		d.CPUCount != 1 || d.MemoryMB != 512 || d.DiskSizeMB != 1024 || d.EnvdAccessToken != rec.AccessToken ||
		d.AllowInternetAccess == nil || !*d.AllowInternetAccess || d.Lifecycle.OnTimeout != "kill" {
		t.Errorf("GET = %s; want the record's fields", out)
	}
	if code, out, _ := f.do(t, "DELETE", "/sandboxes/"+id, ""); code != http.StatusNoContent {
		t.Errorf("DELETE = %d %s; want 204", code, out)
	}
	if !slices.Equal(f.removed, []string{id}) {
		t.Errorf("Removed got %v; want [%s]", f.removed, id)
	}
	code, out, _ = f.do(t, "DELETE", "/sandboxes/"+id, "")
	wantError(t, "DELETE of a removed sandbox", code, out, http.StatusNotFound)
	code, out, _ = f.do(t, "GET", "/sandboxes/"+id, "")
	wantError(t, "GET of a removed sandbox", code, out, http.StatusNotFound)
}

func TestList(t *testing.T) {
	f := newFixture(t)
	a := f.create(t, `{"templateID":"host","metadata":{"team":"a b","n":"1"}}`)
	b := f.create(t, `{"templateID":"host","metadata":{"team":"a b","n":"2"}}`)
	c := f.create(t, `{"templateID":"host","metadata":{"team":"other"}}`)
	if _, err := f.m.Pause(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	ids := func(body string) []string {
		var out []listedSandbox
		if err := json.Unmarshal([]byte(body), &out); err != nil {
			t.Fatalf("list body %s: %v", body, err)
		}
		var s []string
		for _, x := range out {
			s = append(s, x.SandboxID)
		}
		return s
	}
	// The SDK's encoding: URL-encoded pairs, as one query parameter.
	team := url.Values{"metadata": {"team=" + url.QueryEscape("a b")}}.Encode()
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"all, newest first", "", []string{c, b, a}},
		{"oldest first", "?order=asc", []string{a, b, c}},
		{"metadata", "?" + team, []string{b, a}},
		{"metadata and", "?" + url.Values{"metadata": {"team=a%20b&n=1"}}.Encode(), []string{a}},
		{"paused", "?state=paused", []string{c}},
		{"both states", "?state=running,paused", []string{c, b, a}},
		{"template", "?template=other", nil},
		{"started after", "?startedAfter=" + url.QueryEscape(testNow.Add(2*time.Second).Format(time.RFC3339)), []string{c, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := f.do(t, "GET", "/v2/sandboxes"+tc.query, "")
			if got := ids(out); code != http.StatusOK || !slices.Equal(got, tc.want) {
				t.Errorf("GET /v2/sandboxes%s = %d %v; want %v", tc.query, code, got, tc.want)
			}
		})
	}
	// v1 lists running sandboxes only.
	if code, out, _ := f.do(t, "GET", "/sandboxes", ""); code != http.StatusOK || !slices.Equal(ids(out), []string{b, a}) {
		t.Errorf("GET /sandboxes = %d %s; want %v", code, out, []string{b, a})
	}
	// Pages of one follow X-Next-Token to the end.
	var got []string
	next := ""
	for i := 0; i < 5; i++ {
		q := "?limit=1"
		if next != "" {
			q += "&nextToken=" + url.QueryEscape(next)
		}
		code, out, h := f.do(t, "GET", "/v2/sandboxes"+q, "")
		if code != http.StatusOK {
			t.Fatalf("page %d = %d %s", i, code, out)
		}
		got = append(got, ids(out)...)
		if next = h.Get("X-Next-Token"); next == "" {
			break
		}
	}
	if !slices.Equal(got, []string{c, b, a}) {
		t.Errorf("pages = %v; want %v", got, []string{c, b, a})
	}
	for _, q := range []string{"?limit=0", "?limit=101", "?state=gone", "?order=up", "?nextToken=zz", "?startedAfter=yesterday", "?metadata=%25ZZ"} {
		code, out, _ := f.do(t, "GET", "/v2/sandboxes"+q, "")
		wantError(t, "GET /v2/sandboxes"+q, code, out, http.StatusBadRequest)
	}
}

func TestTimeoutAndConnect(t *testing.T) {
	f := newFixture(t)
	id := f.create(t, `{"templateID":"host","timeout":600}`)
	deadline := func() time.Time {
		rec, _ := f.m.Get(t.Context(), id)
		return rec.Deadline
	}
	// setTimeout may shorten.
	if code, out, _ := f.do(t, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":30}`); code != http.StatusNoContent {
		t.Fatalf("timeout = %d %s", code, out)
	}
	if got := deadline(); !got.Equal(testNow.Add(30 * time.Second)) {
		t.Errorf("deadline after timeout 30 = %v; want now + 30s", got)
	}
	// connect only extends.
	code, out, _ := f.do(t, "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":10}`)
	if code != http.StatusOK || !strings.Contains(out, `"envdAccessToken":"token1"`) {
		t.Errorf("connect to a running sandbox = %d %s; want 200 with its access token", code, out)
	}
	if got := deadline(); !got.Equal(testNow.Add(30 * time.Second)) {
		t.Errorf("deadline after connect 10 = %v; want unchanged", got)
	}
	if code, _, _ := f.do(t, "POST", "/v2/sandboxes/"+id+"/connect", `{}`); code != http.StatusOK {
		t.Errorf("connect without a body = %d", code)
	}
	if got := deadline(); !got.Equal(testNow.Add(connectDefaultTimeout)) {
		t.Errorf("deadline after connect {} = %v; want now + %s", got, connectDefaultTimeout)
	}
	code, out, _ = f.do(t, "POST", "/sandboxes/"+id+"/connect", `{}`)
	wantError(t, "v1 connect without a timeout", code, out, http.StatusBadRequest)

	// pause: 204, clears the deadline; again 409.
	if code, out, _ := f.do(t, "POST", "/sandboxes/"+id+"/pause", ""); code != http.StatusNoContent {
		t.Fatalf("pause = %d %s", code, out)
	}
	if rec, _ := f.m.Get(t.Context(), id); rec.State != sandbox.StatePaused || !rec.Deadline.IsZero() {
		t.Errorf("after pause: %s, deadline %v; want paused without a deadline", rec.State, rec.Deadline)
	}
	code, out, _ = f.do(t, "POST", "/sandboxes/"+id+"/pause", "")
	wantError(t, "pause of a paused sandbox", code, out, http.StatusConflict)
	// connect resumes (201) and sets a deadline again.
	if code, out, _ := f.do(t, "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":60}`); code != http.StatusCreated {
		t.Errorf("connect to a paused sandbox = %d %s; want 201", code, out)
	}
	if rec, _ := f.m.Get(t.Context(), id); rec.State != sandbox.StateRunning || !rec.Deadline.Equal(testNow.Add(time.Minute)) {
		t.Errorf("after connect: %s, deadline %v; want running until now + 1m", rec.State, rec.Deadline)
	}
	// pause without memory suspends, keeping the files only.
	if code, out, _ := f.do(t, "POST", "/sandboxes/"+id+"/pause", `{"memory":false}`); code != http.StatusNoContent {
		t.Fatalf("pause without memory = %d %s", code, out)
	}
	if len(f.m.suspended) != 1 || !f.m.suspended[0].FilesystemOnly {
		t.Errorf("suspends = %+v; want one filesystem-only", f.m.suspended)
	}
	// The deprecated resume: 201, then 409 once running.
	if code, out, _ := f.do(t, "POST", "/sandboxes/"+id+"/resume", `{"timeout":20}`); code != http.StatusCreated {
		t.Errorf("resume = %d %s; want 201", code, out)
	}
	if got := deadline(); !got.Equal(testNow.Add(20 * time.Second)) {
		t.Errorf("deadline after resume 20 = %v", got)
	}
	code, out, _ = f.do(t, "POST", "/sandboxes/"+id+"/resume", `{}`)
	wantError(t, "resume of a running sandbox", code, out, http.StatusConflict)
	// refreshes extend by the duration.
	if code, out, _ := f.do(t, "POST", "/sandboxes/"+id+"/refreshes", `{"duration":120}`); code != http.StatusNoContent {
		t.Errorf("refreshes = %d %s", code, out)
	}
	if got := deadline(); !got.Equal(testNow.Add(2 * time.Minute)) {
		t.Errorf("deadline after refresh 120 = %v", got)
	}
	code, out, _ = f.do(t, "POST", "/sandboxes/"+id+"/refreshes", `{"duration":3601}`)
	wantError(t, "refresh beyond an hour", code, out, http.StatusBadRequest)

	for _, p := range []string{"/sandboxes/nope/timeout", "/sandboxes/nope/pause", "/v2/sandboxes/nope/connect", "/sandboxes/nope/resume"} {
		code, out, _ := f.do(t, "POST", p, `{"timeout":5}`)
		wantError(t, "POST "+p, code, out, http.StatusNotFound)
	}
	code, out, _ = f.do(t, "POST", "/sandboxes/"+id+"/timeout", `{}`)
	wantError(t, "timeout without a timeout", code, out, http.StatusBadRequest)
}

func TestNotYet(t *testing.T) {
	f := newFixture(t)
	code, out, _ := f.do(t, "GET", "/sandboxes/x/metrics", ``)
	wantError(t, "metrics", code, out, http.StatusNotImplemented)
}

func TestState(t *testing.T) {
	for in, want := range map[sandbox.RecordState]string{
		sandbox.StateRunning: "running", sandbox.StatePaused: "paused", sandbox.StateSuspended: "paused",
		sandbox.StateResuming: "paused", sandbox.StateDeleting: "deleting",
	} {
		if got := state(in); got != want {
			t.Errorf("state(%s) = %s; want %s", in, got, want)
		}
	}
}
