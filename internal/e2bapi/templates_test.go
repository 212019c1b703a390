package e2bapi

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/build"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/spec"
)

func (i fakeImages) Get(_ context.Context, name string) (sandbox.Image, error) {
	i.m.mu.Lock()
	defer i.m.mu.Unlock()
	img, ok := i.m.images[name]
	if !ok {
		return img, fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
	}
	return img, nil
}

func (i fakeImages) Tag(_ context.Context, src, dst string) (sandbox.Image, error) {
	i.m.mu.Lock()
	defer i.m.mu.Unlock()
	img, ok := i.m.images[src]
	if !ok {
		return img, fmt.Errorf("image %q: %w", src, errdefs.ErrNotFound)
	}
	img.Name = dst
	i.m.images[dst] = img
	return img, nil
}

// fakeBuilder records builds and registers their image; fail, when set,
// is the error of the next build.
type fakeBuilder struct {
	m    *fakeManager
	mu   sync.Mutex
	opts []build.Options
	// files are the build context's files (name: contents) at build time.
	files map[string]string
	fail  error
}

func (b *fakeBuilder) Build(_ context.Context, o build.Options) (sandbox.Image, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.opts = append(b.opts, o)
	b.files = map[string]string{}
	_ = filepath.WalkDir(o.Spec.Dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			data, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(o.Spec.Dir, p)
			b.files[rel] = string(data)
		}
		return nil
	})
	o.Events(build.Event{Type: "step", Step: 1, Steps: 3, Name: "user user, workdir /home/user"})
	o.Events(build.Event{Type: "step", Step: 3, Steps: 3, Name: "run make"})
	o.Events(build.Event{Type: "log", Step: 3, Stream: "stdout", Data: "compiling\nlinking"})
	o.Events(build.Event{Type: "log", Step: 3, Stream: "stdout", Data: " done\n"})
	if err := b.fail; err != nil {
		b.fail = nil
		return sandbox.Image{}, err
	}
	img := sandbox.Image{Name: o.Spec.Name, Created: testNow}
	b.m.mu.Lock()
	b.m.images[img.Name] = img
	b.m.mu.Unlock()
	o.Events(build.Event{Type: "image", Name: img.Name})
	return img, nil
}

