package e2bapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeCommands records the commands run through Config.Commands; a ready
// command exits 0 from its readyAfter-th run on (never when 0).
type fakeCommands struct {
	mu         sync.Mutex
	started    []string // addr tag cmd
	runs       []string // addr cmd
	readyAfter int
}

func (c *fakeCommands) Start(_ context.Context, addr, tag, cmd string) (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.started = append(c.started, addr+" "+tag+" "+cmd)
	return 7, nil
}

func (c *fakeCommands) Run(_ context.Context, addr, cmd string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.runs = append(c.runs, addr+" "+cmd)
	if c.readyAfter > 0 && len(c.runs) >= c.readyAfter {
		return 0, nil
	}
	return 1, nil
}

// buildTemplate builds template name through the API with the build's
// start body (fromImage host and what extra adds).
func buildTemplate(t *testing.T, f *fixture, name, extra string) {
	t.Helper()
	code, out, _ := f.do(t, "POST", "/v3/templates", `{"name": "`+name+`"}`)
	var req templateRequested
	if err := json.Unmarshal([]byte(out), &req); err != nil || code != http.StatusAccepted {
		t.Fatalf("POST /v3/templates = %d %s; want 202", code, out)
	}
	if code, out, _ := f.do(t, "POST", "/v2/templates/"+req.TemplateID+"/builds/"+req.BuildID, `{"fromImage": "host"`+extra+`}`); code != http.StatusAccepted {
		t.Fatalf("start build = %d %s; want 202", code, out)
	}
	if st, logs := waitBuild(t, f, req.TemplateID, req.BuildID); st.Status != statusReady {
		t.Fatalf("build = %+v %+v; want ready", st, logs)
	}
}

