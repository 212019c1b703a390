package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/image"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// newLifeFixture is a fixture whose Manager has a state directory (for
// memory state) and records snapshots in both image stores: the Manager's
// (to create from them) and the API's (to list and remove them).
func newLifeFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixture(t, "", func(f *fixture, cfg *sandbox.ManagerConfig) {
		f.env.StateDir = t.TempDir()
		cfg.StateDir = f.env.StateDir
		f.env.Snapshots.AddFn = func(_ context.Context, img sandbox.Image) error {
			f.images.mu.Lock()
			defer f.images.mu.Unlock()
			if _, ok := f.images.images[img.Name]; ok {
				return fmt.Errorf("image %q: %w", img.Name, errdefs.ErrAlreadyExists)
			}
			f.images.images[img.Name] = image.Info{Image: img, ID: img.TopLayer, Source: image.SourceSnapshot, Reference: img.Origin}
			return nil
		}
	})
}

// bareRuntime hides the optional capabilities (pause, checkpoint) of the
// runtime it holds.
type bareRuntime struct{ sandbox.Runtime }

// create makes a sandbox through the API and returns it.
func (f *fixture) create(t *testing.T, body string) rest.Sandbox {
	t.Helper()
	code, resp := f.do(t, "POST", "/v1/sandboxes", body)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/sandboxes %s = %d %s; want 201", body, code, resp)
	}
	var sb rest.Sandbox
	if err := json.Unmarshal([]byte(resp), &sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

// state returns the sandbox's state through the API.
func (f *fixture) state(t *testing.T, id string) rest.Sandbox {
	t.Helper()
	code, body := f.do(t, "GET", "/v1/sandboxes/"+id, "")
	if code != 200 {
		t.Fatalf("GET /v1/sandboxes/%s = %d %s", id, code, body)
	}
	var sb rest.Sandbox
	if err := json.Unmarshal([]byte(body), &sb); err != nil {
		t.Fatal(err)
	}
	return sb
}

func TestLifecycleRoutes(t *testing.T) {
	f := newLifeFixture(t)
	sb := f.create(t, `{"name":"box","resources":{"disk_bytes":67108864},"timeout_seconds":600,"idle_timeout_seconds":300,"idle_action":"remove","labels":{"a":"b"}}`)
	if sb.TimeoutSeconds != 600 || sb.IdleTimeoutSeconds != 300 || sb.IdleAction != "remove" {
		t.Errorf("created sandbox timeouts = %d, %d, %q; want 600, 300, remove", sb.TimeoutSeconds, sb.IdleTimeoutSeconds, sb.IdleAction)
	}
	if err := f.env.Layers.WriteFile(sb.ID, "/marker", "prepared"); err != nil {
		t.Fatal(err)
	}
	if d := f.create(t, `{"idle_timeout_seconds":60}`); d.IdleAction != "suspend" {
		t.Errorf("idle action without idle_action = %q; want suspend", d.IdleAction)
	}

	tests := []struct {
		name, method, path, body string
		wantCode                 int
		wantErr                  string // rest error code, or "" for success
		wantBody                 string // substring
	}{
		{"bad idle action", "POST", "/v1/sandboxes", `{"idle_timeout_seconds":5,"idle_action":"sleep"}`, 400, "invalid_argument", "idle_action"},
		{"negative idle timeout", "POST", "/v1/sandboxes", `{"idle_timeout_seconds":-1}`, 400, "invalid_argument", "idle_timeout_seconds"},
		{"pause", "POST", "/v1/sandboxes/box/pause", "", 200, "", `"state": "paused"`},
		{"pause again", "POST", "/v1/sandboxes/box/pause", "", 200, "", `"state": "paused"`},
		{"get paused has usage", "GET", "/v1/sandboxes/box", "", 200, "", `"usage"`},
		{"resume", "POST", "/v1/sandboxes/box/resume", "", 200, "", `"state": "running"`},
		{"resume running", "POST", "/v1/sandboxes/box/resume", "", 200, "", `"state": "running"`},
		{"pause unknown", "POST", "/v1/sandboxes/nope/pause", "", 404, "not_found", "nope"},
		{"keepalive", "POST", "/v1/sandboxes/box/keepalive", `{"timeout_seconds":7200}`, 200, "", `"deadline"`},
		{"keepalive empty body", "POST", "/v1/sandboxes/box/keepalive", "", 200, "", `"deadline"`},
		{"keepalive negative", "POST", "/v1/sandboxes/box/keepalive", `{"timeout_seconds":-5}`, 400, "invalid_argument", "timeout_seconds"},
		{"keepalive bad field", "POST", "/v1/sandboxes/box/keepalive", `{"timeout":"10m"}`, 400, "invalid_argument", "timeout"},
		{"suspend fs only", "POST", "/v1/sandboxes/box/suspend", `{"filesystem_only":true}`, 200, "", `"memory": false`},
		{"suspend again", "POST", "/v1/sandboxes/box/suspend", "", 200, "", `"state": "suspended"`},
		{"pause suspended", "POST", "/v1/sandboxes/box/pause", "", 412, "failed_precondition", "suspended"},
		{"resume suspended", "POST", "/v1/sandboxes/box/resume", "", 200, "", `"state": "running"`},
		{"suspend memory", "POST", "/v1/sandboxes/box/suspend", "{}", 200, "", `"memory": true`},
		{"resume memory", "POST", "/v1/sandboxes/box/resume", "", 200, "", `"state": "running"`},
		{"snapshot", "POST", "/v1/sandboxes/box/snapshot", `{"name":"snap-1"}`, 201, "", `"origin": "` + sb.ID + `"`},
		{"snapshot dup", "POST", "/v1/sandboxes/box/snapshot", `{"name":"snap-1"}`, 409, "already_exists", "snap-1"},
		{"snapshot no name", "POST", "/v1/sandboxes/box/snapshot", `{}`, 400, "invalid_argument", "name is required"},
		{"snapshot bad name", "POST", "/v1/sandboxes/box/snapshot", `{"name":"Bad Name"}`, 400, "invalid_argument", "image name"},
		{"snapshots", "GET", "/v1/snapshots", "", 200, "", `"disk_bytes": 67108864`},
		{"images show the snapshot", "GET", "/v1/images", "", 200, "", `"source": "snapshot"`},
		{"create from snapshot", "POST", "/v1/sandboxes", `{"image":"snap-1","name":"from-snap"}`, 201, "", `"origin": "snap-1"`},
		{"rm non-snapshot", "DELETE", "/v1/snapshots/busybox", "", 400, "invalid_argument", "not a snapshot"},
		{"rm unknown snapshot", "DELETE", "/v1/snapshots/nope", "", 404, "not_found", "nope"},
		{"rm snapshot", "DELETE", "/v1/snapshots/snap-1", "", 204, "", ""},
		{"snapshots empty", "GET", "/v1/snapshots", "", 200, "", `"snapshots": []`},
		{"fork", "POST", "/v1/sandboxes/box/fork", `{"count":2,"labels":{"copy":"yes"}}`, 201, "", `"copy": "yes"`},
		{"fork empty body", "POST", "/v1/sandboxes/box/fork", "", 201, "", `"origin": "` + sb.ID + `"`},
		{"fork memory", "POST", "/v1/sandboxes/box/fork", `{"memory_state":true}`, 201, "", `"origin": "` + sb.ID + `"`},
		{"fork too many", "POST", "/v1/sandboxes/box/fork", `{"count":65}`, 400, "invalid_argument", "count"},
		{"fork unknown", "POST", "/v1/sandboxes/nope/fork", "", 404, "not_found", "nope"},
		{"pools empty", "GET", "/v1/pools", "", 200, "", `"pools": []`},
		{"pool no image", "PUT", "/v1/pools", `{"size":2}`, 400, "invalid_argument", "image"},
		{"pool too big", "PUT", "/v1/pools", `{"image":"busybox","size":5000}`, 400, "invalid_argument", "size"},
		{"pool unknown image", "PUT", "/v1/pools", `{"image":"nope","size":1}`, 404, "not_found", "nope"},
		{"rm unknown pool", "DELETE", "/v1/pools/pool-nope", "", 404, "not_found", "pool-nope"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, tc.body)
			if code != tc.wantCode {
				t.Fatalf("%s %s %s = %d %s; want %d", tc.method, tc.path, tc.body, code, body, tc.wantCode)
			}
			if tc.wantErr != "" {
				if got := errCode(t, body); got != tc.wantErr {
					t.Errorf("%s %s error code = %q; want %q", tc.method, tc.path, got, tc.wantErr)
				}
			}
			if !strings.Contains(body, tc.wantBody) {
				t.Errorf("%s %s body = %s; want it to contain %q", tc.method, tc.path, body, tc.wantBody)
			}
		})
	}
	if b, _ := f.env.Runtime.Get(sb.ID); b.Status != sandbox.StatusRunning {
		t.Errorf("sandbox %s is %s in the runtime after resume; want running", sb.ID, b.Status)
	}

	// Every sandbox made above is removed with what it owns.
	code, body := f.do(t, "GET", "/v1/sandboxes", "")
	var l rest.SandboxList
	if err := json.Unmarshal([]byte(body), &l); code != 200 || err != nil {
		t.Fatalf("list = %d %s", code, body)
	}
	if len(l.Sandboxes) != 7 { // box, idle, from-snap, 4 forks
		t.Errorf("list has %d sandboxes; want 7", len(l.Sandboxes))
	}
	for _, s := range l.Sandboxes {
		if s.Origin == "" {
			continue
		}
		// Copies (of the snapshot or of box) have box's files.
		if files, _ := f.env.Layers.Files(s.ID); files["/marker"] != "prepared" {
			t.Errorf("sandbox %s (origin %s) has files %v; want box's /marker", s.ID, s.Origin, files)
		}
	}
	for _, s := range l.Sandboxes {
		if code, body := f.do(t, "DELETE", "/v1/sandboxes/"+s.ID, ""); code != 204 {
			t.Errorf("DELETE %s = %d %s", s.ID, code, body)
		}
	}
	if left := f.env.Empty(); left != "" {
		t.Errorf("after removing every sandbox, left: %s", left)
	}
}

