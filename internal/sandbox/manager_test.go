package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

func newManager(t *testing.T, env *sandboxtest.Env) *sandbox.Manager {
	t.Helper()
	m, err := sandbox.NewManager(env.Config())
	if err != nil {
		t.Fatalf("NewManager() = %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestCreateDefaults(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	rec, err := m.Create(ctx, sandbox.CreateRequest{Env: map[string]string{"A": "1", "PATH": "/x"}, Name: "box1"})
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	if len(rec.ID) != 12 || strings.Trim(rec.ID, "0123456789abcdef") != "" {
		t.Errorf("Create().ID = %q; want 12 lowercase hex digits", rec.ID)
	}
	want := sandbox.Resources{CPUs: 1, MemoryBytes: 1 << 30, DiskBytes: 10 << 30, Pids: 1024}
	if rec.Resources != want {
		t.Errorf("Create().Resources = %+v; want %+v", rec.Resources, want)
	}
	if rec.State != sandbox.StateRunning || rec.Image != "host" || rec.Runtime != "fake" {
		t.Errorf("Create() = state %s image %s runtime %s; want running host fake", rec.State, rec.Image, rec.Runtime)
	}
	b, ok := env.Runtime.Get(rec.ID)
	if !ok || b.Status != sandbox.StatusRunning {
		t.Fatalf("runtime box %s = %+v, %v; want running", rec.ID, b, ok)
	}
	if got, want := strings.Join(b.Spec.Env, " "), "A=1 PATH=/x"; got != want {
		t.Errorf("spec env = %q; want %q", got, want)
	}
	if b.Spec.Hostname != "box1" || b.Spec.Workdir != "" || b.Spec.User != "root" || len(b.Spec.Rootfs) != 1 {
		t.Errorf("spec = %+v; want hostname box1, empty workdir, user root, one rootfs mount", b.Spec)
	}
	if got := env.Store.IDs(); len(got) != 1 || got[0] != rec.ID {
		t.Errorf("records = %v; want [%s]", got, rec.ID)
	}
	for _, key := range []string{rec.ID, "box1"} {
		got, err := m.Get(ctx, key)
		if err != nil || got.ID != rec.ID {
			t.Errorf("Get(%q) = %v, %v; want %s", key, got.ID, err, rec.ID)
		}
	}
	if u, err := m.Usage(ctx, "box1"); err != nil || u.MemoryLimitBytes != 1<<30 {
		t.Errorf("Usage(box1) = %+v, %v; want memory limit 1 GiB", u, err)
	}
	if err := m.Delete(ctx, "box1", false); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	if left := env.Empty(); left != "" {
		t.Errorf("after Delete, left: %s", left)
	}
	if _, err := m.Get(ctx, rec.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Get(deleted) = %v; want not found", err)
	}
	if err := m.Delete(ctx, rec.ID, false); !errdefs.IsNotFound(err) {
		t.Errorf("Delete(deleted) = %v; want not found", err)
	}
}

// bigEnv returns n variables of size bytes each.
func bigEnv(n, size int) map[string]string {
	env := map[string]string{}
	for i := range n {
		env[fmt.Sprintf("V%d", i)] = strings.Repeat("x", size)
	}
	return env
}

func TestCreateValidation(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	if _, err := m.Create(ctx, sandbox.CreateRequest{Name: "taken"}); err != nil {
		t.Fatalf("Create(taken) = %v", err)
	}
	tests := []struct {
		name  string
		req   sandbox.CreateRequest
		class func(error) bool
		msg   string
	}{
		{"unknown image", sandbox.CreateRequest{Image: "nope"}, errdefs.IsNotFound, "known images: busybox, host"},
		{"bad image name", sandbox.CreateRequest{Image: "../x"}, errdefs.IsInvalidArgument, "image"},
		{"image as a snapshot", sandbox.CreateRequest{Snapshot: "busybox"}, errdefs.IsInvalidArgument, "busybox is an image, not a snapshot: use --image busybox"},
		{"image and snapshot", sandbox.CreateRequest{Image: "host", Snapshot: "busybox"}, errdefs.IsInvalidArgument, `image "host" and snapshot "busybox": give one of them`},
		{"user with a bad group", sandbox.CreateRequest{User: "0:"}, errdefs.IsInvalidArgument, "user"},
		{"negative memory", sandbox.CreateRequest{Resources: sandbox.Resources{MemoryBytes: -1}}, errdefs.IsInvalidArgument, "resources.memory_bytes"},
		{"tiny memory", sandbox.CreateRequest{Resources: sandbox.Resources{MemoryBytes: 1 << 20}}, errdefs.IsInvalidArgument, "resources.memory_bytes 1048576 (1 MiB) must be between 8 MiB and 4 TiB"},
		{"huge disk", sandbox.CreateRequest{Resources: sandbox.Resources{DiskBytes: 1 << 50}}, errdefs.IsInvalidArgument, "resources.disk_bytes 1125899906842624 (1024 TiB) must be between 16 MiB and 16 TiB"},
		{"tiny disk", sandbox.CreateRequest{Resources: sandbox.Resources{DiskBytes: 1 << 20}}, errdefs.IsInvalidArgument, "resources.disk_bytes"},
		{"few pids", sandbox.CreateRequest{Resources: sandbox.Resources{Pids: 2}}, errdefs.IsInvalidArgument, "resources.pids"},
		{"too many cpus", sandbox.CreateRequest{Resources: sandbox.Resources{CPUs: 9}}, errdefs.IsInvalidArgument, "resources.cpus"},
		{"negative cpus", sandbox.CreateRequest{Resources: sandbox.Resources{CPUs: -0.5}}, errdefs.IsInvalidArgument, "resources.cpus"},
		{"empty env key", sandbox.CreateRequest{Env: map[string]string{"": "x"}}, errdefs.IsInvalidArgument, "env: name is empty"},
		{"env key with =", sandbox.CreateRequest{Env: map[string]string{"A=B": "x"}}, errdefs.IsInvalidArgument, `env: name "A=B" contains '='`},
		{"env key with a space", sandbox.CreateRequest{Env: map[string]string{"A B": "x"}}, errdefs.IsInvalidArgument, `env: name "A B" contains white space`},
		{"env value with NUL", sandbox.CreateRequest{Env: map[string]string{"A": "se\x00cret"}}, errdefs.IsInvalidArgument, "env: value of \"A\""},
		{"env value over MAX_ARG_STRLEN", sandbox.CreateRequest{Env: map[string]string{"BIG": strings.Repeat("x", 128<<10)}}, errdefs.IsInvalidArgument, "env: variable BIG is 128.1 KiB, more than the 128 KiB"},
		{"env over 1 MiB", sandbox.CreateRequest{Env: bigEnv(10, 120<<10)}, errdefs.IsInvalidArgument, "env is 1.2 MiB, more than 1 MiB"},
		{"relative workdir", sandbox.CreateRequest{Workdir: "tmp"}, errdefs.IsInvalidArgument, "workdir"},
		{"unclean workdir", sandbox.CreateRequest{Workdir: "/tmp/../etc"}, errdefs.IsInvalidArgument, "workdir"},
		{"bad user", sandbox.CreateRequest{User: "root;rm"}, errdefs.IsInvalidArgument, "user"},
		{"bad name", sandbox.CreateRequest{Name: "a/b"}, errdefs.IsInvalidArgument, "name"},
		{"id-like name", sandbox.CreateRequest{Name: "0123456789ab"}, errdefs.IsInvalidArgument, "name"},
		{"taken name", sandbox.CreateRequest{Name: "taken"}, errdefs.IsAlreadyExists, "taken"},
		{"bad label", sandbox.CreateRequest{Labels: map[string]string{"-x": "1"}}, errdefs.IsInvalidArgument, "label key"},
		{"negative timeout", sandbox.CreateRequest{Timeout: -time.Second}, errdefs.IsInvalidArgument, "timeout"},
		{"unknown runtime", sandbox.CreateRequest{Runtime: "runsc"}, errdefs.IsInvalidArgument, "available: fake, other"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Create(ctx, tc.req)
			if err == nil || !tc.class(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("Create(%+v) = %v; want an error of the right class containing %q", tc.req, err, tc.msg)
			}
			if strings.Contains(fmt.Sprint(err), "se\x00cret") {
				t.Errorf("Create() error %q leaks an env value", err)
			}
		})
	}
	if got := len(env.Runtime.IDs()); got != 1 {
		t.Errorf("runtime sandboxes after rejected requests = %d; want 1", got)
	}
}

func TestCreateRollback(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name   string
		inject func(env *sandboxtest.Env)
	}{
		{"record", func(env *sandboxtest.Env) {
			env.Store.PutFn = func(context.Context, *sandbox.Record) error { return boom }
		}},
		{"prepare", func(env *sandboxtest.Env) {
			env.Layers.PrepareFn = func(context.Context, string, string, sandbox.PrepareOpts) error { return boom }
		}},
		{"runtime create", func(env *sandboxtest.Env) {
			env.Runtime.CreateFn = func(context.Context, string, *sandbox.Spec) error { return boom }
		}},
		{"start", func(env *sandboxtest.Env) {
			env.Runtime.StartFn = func(context.Context, string) error { return boom }
		}},
		{"agent ready", func(env *sandboxtest.Env) {
			env.Agents.ReadyFn = func(context.Context, string) error { return boom }
		}},
		{"agent never ready", func(env *sandboxtest.Env) {
			env.Agents.ReadyFn = func(ctx context.Context, _ string) error { <-ctx.Done(); return ctx.Err() }
		}},
		{"final record", func(env *sandboxtest.Env) {
			env.Store.PutFn = func(_ context.Context, r *sandbox.Record) error {
				if r.State == sandbox.StateRunning {
					return boom
				}
				return nil
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testutil.Context(t)
			env := sandboxtest.NewEnv()
			tc.inject(env)
			cfg := env.Config()
			cfg.ReadyTimeout = 50 * time.Millisecond
			m, err := sandbox.NewManager(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if _, err := m.Create(ctx, sandbox.CreateRequest{Name: "x"}); err == nil {
				t.Fatalf("Create() with %s failing = nil; want error", tc.name)
			}
			if left := env.Empty(); left != "" {
				t.Errorf("after failed Create, left: %s", left)
			}
			if l, _ := m.List(ctx); len(l) != 0 {
				t.Errorf("List() = %v; want empty", l)
			}
			// The name is free again.
			env.Store.PutFn, env.Layers.PrepareFn, env.Runtime.CreateFn, env.Runtime.StartFn, env.Agents.ReadyFn = nil, nil, nil, nil, nil
			if _, err := m.Create(ctx, sandbox.CreateRequest{Name: "x"}); err != nil {
				t.Errorf("Create() after rollback = %v", err)
			}
		})
	}
}

func TestCreateRequestCanceledRollsBack(t *testing.T) {
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	ctx, cancel := context.WithCancel(testutil.Context(t))
	var startCtxErr error
	env.Runtime.StartFn = func(ctx context.Context, _ string) error { startCtxErr = ctx.Err(); return nil }
	env.Agents.ReadyFn = func(ctx context.Context, _ string) error { cancel(); <-ctx.Done(); return ctx.Err() }
	if _, err := m.Create(ctx, sandbox.CreateRequest{}); !errors.Is(err, context.Canceled) {
		t.Errorf("Create() = %v; want context.Canceled", err)
	}
	if startCtxErr != nil {
		t.Errorf("Start ctx error = %v; want a ctx not tied to the request", startCtxErr)
	}
	if left := env.Empty(); left != "" {
		t.Errorf("after canceled Create, left: %s", left)
	}
}

func TestDeleteFailure(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	rec, err := m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	env.Runtime.DeleteFn = func(context.Context, string) error { return boom }
	if err := m.Delete(ctx, rec.ID, false); !errors.Is(err, boom) {
		t.Fatalf("Delete(no force) = %v; want boom", err)
	}
	got, err := m.Get(ctx, rec.ID)
	if err != nil || got.State != sandbox.StateError {
		t.Errorf("Get() after failed delete = %v, %v; want state error", got.State, err)
	}
	if err := m.Delete(ctx, rec.ID, true); err != nil {
		t.Fatalf("Delete(force) = %v", err)
	}
	if ids := env.Store.IDs(); len(ids) != 0 {
		t.Errorf("records after forced delete = %v; want none", ids)
	}
	if k := env.Layers.Keys(); len(k) != 0 {
		t.Errorf("layers after forced delete = %v; want none", k)
	}
}

func TestTimeout(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	deleted := make(chan string, 1)
	env.Runtime.DeleteFn = func(_ context.Context, id string) error { deleted <- id; return nil }
	rec, err := m.Create(ctx, sandbox.CreateRequest{Timeout: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Deadline.IsZero() {
		t.Errorf("Create().Deadline is zero; want set")
	}
	if id := <-deleted; id != rec.ID {
		t.Errorf("timeout deleted %s; want %s", id, rec.ID)
	}
	m.Close() // waits for the expiry to finish
	if left := env.Empty(); left != "" {
		t.Errorf("after timeout, left: %s", left)
	}
}

func TestCloseStopsTimers(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	if _, err := m.Create(ctx, sandbox.CreateRequest{Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	m.Close() // must not wait an hour
	if got := len(env.Runtime.IDs()); got != 1 {
		t.Errorf("sandboxes after Close = %d; want 1 (they outlive the daemon)", got)
	}
}

func TestRecover(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	put := func(rec sandbox.Record, status sandbox.Status) {
		rec.Runtime = "fake"
		rec.Image = "host"
		if err := env.Store.PutSandbox(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		env.Layers.Put(rec.ID, "host-layer")
		if status != "" {
			env.Runtime.Put(rec.ID, sandboxtest.Box{Status: status})
		}
	}
	put(sandbox.Record{ID: "aaaaaaaaaaa1", Name: "keep", State: sandbox.StateRunning}, sandbox.StatusRunning)
	put(sandbox.Record{ID: "aaaaaaaaaaa2", State: sandbox.StateRunning}, sandbox.StatusStopped)
	put(sandbox.Record{ID: "aaaaaaaaaaa3", State: sandbox.StateCreating}, sandbox.StatusCreated)
	put(sandbox.Record{ID: "aaaaaaaaaaa4", State: sandbox.StateRunning}, "")
	put(sandbox.Record{ID: "aaaaaaaaaaa5", State: sandbox.StateRunning}, sandbox.StatusRunning) // agent dead
	put(sandbox.Record{ID: "aaaaaaaaaaa6", State: sandbox.StateDeleting}, sandbox.StatusRunning)
	put(sandbox.Record{ID: "aaaaaaaaaaa7", State: sandbox.StateRunning, Deadline: time.Now().Add(-time.Second)}, sandbox.StatusRunning)
	put(sandbox.Record{ID: "aaaaaaaaaaa8", State: sandbox.StateRunning, Deadline: time.Now().Add(30 * time.Millisecond)}, sandbox.StatusRunning)
	put(sandbox.Record{ID: "aaaaaaaaaaa9", State: sandbox.StateRunning, Ephemeral: true}, sandbox.StatusRunning) // a build step's
	// Under corral-init, a running PID 1 is enough: asking the agent would
	// start one in every box.
	put(sandbox.Record{ID: "aaaaaaaaaaab", State: sandbox.StateRunning, Spec: &sandbox.Spec{InitBinary: "/x/corral-init"}}, sandbox.StatusRunning)
	env.Runtime.Put("bbbbbbbbbbb1", sandboxtest.Box{Status: sandbox.StatusRunning}) // orphan
	env.Layers.Put("bbbbbbbbbbb2", "host-layer")                                    // orphan
	env.Agents.ReadyFn = func(_ context.Context, addr string) error {
		if strings.HasSuffix(addr, "aaaaaaaaaaa5") || strings.HasSuffix(addr, "aaaaaaaaaaab") {
			return errors.New("connection refused")
		}
		return nil
	}
	m := newManager(t, env)
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	want := "[aaaaaaaaaaa1 aaaaaaaaaaa8 aaaaaaaaaaab]"
	if got := fmt.Sprint(env.Runtime.IDs()); got != want {
		t.Errorf("runtime sandboxes after Recover = %s; want %s", got, want)
	}
	if got := fmt.Sprint(env.Layers.Keys()); got != want {
		t.Errorf("layers after Recover = %s; want %s", got, want)
	}
	if got := fmt.Sprint(env.Store.IDs()); got != want {
		t.Errorf("records after Recover = %s; want %s", got, want)
	}
	if r, err := m.Get(ctx, "keep"); err != nil || r.ID != "aaaaaaaaaaa1" {
		t.Errorf("Get(keep) = %v, %v; want aaaaaaaaaaa1", r.ID, err)
	}
	// The re-armed timer removes aaaaaaaaaaa8.
	for i := 0; ; i++ {
		if _, err := m.Get(ctx, "aaaaaaaaaaa8"); errdefs.IsNotFound(err) {
			break
		}
		if i > 500 {
			t.Fatal("re-armed timeout did not remove aaaaaaaaaaa8")
		}
		time.Sleep(10 * time.Millisecond)
	}
	m.Close()
	if got := fmt.Sprint(env.Store.IDs()); got != "[aaaaaaaaaaa1 aaaaaaaaaaab]" {
		t.Errorf("records after timeout = %s; want [aaaaaaaaaaa1 aaaaaaaaaaab]", got)
	}
}

func TestNameUniqueConcurrent(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = m.Create(ctx, sandbox.CreateRequest{Name: "same"})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errdefs.IsAlreadyExists(err):
			t.Errorf("Create(same) = %v; want nil or already exists", err)
		}
	}
	if ok != 1 {
		t.Errorf("%d of %d concurrent Create(same) succeeded; want 1", ok, n)
	}
	if got := len(env.Runtime.IDs()); got != 1 {
		t.Errorf("runtime sandboxes = %d; want 1", got)
	}
}

func TestParallelSandboxes(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	// The first Create blocks in its readiness wait until the second one has
	// completed: this only finishes if creates run in parallel.
	second := make(chan struct{})
	first := make(chan struct{})
	var calls sync.Mutex
	n := 0
	env.Agents.ReadyFn = func(ctx context.Context, addr string) error {
		calls.Lock()
		n++
		me := n
		calls.Unlock()
		if me == 1 {
			close(first)
			select {
			case <-second:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := m.Create(ctx, sandbox.CreateRequest{})
		done <- err
	}()
	<-first
	if _, err := m.Create(ctx, sandbox.CreateRequest{}); err != nil {
		t.Fatalf("second Create() = %v", err)
	}
	if l, _ := m.List(ctx); len(l) != 2 {
		t.Errorf("List() while first create is waiting = %d sandboxes; want 2", len(l))
	}
	close(second)
	if err := <-done; err != nil {
		t.Fatalf("first Create() = %v", err)
	}
}

// TestCommit: the commit hook runs once the runtime has deleted the
// sandbox and before its writable layer goes; its error is returned and
// the sandbox is gone either way; a failed runtime delete skips the hook.
func TestCommit(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	rec, err := m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	hookErr := errors.New("commit failed")
	err = m.Commit(ctx, rec.ID, func(ctx context.Context, key string) error {
		got = key
		if _, ok := env.Runtime.Get(rec.ID); ok {
			t.Error("commit hook ran while the runtime still had the sandbox")
		}
		if !slices.Contains(env.Layers.Keys(), key) {
			t.Error("commit hook ran after the writable layer was removed")
		}
		return hookErr
	})
	if !errors.Is(err, hookErr) || got != rec.ID {
		t.Fatalf("Commit = %v with key %q; want the hook's error and key %q", err, got, rec.ID)
	}
	if _, err := m.Get(ctx, rec.ID); !errdefs.IsNotFound(err) {
		t.Errorf("Get after Commit = %v; want NotFound", err)
	}
	if k := env.Layers.Keys(); len(k) != 0 {
		t.Errorf("layers after Commit = %v; want none", k)
	}

	rec, err = m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	env.Runtime.DeleteFn = func(context.Context, string) error { return boom }
	called := false
	if err := m.Commit(ctx, rec.ID, func(context.Context, string) error { called = true; return nil }); !errors.Is(err, boom) || called {
		t.Errorf("Commit with a failing runtime = %v (hook called %v); want boom and no hook", err, called)
	}
}

// TestCreateUnderInitLeavesAgentIdle: under corral-init a new box is ready
// once PID 1 runs; the daemon asks for the agent only when it needs it (to
// install a CA certificate), and then has corral-init start it at once.
func TestCreateUnderInitLeavesAgentIdle(t *testing.T) {
	ctx := testutil.Context(t)
	var readies, installs atomic.Int32
	ready := error(nil)
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) {
		cfg.InitBinary = "/x/corral-init"
		cfg.Network = &sandboxtest.Networker{CA: []byte("pem")}
		cfg.ReadyTimeout = 50 * time.Millisecond
	})
	env.Agents.ReadyFn = func(context.Context, string) error { readies.Add(1); return ready }
	env.Agents.WriteFileFn = func(_ context.Context, _, path string, _ []byte) error {
		if path == sandbox.CACertPath {
			installs.Add(1)
		}
		return nil
	}
	spec := func(id string) sandbox.Spec {
		t.Helper()
		b, ok := env.Runtime.Get(id)
		if !ok {
			t.Fatalf("sandbox %s is not in the runtime", id)
		}
		return b.Spec
	}

	plain := mustCreate(t, m, sandbox.CreateRequest{})
	if n := readies.Load(); n != 0 {
		t.Errorf("Ready calls for a box without network = %d; want 0", n)
	}
	if s := spec(plain.ID); s.StartAgent || s.InitBinary == "" {
		t.Errorf("spec of a box without network: StartAgent %v, InitBinary %q; want false and set", s.StartAgent, s.InitBinary)
	}

	netted := mustCreate(t, m, sandbox.CreateRequest{Network: &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"example.com"}}})
	if r, i := readies.Load(), installs.Load(); r != 1 || i != 1 {
		t.Errorf("box with a CA: Ready calls %d, CA installs %d; want 1 and 1", r, i)
	}
	if s := spec(netted.ID); !s.StartAgent {
		t.Errorf("spec of a box with a network: StartAgent false; want true")
	}

	// An agent that does not come up fails only the create that needs it.
	ready = errors.New("boom")
	if _, err := m.Create(ctx, sandbox.CreateRequest{Network: &netpolicy.Settings{Mode: netpolicy.ModeFull}}); err == nil || !strings.Contains(err.Error(), "wait for agent") {
		t.Errorf("Create(network) with the agent failing = %v; want a wait-for-agent error", err)
	}
	if _, err := m.Create(ctx, sandbox.CreateRequest{}); err != nil {
		t.Errorf("Create() with the agent failing = %v; want nil (the agent starts on the first request)", err)
	}
}

// TestInstallCA: a box's CA certificate goes to its own file and is
// appended to the image's system bundle (made when there is none); a
// bundle that cannot be read is left as it is, and the box still starts.
func TestInstallCA(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) {
		cfg.Network = &sandboxtest.Networker{CA: []byte("CA\n")}
	})
	netted := &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"example.com"}}
	file := func(rec sandbox.Record, path string) string {
		b, ok := env.Agents.File(rec.AgentAddr, path)
		if !ok {
			return "<none>"
		}
		return string(b)
	}
	var readErr error
	var bundle []byte
	env.Agents.ReadFileFn = func(_ context.Context, _, path string) ([]byte, error) {
		if path != sandbox.CABundlePath {
			return nil, fmt.Errorf("read %s: %w", path, errdefs.ErrNotFound)
		}
		return bundle, readErr
	}
	for _, tc := range []struct {
		name       string
		bundle     []byte
		readErr    error
		wantBundle string
	}{
		{"bundle", []byte("SYS"), nil, "SYS\nCA\n"},
		{"no bundle", nil, fmt.Errorf("read: %w", errdefs.ErrNotFound), "CA\n"},
		{"unreadable bundle", nil, fmt.Errorf("read: %w", errdefs.ErrUnavailable), "<none>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle, readErr = tc.bundle, tc.readErr
			rec, err := m.Create(ctx, sandbox.CreateRequest{Network: netted})
			if err != nil {
				t.Fatalf("Create() = %v", err)
			}
			if got := file(rec, sandbox.CACertPath); got != "CA\n" {
				t.Errorf("%s = %q; want the CA", sandbox.CACertPath, got)
			}
			if got := file(rec, sandbox.CABundlePath); got != tc.wantBundle {
				t.Errorf("%s = %q; want %q", sandbox.CABundlePath, got, tc.wantBundle)
			}
		})
	}
}