func newStartFixture(t *testing.T, cmds Commands, ready time.Duration) *fixture {
	t.Helper()
	f := &fixture{m: newFakeManager(testNow)}
	a, err := New(Config{
		Manager: f.m, Images: fakeImages{f.m}, Now: func() time.Time { return testNow },
		Builder: &fakeBuilder{m: f.m}, TemplateImages: fakeImages{f.m}, TemplateDir: t.TempDir(),
		Commands: cmds, ReadyTimeout: ready,
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

// TestTemplateStartCommand: a sandbox from a template with a start
// command starts it as the managed command "start", and the create
// returns once the ready command exits 0; a template without one runs
// nothing.
func TestTemplateStartCommand(t *testing.T) {
	cmds := &fakeCommands{readyAfter: 3}
	f := newStartFixture(t, cmds, time.Hour)
	buildTemplate(t, f, "web", `, "startCmd": "python3 -m http.server 8000", "readyCmd": "ss -tln | grep -q :8000"`)
	buildTemplate(t, f, "plain", ``)

	id := f.create(t, `{"templateID": "web"}`)
	cmds.mu.Lock()
	started, runs := slices.Clone(cmds.started), slices.Clone(cmds.runs)
	cmds.mu.Unlock()
	addr := "tcp://agent001"
	if want := []string{addr + " start python3 -m http.server 8000"}; !slices.Equal(started, want) {
		t.Errorf("started %q; want %q", started, want)
	}
	if len(runs) != 3 || runs[2] != addr+" ss -tln | grep -q :8000" {
		t.Errorf("ready runs %q; want the ready command three times (until it exits 0)", runs)
	}
	if _, err := f.m.Get(t.Context(), id); err != nil {
		t.Errorf("sandbox %s: %v; want it running", id, err)
	}

	f.create(t, `{"templateID": "plain"}`)
	cmds.mu.Lock()
	defer cmds.mu.Unlock()
	if len(cmds.started) != 1 || len(cmds.runs) != 3 {
		t.Errorf("a template without start command ran %q %q; want nothing more", cmds.started, cmds.runs)
	}
}

// TestTemplateReadyTimeout: a ready command that never exits 0 fails the
// create with E2B's error body and removes the sandbox.
func TestTemplateReadyTimeout(t *testing.T) {
	cmds := &fakeCommands{}
	f := newStartFixture(t, cmds, time.Millisecond)
	buildTemplate(t, f, "web", `, "startCmd": "server", "readyCmd": "false"`)
	code, out, _ := f.do(t, "POST", "/v2/sandboxes", `{"templateID": "web"}`)
	wantError(t, "create from a template that never gets ready", code, out, http.StatusServiceUnavailable)
	if !strings.Contains(out, "ready command") {
		t.Errorf("create = %s; want it to name the ready command", out)
	}
	if recs, _ := f.m.List(t.Context()); len(recs) != 0 || len(f.removed) != 1 {
		t.Errorf("after the failed create: sandboxes %v, removed %v; want none left, one removed", recs, f.removed)
	}
}

// TestTemplateStartNoCommands: a daemon that cannot run commands refuses
// a template with a start command, leaving nothing behind.
func TestTemplateStartNoCommands(t *testing.T) {
	f := newStartFixture(t, nil, time.Hour)
	buildTemplate(t, f, "web", `, "startCmd": "server"`)
	code, out, _ := f.do(t, "POST", "/v2/sandboxes", `{"templateID": "web"}`)
	wantError(t, "create without Commands", code, out, http.StatusNotImplemented)
	if recs, _ := f.m.List(t.Context()); len(recs) != 0 {
		t.Errorf("sandboxes %v; want none", recs)
	}
}

// TestTemplateTags: assignTags names the target's image NAME:TAG (with
// its start command), removeTags removes those names; bad requests are
// refused with E2B's body and change nothing.
func TestTemplateTags(t *testing.T) {
	cmds := &fakeCommands{readyAfter: 1}
	f := newStartFixture(t, cmds, time.Hour)
	buildTemplate(t, f, "web", `, "startCmd": "server"`)

	code, out, _ := f.do(t, "POST", "/templates/tags", `{"target": "web:default", "tags": ["prod", "stable"]}`)
	var got assignedTags
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != http.StatusCreated || got.BuildID == "" || !slices.Equal(got.Tags, []string{"prod", "stable"}) {
		t.Fatalf("assign tags = %d %s; want 201 with the build and tags prod, stable", code, out)
	}
	for _, img := range []string{"web:prod", "web:stable"} {
		if _, err := (fakeImages{f.m}).Get(t.Context(), img); err != nil {
			t.Errorf("image %s: %v; want it", img, err)
		}
	}
	f.create(t, `{"templateID": "web:prod"}`)
	if cmds.started[len(cmds.started)-1] != "tcp://agent001 start server" {
		t.Errorf("a sandbox from web:prod started %q; want the template's start command", cmds.started)
	}

	for _, tc := range []struct {
		method, body string
		want         int
	}{
		{"POST", `{"target": "web:nope", "tags": ["x"]}`, http.StatusNotFound},
		{"POST", `{"target": "nope", "tags": ["x"]}`, http.StatusNotFound},
		{"POST", `{"target": "web", "tags": []}`, http.StatusBadRequest},
		{"POST", `{"target": "web", "tags": ["Bad Tag"]}`, http.StatusBadRequest},
		{"DELETE", `{"name": "web", "tags": ["default"]}`, http.StatusBadRequest},
		{"DELETE", `{"name": "web", "tags": ["nope"]}`, http.StatusNotFound},
		{"DELETE", `{"name": "web:prod", "tags": ["prod"]}`, http.StatusBadRequest},
	} {
		code, out, _ := f.do(t, tc.method, "/templates/tags", tc.body)
		wantError(t, tc.method+" /templates/tags "+tc.body, code, out, tc.want)
	}

	if code, out, _ := f.do(t, "DELETE", "/templates/tags", `{"name": "web", "tags": ["prod"]}`); code != http.StatusNoContent {
		t.Fatalf("remove tags = %d %s; want 204", code, out)
	}
	if _, err := (fakeImages{f.m}).Get(t.Context(), "web:prod"); err == nil {
		t.Error("web:prod is still an image after removeTags")
	}
	if _, err := (fakeImages{f.m}).Get(t.Context(), "web:stable"); err != nil {
		t.Errorf("web:stable: %v; want it kept", err)
	}
}