// TestResumeReportsLostProcesses: a resume that cannot restore the saved
// processes answers running with processes_lost and its reason, which GET
// shows too.
func TestResumeReportsLostProcesses(t *testing.T) {
	f := newLifeFixture(t)
	sb := f.create(t, `{}`)
	if code, body := f.do(t, "POST", "/v1/sandboxes/"+sb.ID+"/suspend", "{}"); code != 200 {
		t.Fatalf("suspend = %d %s", code, body)
	}
	f.env.Runtime.RestoreFn = func(context.Context, string, *sandbox.Spec, string) error {
		return errors.New("criu: kernel changed")
	}
	for _, req := range [][2]string{{"POST", "/v1/sandboxes/" + sb.ID + "/resume"}, {"GET", "/v1/sandboxes/" + sb.ID}} {
		code, body := f.do(t, req[0], req[1], "")
		var got rest.Sandbox
		if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
			t.Fatalf("%s %s = %d %s", req[0], req[1], code, body)
		}
		if pl := got.ProcessesLost; got.State != "running" || pl == nil || !strings.Contains(pl.Reason, "criu: kernel changed") || pl.Time.IsZero() {
			t.Errorf("%s %s = state %s, processes_lost %+v; want running with the restore's error", req[0], req[1], got.State, pl)
		}
	}
}