func newTemplateFixture(t *testing.T) (*fixture, *fakeBuilder, string) {
	t.Helper()
	f := &fixture{m: newFakeManager(testNow), secrets: &fakeSecrets{vals: map[string]string{}}}
	b := &fakeBuilder{m: f.m}
	dir := t.TempDir()
	a, err := New(Config{
		Manager: f.m, Images: fakeImages{f.m}, Now: func() time.Time { return testNow },
		Builder: b, TemplateImages: fakeImages{f.m}, TemplateDir: dir,
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
	return f, b, dir
}

// tgz is a gzip-compressed tar of files (name: contents).
func tgz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte(files[name]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	_ = zw.Close()
	return buf.Bytes()
}

// waitBuild polls a build's status until it ends and returns its last
// answer and every log entry, as the SDK reads them (by logsOffset).
func waitBuild(t *testing.T, f *fixture, tpl, id string) (buildInfo, []buildLogEntry) {
	t.Helper()
	var all []buildLogEntry
	for t.Context().Err() == nil { // until it ends, or the test's deadline

		code, out, _ := f.do(t, "GET", fmt.Sprintf("/templates/%s/builds/%s/status?logsOffset=%d", tpl, id, len(all)), "")
		if code != http.StatusOK {
			t.Fatalf("build status = %d %s", code, out)
		}
		var st buildInfo
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		all = append(all, st.LogEntries...)
		if (st.Status == statusReady || st.Status == statusError) && len(st.LogEntries) == 0 {
			return st, all
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the build did not end before the test's deadline")
	return buildInfo{}, nil
}

// TestTemplateBuild drives a build as the SDK's Template.build does:
// request, upload link, upload, start, status until ready.
func TestTemplateBuild(t *testing.T) {
	f, b, _ := newTemplateFixture(t)
	code, out, _ := f.do(t, "POST", "/v3/templates", `{"name": "my-tpl:v1", "tags": ["stable"], "cpuCount": 2, "memoryMB": 1024}`)
	if code != http.StatusAccepted {
		t.Fatalf("POST /v3/templates = %d %s; want 202", code, out)
	}
	var req templateRequested
	if err := json.Unmarshal([]byte(out), &req); err != nil {
		t.Fatal(err)
	}
	if req.TemplateID != "my-tpl" || req.BuildID == "" || !slices.Equal(req.Tags, []string{"v1", "stable"}) || !slices.Equal(req.Names, []string{"my-tpl"}) {
		t.Errorf("POST /v3/templates = %+v; want template my-tpl, a build ID and tags v1, stable", req)
	}

	const hash = "0a1b2c"
	code, out, _ = f.do(t, "GET", "/templates/my-tpl/files/"+hash, "")
	var link fileUpload
	if err := json.Unmarshal([]byte(out), &link); err != nil || code != http.StatusCreated || link.Present || link.URL == nil {
		t.Fatalf("upload link = %d %s; want 201, not present, with a URL", code, out)
	}
	u, err := url.Parse(*link.URL)
	if err != nil || u.Path != "/templates/my-tpl/files/"+hash {
		t.Fatalf("upload URL %q; want the daemon's own files route", *link.URL)
	}
	code, out, _ = f.do(t, "PUT", u.RequestURI(), string(tgz(t, map[string]string{"app/main.py": "print('hi')\n", "app/util.py": "x = 1\n", "notes.txt": "n"})))
	if code != http.StatusOK {
		t.Fatalf("PUT upload = %d %s; want 200", code, out)
	}
	if code, out, _ = f.do(t, "GET", "/templates/my-tpl/files/"+hash, ""); !strings.Contains(out, `"present":true`) {
		t.Errorf("upload link after the upload = %d %s; want present", code, out)
	}

	steps := `{"fromImage": "host", "force": false, "steps": [
		{"type": "ENV", "args": ["A", "1", "B", "2"], "force": false},
		{"type": "WORKDIR", "args": ["/srv"], "force": false},
		{"type": "COPY", "args": ["app", "app/", "", "0755"], "filesHash": "` + hash + `", "force": false},
		{"type": "COPY", "args": ["*.txt", "/docs", "root", ""], "filesHash": "` + hash + `", "force": false},
		{"type": "RUN", "args": ["make"], "force": false},
		{"type": "USER", "args": ["root"], "force": false},
		{"type": "RUN", "args": ["apt-get update", "user"], "force": false}
	]}`
	code, out, _ = f.do(t, "POST", "/v2/templates/my-tpl/builds/"+req.BuildID, steps)
	if code != http.StatusAccepted {
		t.Fatalf("start build = %d %s; want 202", code, out)
	}
	st, entries := waitBuild(t, f, "my-tpl", req.BuildID)
	if st.Status != statusReady {
		t.Fatalf("build status %+v; want ready", st)
	}
	var msgs []string
	for _, e := range entries {
		msgs = append(msgs, e.Step+": "+e.Message)
	}
	for _, want := range []string{"base: [1/3] user user, workdir /home/user", "2: compiling", "2: linking done", "finalize: template my-tpl built"} {
		if !slices.Contains(msgs, want) {
			t.Errorf("build log %q lacks %q", msgs, want)
		}
	}
	if code, out, _ := f.do(t, "POST", "/v2/templates/my-tpl/builds/"+req.BuildID, steps); code != http.StatusConflict {
		t.Errorf("starting a finished build again = %d %s; want 409", code, out)
	}

	b.mu.Lock()
	o := b.opts[0]
	files := b.files
	b.mu.Unlock()
	sp := o.Spec
	if sp.Name != "my-tpl" || sp.From != "host" || sp.User != "" || sp.Workdir != "/srv" || sp.Env["A"] != "1" || sp.Env["B"] != "2" ||
		sp.Resources.CPUs != 2 || sp.Resources.Memory != 1<<30 || o.SpecFile != templateSpecFile {
		t.Errorf("built spec %+v (options %+v); want my-tpl from host, root, /srv, A and B, 2 CPUs, 1 GiB", sp, o)
	}
	var kinds []string
	for _, s := range sp.Steps {
		switch s.Kind {
		case spec.KindCopy:
			kinds = append(kinds, fmt.Sprintf("copy %s %s %s %s", s.Copy.Src, s.Copy.Dst, s.Copy.Owner, s.Copy.Mode))
		default:
			kinds = append(kinds, fmt.Sprintf("run[%s@%s] %.20s", s.User, s.Workdir, s.Run))
		}
	}
	want := []string{
		`run[@] PATH="$PATH:/usr/loc`, // make the user "user"
		`run[@] [ -d '/srv' ] || { m`,
		"copy " + hash + "/app /srv/app/ user 0755",
		"copy " + hash + "/notes.txt /docs  ",
		"run[user@/srv] make",
		"run[user@/srv] apt-get update",
	}
	if !slices.Equal(kinds, want) {
		t.Errorf("build steps\n%q\nwant\n%q", kinds, want)
	}
	if files[hash+"/app/main.py"] != "print('hi')\n" || files[hash+"/notes.txt"] != "n" {
		t.Errorf("build context %v; want the uploaded files under their hash", files)
	}

	// The result: an image tagged with the template's tags, listed,
	// described with its build, and removed by DELETE.
	for _, name := range []string{"my-tpl", "my-tpl:v1", "my-tpl:stable"} {
		if _, err := (fakeImages{f.m}).Get(context.Background(), name); err != nil {
			t.Errorf("image %s after the build: %v", name, err)
		}
	}
	code, out, _ = f.do(t, "GET", "/templates/my-tpl", "")
	var wb templateWithBuilds
	if err := json.Unmarshal([]byte(out), &wb); err != nil || code != http.StatusOK || len(wb.Builds) != 1 || wb.Builds[0].BuildID != req.BuildID || wb.Builds[0].Status != statusReady {
		t.Errorf("GET /templates/my-tpl = %d %s; want its one ready build", code, out)
	}
	code, out, _ = f.do(t, "GET", "/v2/templates", "")
	if code != http.StatusOK || !strings.Contains(out, `"templateID":"my-tpl","buildID":"`+req.BuildID+`"`) {
		t.Errorf("GET /v2/templates = %d %s; want my-tpl with its build", code, out)
	}
	if code, out, _ := f.do(t, "GET", "/templates/aliases/my-tpl", ""); code != http.StatusOK {
		t.Errorf("alias my-tpl = %d %s; want 200", code, out)
	}
	if code, out, _ := f.do(t, "GET", "/templates/aliases/nope", ""); code != http.StatusNotFound {
		t.Errorf("alias nope = %d %s; want 404", code, out)
	}
	// A build without tags leaves the earlier tags (on the earlier
	// image); DELETE removes them too.
	_, out, _ = f.do(t, "POST", "/v3/templates", `{"name": "my-tpl"}`)
	var again templateRequested
	_ = json.Unmarshal([]byte(out), &again)
	if code, out, _ := f.do(t, "POST", "/v2/templates/my-tpl/builds/"+again.BuildID, `{"fromImage": "host"}`); code != http.StatusAccepted {
		t.Fatalf("start a second build = %d %s", code, out)
	}
	waitBuild(t, f, "my-tpl", again.BuildID)
	if code, out, _ := f.do(t, "DELETE", "/templates/my-tpl", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE /templates/my-tpl = %d %s; want 204", code, out)
	}
	for _, name := range []string{"my-tpl", "my-tpl:v1", "my-tpl:stable"} {
		if _, err := (fakeImages{f.m}).Get(context.Background(), name); !errdefs.IsNotFound(err) {
			t.Errorf("image %s after DELETE: %v; want it removed", name, err)
		}
	}
	if code, out, _ := f.do(t, "GET", "/templates/my-tpl/files/"+hash, ""); code != http.StatusNotFound {
		t.Errorf("upload link of a deleted template = %d %s; want 404", code, out)
	}
}

// TestTemplateBuildFails: a failed step ends the build in error, with the
// step it came from.
func TestTemplateBuildFails(t *testing.T) {
	f, b, _ := newTemplateFixture(t)
	_, out, _ := f.do(t, "POST", "/v3/templates", `{"name": "broken"}`)
	var req templateRequested
	_ = json.Unmarshal([]byte(out), &req)
	b.fail = &build.StepError{Step: 4, Name: "run false", ExitCode: 1}
	steps := `{"fromImage": "host", "steps": [{"type": "RUN", "args": ["true"]}, {"type": "RUN", "args": ["false"]}]}`
	if code, out, _ := f.do(t, "POST", "/v2/templates/broken/builds/"+req.BuildID, steps); code != http.StatusAccepted {
		t.Fatalf("start build = %d %s", code, out)
	}
	st, _ := waitBuild(t, f, "broken", req.BuildID)
	// Step 4 of the build: after the spec's user and workdir and the
	// template's user "user" (both E2B's base) come RUN true (E2B step
	// 1) and RUN false (step 2).
	if st.Status != statusError || st.Reason == nil || st.Reason.Step != "2" || !strings.Contains(st.Reason.Message, "exit code 1") {
		t.Errorf("failed build status %+v (reason %+v); want error at step 2", st, st.Reason)
	}
	if _, err := (fakeImages{f.m}).Get(context.Background(), "broken"); !errdefs.IsNotFound(err) {
		t.Errorf("image of a failed build: %v; want none", err)
	}
}

// TestTemplateBuildRefuses: what cannot map onto a Corral build is
// refused with E2B's error body, naming it, and nothing is built.
func TestTemplateBuildRefuses(t *testing.T) {
	f, b, _ := newTemplateFixture(t)
	for _, tc := range []struct{ body, want string }{
		{`{}`, "name is required"},
		{`{"name": "team/x"}`, "namespace"},
		{`{"name": "Bad Name"}`, `Bad Name`},
		{`{"name": "x", "memoryMB": 1}`, "memoryMB"},
	} {
		code, out, _ := f.do(t, "POST", "/v3/templates", tc.body)
		wantError(t, "POST /v3/templates "+tc.body, code, out, http.StatusBadRequest)
		if !strings.Contains(out, tc.want) {
			t.Errorf("POST /v3/templates %s = %s; want it to name %q", tc.body, out, tc.want)
		}
	}
	code, out, _ := f.do(t, "POST", "/v3/templates", `{"name": "host"}`)
	wantError(t, "a template named as a Corral image", code, out, http.StatusConflict)

	_, out, _ = f.do(t, "POST", "/v3/templates", `{"name": "t"}`)
	var req templateRequested
	_ = json.Unmarshal([]byte(out), &req)
	for _, tc := range []struct{ body, want string }{
		{`{"fromImage": "host", "steps": [{"type": "ARG", "args": ["X"]}]}`, "steps[0] (ARG)"},
		{`{"fromImage": "host", "fromImageRegistry": {"type": "registry", "username": "u", "password": "p"}}`, "fromImageRegistry"},
		{`{"fromImage": "host", "steps": [{"type": "COPY", "args": ["a", "/a"], "filesHash": "beef"}]}`, "filesHash beef"},
		{`{"fromImage": "host", "steps": [{"type": "ENV", "args": ["A"]}]}`, "steps[0] (ENV)"},
		{`{"fromImage": "e2bdev/base:latest"}`, "corral e2b setup"},
		{`{"fromTemplate": "nope"}`, `fromTemplate`},
	} {
		code, out, _ := f.do(t, "POST", "/v2/templates/t/builds/"+req.BuildID, tc.body)
		if code != http.StatusBadRequest && code != http.StatusNotFound || !strings.Contains(out, tc.want) || !strings.Contains(out, `"code":`) {
			t.Errorf("start build %s = %d %s; want 400 or 404 in E2B's body naming %q", tc.body, code, out, tc.want)
		}
	}
	if code, out, _ := f.do(t, "POST", "/v2/templates/t/builds/no-such-build", `{"fromImage": "host"}`); code != http.StatusNotFound {
		t.Errorf("start an unknown build = %d %s; want 404", code, out)
	}
	if code, out, _ := f.do(t, "GET", "/templates/t/files/a.b", ""); code != http.StatusBadRequest {
		t.Errorf("files hash a.b = %d %s; want 400", code, out)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.opts) != 0 {
		t.Errorf("refused builds built %d images; want none", len(b.opts))
	}
}

// TestTemplateKeepsPrivilegeEscalation: a template built on an image that
// allows privilege escalation (the base template, for sudo) allows it
// too; one on another image does not.
func TestTemplateKeepsPrivilegeEscalation(t *testing.T) {
	f, b, _ := newTemplateFixture(t)
	f.m.mu.Lock()
	f.m.images["base"] = sandbox.Image{Name: "base", AllowPrivilegeEscalation: true}
	f.m.mu.Unlock()
	for _, tc := range []struct {
		name, from string
		want       bool
	}{
		{"on-base", `{"fromImage": "e2bdev/base"}`, true},
		{"on-base-template", `{"fromTemplate": "base"}`, true},
		{"on-host", `{"fromImage": "host"}`, false},
	} {
		_, out, _ := f.do(t, "POST", "/v3/templates", `{"name": "`+tc.name+`"}`)
		var req templateRequested
		_ = json.Unmarshal([]byte(out), &req)
		if code, out, _ := f.do(t, "POST", "/v2/templates/"+tc.name+"/builds/"+req.BuildID, tc.from); code != http.StatusAccepted {
			t.Fatalf("%s: start build = %d %s", tc.name, code, out)
		}
		waitBuild(t, f, tc.name, req.BuildID)
		b.mu.Lock()
		got := b.opts[len(b.opts)-1].Spec.AllowPrivilegeEscalation
		b.mu.Unlock()
		if got != tc.want {
			t.Errorf("%s: allow_privilege_escalation %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestListTemplates: v2 pages with X-Next-Token; v1 has every template in
// one answer.
func TestListTemplates(t *testing.T) {
	f, _, _ := newTemplateFixture(t)
	f.m.mu.Lock()
	for i := range 150 {
		n := fmt.Sprintf("img-%03d", i)
		f.m.images[n] = sandbox.Image{Name: n}
	}
	f.m.mu.Unlock()
	var all []templateJSON
	code, out, _ := f.do(t, "GET", "/templates", "")
	if err := json.Unmarshal([]byte(out), &all); err != nil || code != http.StatusOK || len(all) != 151 {
		t.Errorf("GET /templates = %d, %d templates; want all 151 (150 and host)", code, len(all))
	}
	code, out, h := f.do(t, "GET", "/v2/templates?limit=100", "")
	var page []templateJSON
	if err := json.Unmarshal([]byte(out), &page); err != nil || code != http.StatusOK || len(page) != 100 || h.Get("X-Next-Token") == "" {
		t.Errorf("GET /v2/templates = %d, %d templates, next %q; want a page of 100 and a next token", code, len(page), h.Get("X-Next-Token"))
	}
}