func TestLookupByIDPrefix(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	for _, rec := range []sandbox.Record{
		{ID: "199b00000001", Name: "web"},
		{ID: "2a0000000001"},
		{ID: "2a0000000002", Name: "db"},
		{ID: "3c0000000001", Name: "2a"}, // a name that is also a prefix of other IDs
	} {
		rec.Runtime, rec.Image, rec.State = "fake", "host", sandbox.StateRunning
		if err := env.Store.PutSandbox(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		env.Layers.Put(rec.ID, "host-layer")
		env.Runtime.Put(rec.ID, sandboxtest.Box{Status: sandbox.StatusRunning})
	}
	m := newManager(t, env)
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	for _, tc := range []struct {
		arg, want string
	}{
		{"199b00000001", "199b00000001"}, // exact ID
		{"199b", "199b00000001"},         // unique prefix
		{"1", "199b00000001"},
		{"web", "199b00000001"},          // name
		{"2a00000000", ""},               // ambiguous
		{"2a0000000002", "2a0000000002"}, // exact ID among prefix siblings
		{"2a", "3c0000000001"},           // an exact name wins over a prefix
		{"db", "2a0000000002"},
	} {
		rec, err := m.Get(ctx, tc.arg)
		if tc.want == "" {
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "2a0000000001, 2a0000000002 (db)") {
				t.Errorf("Get(%q) = %v, %v; want an invalid argument listing 2a0000000001, 2a0000000002 (db)", tc.arg, rec.ID, err)
			}
			continue
		}
		if err != nil || rec.ID != tc.want {
			t.Errorf("Get(%q) = %q, %v; want %s", tc.arg, rec.ID, err, tc.want)
		}
	}
	for _, arg := range []string{"4", "199c", "we", "199b000000012"} {
		if _, err := m.Get(ctx, arg); !errdefs.IsNotFound(err) {
			t.Errorf("Get(%q) = %v; want not found (names are never prefixes)", arg, err)
		}
	}
	// Every verb goes through the same lookup: a prefix removes the box.
	if err := m.Delete(ctx, "19", true); err != nil {
		t.Fatalf("Delete(19) = %v", err)
	}
	if _, err := m.Get(ctx, "199b00000001"); !errdefs.IsNotFound(err) {
		t.Errorf("Get after Delete(19) = %v; want not found", err)
	}
	// A new name may be a prefix of an ID.
	if _, err := m.Create(ctx, sandbox.CreateRequest{Name: "3c"}); err != nil {
		t.Errorf("Create(name 3c) = %v; want a name that prefixes an ID to be free", err)
	}
}