func TestSuspendErrors(t *testing.T) {
	f := newLifeFixture(t)
	sb := f.create(t, `{"name":"tcp"}`)
	f.env.Runtime.Update(sb.ID, func(b *sandboxtest.Box) { b.NoCheckpoint = "established TCP connection to 10.0.0.1:443" })
	code, body := f.do(t, "POST", "/v1/sandboxes/tcp/suspend", "")
	if code != 412 || errCode(t, body) != "failed_precondition" || !strings.Contains(body, "filesystem only") {
		t.Errorf("suspend with an unsaveable box = %d %s; want 412 naming the filesystem-only way", code, body)
	}
	if st := f.state(t, sb.ID); st.State != "running" {
		t.Errorf("after a failed suspend the sandbox is %s; want running", st.State)
	}
	code, body = f.do(t, "POST", "/v1/sandboxes/tcp/fork", `{"memory_state":true}`)
	if code != 412 || errCode(t, body) != "failed_precondition" {
		t.Errorf("fork --memory-state of an unsaveable box = %d %s; want 412", code, body)
	}

	// Without the capabilities, the routes say so.
	plain := newFixture(t, "", func(f *fixture, cfg *sandbox.ManagerConfig) {
		cfg.Runtimes["fake"] = bareRuntime{f.env.Runtime}
		cfg.Snapshots = nil
	})
	plain.create(t, `{"name":"p"}`)
	for _, path := range []string{"/v1/sandboxes/p/pause", "/v1/sandboxes/p/fork"} {
		code, body := plain.do(t, "POST", path, "")
		if code != 501 || errCode(t, body) != "not_implemented" {
			t.Errorf("POST %s without the capability = %d %s; want 501", path, code, body)
		}
	}
	code, body = plain.do(t, "POST", "/v1/sandboxes/p/suspend", "")
	if code != 412 || !strings.Contains(body, "filesystem only") {
		t.Errorf("suspend with a runtime that cannot checkpoint = %d %s; want 412 naming the filesystem-only way", code, body)
	}
	code, body = plain.do(t, "POST", "/v1/sandboxes/p/snapshot", `{"name":"s"}`)
	if code != 501 || errCode(t, body) != "not_implemented" {
		t.Errorf("snapshot without a snapshot store = %d %s; want 501", code, body)
	}
}

func TestProxyAutoResume(t *testing.T) {
	f := newLifeFixture(t)
	for _, tc := range []struct {
		name, op, body string
	}{
		{"paused", "pause", ""},
		{"suspended", "suspend", ""},
		{"suspended fs only", "suspend", `{"filesystem_only":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sb := f.create(t, `{}`)
			if code, body := f.do(t, "POST", "/v1/sandboxes/"+sb.ID+"/"+tc.op, tc.body); code != 200 {
				t.Fatalf("%s = %d %s", tc.op, code, body)
			}
			code, body := f.do(t, "GET", "/v1/sandboxes/"+sb.ID+"/agent/health", "")
			if code != 200 || body != "agent ok" {
				t.Fatalf("GET agent/health of a %s sandbox = %d %q; want the agent's answer", tc.name, code, body)
			}
			<-f.agentReqs
			if st := f.state(t, sb.ID); st.State != "running" || st.Suspended != nil {
				t.Errorf("after a data-plane request the sandbox is %s (suspended %+v); want running", st.State, st.Suspended)
			}
			// By header too.
			if _, err := f.m.Pause(t.Context(), sb.ID); err != nil {
				t.Fatal(err)
			}
			if code, body := f.do(t, "POST", "/process.Process/List", "{}", SandboxIDHeader, sb.ID); code != 200 {
				t.Fatalf("process.Process/List of a paused sandbox = %d %s", code, body)
			}
			<-f.agentReqs
			if b, _ := f.env.Runtime.Get(sb.ID); b.Status != sandbox.StatusRunning {
				t.Errorf("sandbox is %s in the runtime after a request by header; want running", b.Status)
			}
		})
	}
}

// TestProxyDuringSuspend sends a request while the sandbox is being
// suspended: it waits for the suspend, then resumes the sandbox.
func TestProxyDuringSuspend(t *testing.T) {
	f := newLifeFixture(t)
	sb := f.create(t, `{}`)
	entered, release := make(chan struct{}), make(chan struct{})
	f.env.Runtime.CheckpointFn = func(context.Context, string, string, bool) error {
		close(entered)
		<-release
		return nil
	}
	suspended := make(chan error, 1)
	go func() {
		_, err := f.m.Suspend(context.Background(), sb.ID, sandbox.SuspendRequest{})
		suspended <- err
	}()
	<-entered
	if st := f.state(t, sb.ID); st.State != "suspending" {
		t.Fatalf("during the checkpoint the sandbox is %s; want suspending", st.State)
	}
	type answer struct {
		code int
		body string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := f.srv.Client().Get(f.srv.URL + "/v1/sandboxes/" + sb.ID + "/agent/health")
		if err != nil {
			got <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, string(b), err}
	}()
	time.Sleep(100 * time.Millisecond) // let the request find the sandbox suspending
	close(release)
	if err := <-suspended; err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if a := <-got; a.err != nil || a.code != 200 || a.body != "agent ok" {
		t.Fatalf("request during a suspend = %d %s, %v; want the agent's answer", a.code, a.body, a.err)
	}
	<-f.agentReqs
	if st := f.state(t, sb.ID); st.State != "running" {
		t.Errorf("after the request the sandbox is %s; want running", st.State)
	}
}

// TestIdle checks the idle policy end to end: an idle sandbox is
// suspended, a request resumes it, and a request in flight (a stream
// longer than the idle timeout) keeps it running until it ends.
func TestIdle(t *testing.T) {
	f := newLifeFixture(t)
	if err := f.m.Start(testutil.Context(t), nil); err != nil {
		t.Fatal(err)
	}
	sb := f.create(t, `{"idle_timeout_seconds":1}`)
	waitState(t, f, sb.ID, "suspended")
	if code, body := f.do(t, "GET", "/v1/sandboxes/"+sb.ID+"/agent/health", ""); code != 200 {
		t.Fatalf("request to an idle-suspended sandbox = %d %s", code, body)
	}
	<-f.agentReqs

	// A stream held open for twice the idle timeout.
	resp, err := f.srv.Client().Get(f.srv.URL + "/v1/sandboxes/" + sb.ID + "/agent/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	<-f.agentReqs
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != "first\n" {
		t.Fatalf("first chunk = %q, %v", line, err)
	}
	time.Sleep(2 * time.Second)
	if st := f.state(t, sb.ID); st.State != "running" {
		t.Errorf("with a stream in flight for 2s the sandbox (idle timeout 1s) is %s; want running", st.State)
	}
	close(f.release)
	if line, err := r.ReadString('\n'); err != nil || line != "last\n" {
		t.Fatalf("last chunk = %q, %v", line, err)
	}
	resp.Body.Close()
	waitState(t, f, sb.ID, "suspended")

	// Remove instead of suspend.
	rm := f.create(t, `{"idle_timeout_seconds":1,"idle_action":"remove"}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, _ := f.do(t, "GET", "/v1/sandboxes/"+rm.ID, "")
		if code == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle sandbox with idle_action remove still exists after 20s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitState polls the sandbox until it is in state want (20 s at most:
// this bounds a hang, it measures nothing).
func waitState(t *testing.T, f *fixture, id, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st := f.state(t, id)
		if st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s is %s after 20s; want %s", id, st.State, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestPools(t *testing.T) {
	f := newLifeFixture(t)
	if err := f.m.Start(testutil.Context(t), nil); err != nil {
		t.Fatal(err)
	}
	code, body := f.do(t, "PUT", "/v1/pools", `{"image":"busybox","size":1}`)
	var p rest.Pool
	if err := json.Unmarshal([]byte(body), &p); code != 200 || err != nil {
		t.Fatalf("PUT /v1/pools = %d %s", code, body)
	}
	if p.Key == "" || p.Image != "busybox" || p.Runtime != "fake" || p.Size != 1 || p.Resources.MemoryBytes == 0 {
		t.Errorf("pool = %+v; want key, busybox, fake, size 1, resolved limits", p)
	}
	// Wait for the pool to fill.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, body := f.do(t, "GET", "/v1/pools", "")
		var l rest.PoolList
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Pools) == 1 && l.Pools[0].Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool not ready after 20s: %s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pooled := f.env.Runtime.IDs()
	if len(pooled) != 1 {
		t.Fatalf("runtime holds %v; want the pool's one sandbox", pooled)
	}
	if code, body := f.do(t, "GET", "/v1/sandboxes", ""); code != 200 || strings.Contains(body, pooled[0]) {
		t.Errorf("list = %d %s; want the pooled sandbox hidden", code, body)
	}
	// no_pool makes a new sandbox; without it the pool's is handed out.
	if sb := f.create(t, `{"image":"busybox","no_pool":true}`); sb.ID == pooled[0] {
		t.Errorf("create with no_pool got the pooled sandbox %s", sb.ID)
	}
	if sb := f.create(t, `{"image":"busybox","name":"warm"}`); sb.ID != pooled[0] || sb.Name != "warm" {
		t.Errorf("create = %s %q; want the pooled sandbox %s named warm", sb.ID, sb.Name, pooled[0])
	}

	if code, body := f.do(t, "DELETE", "/v1/pools/"+p.Key, ""); code != 204 {
		t.Fatalf("DELETE /v1/pools/%s = %d %s", p.Key, code, body)
	}
	if code, body := f.do(t, "GET", "/v1/pools", ""); code != 200 || !strings.Contains(body, `"pools": []`) {
		t.Errorf("pools after DELETE = %d %s; want none", code, body)
	}
	// PUT with size 0 removes too.
	f.do(t, "PUT", "/v1/pools", `{"image":"host","size":1}`)
	if code, body := f.do(t, "PUT", "/v1/pools", `{"image":"host","size":0}`); code != 200 || !strings.Contains(body, `"size": 0`) {
		t.Errorf("PUT size 0 = %d %s", code, body)
	}
	if code, body := f.do(t, "GET", "/v1/pools", ""); code != 200 || !strings.Contains(body, `"pools": []`) {
		t.Errorf("pools after PUT size 0 = %d %s; want none", code, body)
	}
}

func TestInflight(t *testing.T) {
	var mu sync.Mutex
	touched := map[string]int{}
	f := newInflight(func(id string) { mu.Lock(); touched[id]++; mu.Unlock() })
	f.ticking = true // no goroutine: the test calls touchAll itself
	f.begin("a")
	f.begin("a")
	f.begin("b")
	f.end("b")
	if !f.touchAll() {
		t.Fatalf("touchAll with a request in flight = false; want true")
	}
	mu.Lock()
	got := fmt.Sprint(touched)
	mu.Unlock()
	if got != "map[a:1 b:1]" {
		t.Errorf("touched = %s; want a by touchAll, b by end", got)
	}
	f.end("a")
	f.end("a")
	f.mu.Lock()
	n := len(f.n)
	f.mu.Unlock()
	if n != 0 {
		t.Errorf("in flight after every end = %d; want 0", n)
	}
	if f.touchAll() {
		t.Errorf("touchAll with nothing in flight = true; want false (the goroutine ends)")
	}
}