// TestRecoverWithoutRuntime checks that a daemon started without a box's
// runtime (binary missing, or refused for its version) keeps the boxes
// whose processes may run, in state error with the reason, rather than
// removing their records and disks under them; that rm removes them
// through the runtime's cleaner; that nothing drops a record when there is
// no cleaner; and that a daemon with the runtime back recovers them.
func TestRecoverWithoutRuntime(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	put := func(rec sandbox.Record, status sandbox.Status) {
		rec.Runtime, rec.Image = "gone", "host"
		if err := env.Store.PutSandbox(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		env.Layers.Put(rec.ID, "host-layer")
		if status != "" {
			env.Other.Put(rec.ID, sandboxtest.Box{Status: status})
		}
	}
	put(sandbox.Record{ID: "aaaaaaaaaaa1", Name: "running", State: sandbox.StateRunning}, sandbox.StatusRunning)
	put(sandbox.Record{ID: "aaaaaaaaaaa2", Name: "paused", State: sandbox.StatePaused}, sandbox.StatusPaused)
	put(sandbox.Record{ID: "aaaaaaaaaaa3", State: sandbox.StateSuspended}, "")
	put(sandbox.Record{ID: "aaaaaaaaaaa4", State: sandbox.StateCreating}, sandbox.StatusCreated)

	// The runtime "gone" is unavailable; env.Other stands for its cleaner.
	cfg := env.Config()
	delete(cfg.Runtimes, "other")
	cfg.Unavailable = map[string]sandbox.UnavailableRuntime{"gone": {Reason: "binary gone not found", Cleaner: env.Other}}
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	for id, want := range map[string]sandbox.RecordState{"aaaaaaaaaaa1": sandbox.StateRunning, "aaaaaaaaaaa2": sandbox.StatePaused} {
		r, err := m.Get(ctx, id)
		if err != nil || r.State != sandbox.StateError || r.ErrorFrom != want || !strings.Contains(r.Error, "runtime gone unavailable: binary gone not found") {
			t.Errorf("Get(%s) after Recover = %s (from %q, %q), %v; want state error from %s naming the runtime and why", id, r.State, r.ErrorFrom, r.Error, err, want)
		}
	}
	if r, err := m.Get(ctx, "aaaaaaaaaaa3"); err != nil || r.State != sandbox.StateSuspended {
		t.Errorf("Get(suspended) after Recover = %s, %v; want it kept suspended", r.State, err)
	}
	if got, want := fmt.Sprint(env.Store.IDs()), "[aaaaaaaaaaa1 aaaaaaaaaaa2 aaaaaaaaaaa3]"; got != want {
		t.Errorf("records after Recover = %s; want %s (the create cut short removed)", got, want)
	}
	if got, want := fmt.Sprint(env.Layers.Keys()), "[aaaaaaaaaaa1 aaaaaaaaaaa2 aaaaaaaaaaa3]"; got != want {
		t.Errorf("layers after Recover = %s; want %s: no disk removed under running processes", got, want)
	}
	if got, want := fmt.Sprint(env.Other.IDs()), "[aaaaaaaaaaa1 aaaaaaaaaaa2]"; got != want {
		t.Errorf("boxes in the runtime after Recover = %s; want %s", got, want)
	}
	if _, err := m.Resume(ctx, "aaaaaaaaaaa3"); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "binary gone not found") {
		t.Errorf("Resume(suspended) = %v; want a failed precondition naming why the runtime is unavailable", err)
	}
	if _, err := m.Create(ctx, sandbox.CreateRequest{Runtime: "gone"}); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "binary gone not found") {
		t.Errorf("Create(runtime gone) = %v; want a failed precondition naming why", err)
	}
	if err := m.Delete(ctx, "running", true); err != nil {
		t.Fatalf("Delete(running, force) = %v", err)
	}
	if _, ok := env.Other.Get("aaaaaaaaaaa1"); ok {
		t.Error("rm -f left the box in its runtime: its processes were not stopped")
	}
	m.Close()

	// Without a cleaner, not even force drops a record whose processes
	// may run.
	cfg.Unavailable = map[string]sandbox.UnavailableRuntime{"gone": {Reason: "binary gone not found"}}
	m, err = sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if err := m.Delete(ctx, "paused", true); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Delete(paused, force) with no cleaner = %v; want a failed precondition", err)
	}
	if r, err := m.Get(ctx, "paused"); err != nil || r.State != sandbox.StateError || r.ErrorFrom != sandbox.StatePaused {
		t.Errorf("Get(paused) after a refused removal = %s (from %q), %v; want it still there to recover", r.State, r.ErrorFrom, err)
	}
	m.Close()

	// The runtime is back: the box is recovered from the state it had.
	cfg.Runtimes["gone"] = env.Other
	cfg.Unavailable = nil
	m, err = sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if r, err := m.Get(ctx, "paused"); err != nil || r.State != sandbox.StatePaused || r.Error != "" || r.ErrorFrom != "" {
		t.Errorf("Get(paused) with the runtime back = %s (%q, from %q), %v; want paused again", r.State, r.Error, r.ErrorFrom, err)
	}
}

// TestObserve: Create, Resume and Fork report their latency and outcome
// (the daemon's /metrics).
func TestObserve(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	type call struct {
		op  string
		err bool
	}
	var got []call
	cfg := env.Config()
	cfg.Observe = func(op string, d time.Duration, err error) {
		if d < 0 {
			t.Errorf("Observe(%s) with a negative duration %v", op, d)
		}
		got = append(got, call{op, err != nil})
	}
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec, err := m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = m.Create(ctx, sandbox.CreateRequest{Image: "no-such-image"})
	if _, err := m.Pause(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resume(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	_, _ = m.Fork(ctx, "nope", sandbox.ForkRequest{})
	want := []call{{sandbox.OpCreate, false}, {sandbox.OpCreate, true}, {sandbox.OpResume, false}, {sandbox.OpFork, true}}
	if !slices.Equal(got, want) {
		t.Errorf("observed %v; want %v", got, want)
	}
}

// TestRemovalsGiveTheHeapBack: once the sandboxes drop to half of their
// peak the daemon's free heap is given back to the host (the Go runtime
// would keep it for reuse, and the daemon's RSS would stay at its peak);
// a few removals among many do not.
func TestRemovalsGiveTheHeapBack(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	cfg := env.Config()
	var freed atomic.Int32
	cfg.FreeMemory = func() { freed.Add(1) }
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 10 {
		rec, err := m.Create(ctx, sandbox.CreateRequest{})
		if err != nil {
			t.Fatalf("Create() = %v", err)
		}
		ids = append(ids, rec.ID)
	}
	for _, id := range ids[:4] { // 6 of 10 left: more than half
		if err := m.Delete(ctx, id, true); err != nil {
			t.Fatalf("Delete(%s) = %v", id, err)
		}
	}
	if err := m.Delete(ctx, ids[4], true); err != nil { // 5 of 10 left
		t.Fatal(err)
	}
	m.Close() // waits for the background work
	if n := freed.Load(); n != 1 {
		t.Errorf("heap given back %d times after 5 of 10 sandboxes were removed; want once", n)
	}
}
