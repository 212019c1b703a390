package sandbox_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// newLifecycle returns fakes with a state directory and a Manager on them;
// mods change the config first.
func newLifecycle(t *testing.T, mods ...func(*sandbox.ManagerConfig)) (*sandboxtest.Env, *sandbox.Manager) {
	t.Helper()
	env := sandboxtest.NewEnv()
	env.StateDir = t.TempDir()
	cfg := env.Config()
	for _, mod := range mods {
		mod(&cfg)
	}
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatalf("NewManager() = %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return env, m
}

// plainRuntime hides the optional interfaces of the Runtime it wraps.
type plainRuntime struct{ sandbox.Runtime }

func checkpointDir(env *sandboxtest.Env, id string) string {
	return filepath.Join(env.StateDir, "checkpoints", id)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// eventually polls cond until it holds, and fails the test if it does not
// within a deadline far beyond what any machine needs.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mustCreate(t *testing.T, m *sandbox.Manager, req sandbox.CreateRequest) sandbox.Record {
	t.Helper()
	rec, err := m.Create(testutil.Context(t), req)
	if err != nil {
		t.Fatalf("Create(%+v) = %v", req, err)
	}
	return rec
}

func runtimeStatus(env *sandboxtest.Env, id string) sandbox.Status {
	b, ok := env.Runtime.Get(id)
	if !ok {
		return "absent"
	}
	return b.Status
}

func state(t *testing.T, m *sandbox.Manager, id string) sandbox.RecordState {
	t.Helper()
	rec, err := m.Get(testutil.Context(t), id)
	if err != nil {
		t.Fatalf("Get(%s) = %v", id, err)
	}
	return rec.State
}

func setMemory(t *testing.T, env *sandboxtest.Env, id string, v int) {
	t.Helper()
	if !env.Runtime.Update(id, func(b *sandboxtest.Box) { b.Memory = v }) {
		t.Fatalf("runtime has no box %s", id)
	}
}

func TestPauseResume(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{Name: "p"})

	for i := range 2 { // the second Pause is a no-op
		got, err := m.Pause(ctx, "p")
		if err != nil || got.State != sandbox.StatePaused {
			t.Fatalf("Pause #%d = %s, %v; want paused", i+1, got.State, err)
		}
	}
	if s := runtimeStatus(env, rec.ID); s != sandbox.StatusPaused {
		t.Errorf("runtime status after Pause = %s; want paused", s)
	}
	if s := state(t, m, rec.ID); s != sandbox.StatePaused {
		t.Errorf("Get().State after Pause = %s; want paused", s)
	}
	if u, err := m.Usage(ctx, rec.ID); err != nil || u.Pids == 0 {
		t.Errorf("Usage(paused) = %+v, %v; want usage", u, err)
	}
	for i := range 2 { // the second Resume is a no-op
		got, err := m.Resume(ctx, "p")
		if err != nil || got.State != sandbox.StateRunning {
			t.Fatalf("Resume #%d = %s, %v; want running", i+1, got.State, err)
		}
	}
	if s := runtimeStatus(env, rec.ID); s != sandbox.StatusRunning {
		t.Errorf("runtime status after Resume = %s; want running", s)
	}
	recs, _ := env.Store.ListSandboxes(ctx)
	if len(recs) != 1 || recs[0].State != sandbox.StateRunning {
		t.Errorf("stored records after Resume = %v; want one running", recs)
	}

	if _, err := m.Pause(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Pause(unknown) = %v; want NotFound", err)
	}
	if _, err := m.Resume(ctx, "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Resume(unknown) = %v; want NotFound", err)
	}
}

func TestPauseErrors(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) {
		cfg.Runtimes["plain"] = plainRuntime{cfg.Runtimes["other"]}
	})
	rec := mustCreate(t, m, sandbox.CreateRequest{})

	t.Run("suspended", func(t *testing.T) {
		if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil {
			t.Fatal(err)
		}
		_, err := m.Pause(ctx, rec.ID)
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "suspended") {
			t.Errorf("Pause(suspended) = %v; want FailedPrecondition naming the state", err)
		}
		if s := state(t, m, rec.ID); s != sandbox.StateSuspended {
			t.Errorf("state after refused Pause = %s; want suspended", s)
		}
		if _, err := m.Resume(ctx, rec.ID); err != nil {
			t.Fatalf("Resume(suspended) = %v", err)
		}
	})
	t.Run("runtime fails", func(t *testing.T) {
		boom := errors.New("boom")
		env.Runtime.PauseFn = func(context.Context, string, bool) error { return boom }
		defer func() { env.Runtime.PauseFn = nil }()
		if _, err := m.Pause(ctx, rec.ID); !errors.Is(err, boom) {
			t.Errorf("Pause with a failing runtime = %v; want boom", err)
		}
		if s := state(t, m, rec.ID); s != sandbox.StateRunning {
			t.Errorf("state after failed Pause = %s; want running", s)
		}
	})
	t.Run("unpause fails", func(t *testing.T) {
		if _, err := m.Pause(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		env.Runtime.PauseFn = func(_ context.Context, _ string, paused bool) error {
			if !paused {
				return boom
			}
			return nil
		}
		defer func() { env.Runtime.PauseFn = nil }()
		if _, err := m.Resume(ctx, rec.ID); !errors.Is(err, boom) {
			t.Errorf("Resume with a failing unpause = %v; want boom", err)
		}
		if s := state(t, m, rec.ID); s != sandbox.StatePaused {
			t.Errorf("state after failed Resume = %s; want paused", s)
		}
		env.Runtime.PauseFn = nil
		if _, err := m.Resume(ctx, rec.ID); err != nil {
			t.Errorf("Resume = %v", err)
		}
	})
	t.Run("runtime cannot pause", func(t *testing.T) {
		r := mustCreate(t, m, sandbox.CreateRequest{Runtime: "plain"})
		if _, err := m.Pause(ctx, r.ID); !errdefs.IsNotImplemented(err) {
			t.Errorf("Pause on a runtime without Pauser = %v; want NotImplemented", err)
		}
		if _, err := m.Suspend(ctx, r.ID, sandbox.SuspendRequest{}); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "filesystem only") {
			t.Errorf("Suspend on a runtime without Checkpointer = %v; want FailedPrecondition suggesting filesystem only", err)
		}
		if s := state(t, m, r.ID); s != sandbox.StateRunning {
			t.Errorf("state = %s; want running", s)
		}
	})
}

func TestSuspendResumeMemory(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{})
	setMemory(t, env, rec.ID, 7)
	if err := env.Layers.WriteFile(rec.ID, "/root/a", "A"); err != nil {
		t.Fatal(err)
	}

	got, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{})
	if err != nil {
		t.Fatalf("Suspend() = %v", err)
	}
	if got.State != sandbox.StateSuspended || got.Suspended == nil || !got.Suspended.Memory || got.Suspended.MemoryBytes <= 0 {
		t.Fatalf("Suspend() = state %s, suspended %+v; want suspended with memory", got.State, got.Suspended)
	}
	if _, ok := env.Runtime.Get(rec.ID); ok {
		t.Errorf("runtime still has %s after Suspend", rec.ID)
	}
	dir := checkpointDir(env, rec.ID)
	if !exists(filepath.Join(dir, sandboxtest.CheckpointFile)) || !exists(filepath.Join(dir, "corral-complete")) {
		t.Errorf("checkpoint dir %s lacks the checkpoint or its completion marker", dir)
	}
	if f := env.Layers.Flushed(); !slices.Equal(f, []string{rec.ID}) {
		t.Errorf("disks flushed = %v; want the suspended box's (%s), once", f, rec.ID)
	}
	if d := env.Agents.Drops(); !slices.Contains(d, rec.AgentAddr) {
		t.Errorf("DropAgentConns calls = %v; want %s (before the checkpoint)", d, rec.AgentAddr)
	}
	if g, _ := m.Get(ctx, rec.ID); g.State != sandbox.StateSuspended || g.Suspended == nil || !g.Suspended.Memory {
		t.Errorf("Get() = %s %+v; want suspended with memory", g.State, g.Suspended)
	}
	if again, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil || again.State != sandbox.StateSuspended {
		t.Errorf("Suspend(suspended) = %s, %v; want suspended, nil", again.State, err)
	}
	if k := env.Layers.Keys(); !slices.Contains(k, rec.ID) {
		t.Errorf("layers = %v; want the suspended box's layer kept", k)
	}

	got, err = m.Resume(ctx, rec.ID)
	if err != nil || got.State != sandbox.StateRunning || got.Suspended != nil {
		t.Fatalf("Resume() = %s %+v, %v; want running", got.State, got.Suspended, err)
	}
	b, ok := env.Runtime.Get(rec.ID)
	if !ok || b.Status != sandbox.StatusRunning || b.Memory != 7 || b.Restored != dir {
		t.Errorf("runtime box after Resume = %+v, %v; want running, memory 7, restored from %s", b, ok, dir)
	}
	if exists(dir) {
		t.Errorf("checkpoint dir %s left after Resume", dir)
	}
	if f, _ := env.Layers.Files(rec.ID); f["/root/a"] != "A" {
		t.Errorf("files after Resume = %v; want /root/a", f)
	}

	// A paused box suspends too, and comes back running.
	if _, err := m.Pause(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	setMemory(t, env, rec.ID, 8)
	if got, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil || got.State != sandbox.StateSuspended {
		t.Fatalf("Suspend(paused) = %s, %v; want suspended", got.State, err)
	}
	// EnsureRunning (auto-resume) brings it back.
	if got, err := m.EnsureRunning(ctx, rec.ID); err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("EnsureRunning(suspended) = %s, %v; want running", got.State, err)
	}
	if b, _ := env.Runtime.Get(rec.ID); b.Memory != 8 || b.Status != sandbox.StatusRunning {
		t.Errorf("runtime box after EnsureRunning = %+v; want running with memory 8", b)
	}
}

func TestSuspendCheckpointFails(t *testing.T) {
	ctx := testutil.Context(t)
	const reason = "an established TCP connection to 10.0.0.1:443"
	for _, paused := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "paused"}[paused], func(t *testing.T) {
			env, m := newLifecycle(t)
			rec := mustCreate(t, m, sandbox.CreateRequest{})
			env.Runtime.Update(rec.ID, func(b *sandboxtest.Box) { b.NoCheckpoint = reason; b.Memory = 3 })
			want, wantStatus := sandbox.StateRunning, sandbox.StatusRunning
			if paused {
				if _, err := m.Pause(ctx, rec.ID); err != nil {
					t.Fatal(err)
				}
				want, wantStatus = sandbox.StatePaused, sandbox.StatusPaused
			}
			got, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{})
			if !errors.Is(err, sandbox.ErrCheckpoint) || !errdefs.IsFailedPrecondition(err) {
				t.Fatalf("Suspend() = %v; want an error wrapping ErrCheckpoint", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "filesystem only") || !strings.Contains(msg, reason) {
				t.Errorf("Suspend() error %q; want the reason and a hint at filesystem only", msg)
			}
			if got.State != want || state(t, m, rec.ID) != want {
				t.Errorf("state after failed Suspend = %s (Get %s); want %s", got.State, state(t, m, rec.ID), want)
			}
			if s := runtimeStatus(env, rec.ID); s != wantStatus {
				t.Errorf("runtime status after failed Suspend = %s; want %s", s, wantStatus)
			}
			if exists(checkpointDir(env, rec.ID)) {
				t.Errorf("checkpoint dir left after failed Suspend")
			}
			// Filesystem only still works.
			got, err = m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: true})
			if err != nil || got.State != sandbox.StateSuspended || got.Suspended.Memory {
				t.Fatalf("Suspend(filesystem only) = %s %+v, %v; want suspended without memory", got.State, got.Suspended, err)
			}
		})
	}
}

func TestSuspendFilesystemOnly(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{Name: "fs", Env: map[string]string{"A": "1"}})
	before, _ := env.Runtime.Get(rec.ID)
	setMemory(t, env, rec.ID, 5)
	if err := env.Layers.WriteFile(rec.ID, "/data", "kept"); err != nil {
		t.Fatal(err)
	}

	got, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: true})
	if err != nil || got.State != sandbox.StateSuspended || got.Suspended == nil || got.Suspended.Memory {
		t.Fatalf("Suspend(filesystem only) = %s %+v, %v; want suspended without memory", got.State, got.Suspended, err)
	}
	if _, ok := env.Runtime.Get(rec.ID); ok {
		t.Errorf("runtime still has %s", rec.ID)
	}
	if n := env.Runtime.Syncs(rec.ID); n == 0 {
		t.Errorf("Sync calls before a filesystem-only suspend = 0; want at least 1")
	}
	if exists(checkpointDir(env, rec.ID)) {
		t.Errorf("filesystem-only suspend made a checkpoint dir")
	}
	if f := env.Layers.Flushed(); !slices.Equal(f, []string{rec.ID}) {
		t.Errorf("disks flushed = %v; want the suspended box's (%s)", f, rec.ID)
	}

	got, err = m.Resume(ctx, "fs")
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("Resume() = %s, %v; want running", got.State, err)
	}
	after, ok := env.Runtime.Get(rec.ID)
	if !ok || after.Status != sandbox.StatusRunning || after.Memory != 0 || after.Restored != "" {
		t.Errorf("runtime box after Resume = %+v; want a fresh start (memory 0, not restored)", after)
	}
	if diff := cmp.Diff(before.Spec, after.Spec); diff != "" {
		t.Errorf("spec after Resume differs (-before +after):\n%s", diff)
	}
	if f, _ := env.Layers.Files(rec.ID); f["/data"] != "kept" {
		t.Errorf("files after Resume = %v; want /data kept", f)
	}
}

func TestSuspendWithoutStateDir(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv() // no StateDir
	m := newManager(t, env)
	rec := mustCreate(t, m, sandbox.CreateRequest{})
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("Suspend(memory) without a state dir = %v; want FailedPrecondition", err)
	}
	if s := runtimeStatus(env, rec.ID); s != sandbox.StatusRunning {
		t.Errorf("runtime status = %s; want running", s)
	}
	if got, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: true}); err != nil || got.State != sandbox.StateSuspended {
		t.Errorf("Suspend(filesystem only) without a state dir = %s, %v; want suspended", got.State, err)
	}
	if got, err := m.Resume(ctx, rec.ID); err != nil || got.State != sandbox.StateRunning {
		t.Errorf("Resume() = %s, %v; want running", got.State, err)
	}
}

func TestSuspendResumeCycles(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{})
	want := map[string]string{}
	for i := range 5 {
		name := "/cycle/" + string(rune('a'+i))
		if err := env.Layers.WriteFile(rec.ID, name, name); err != nil {
			t.Fatal(err)
		}
		want[name] = name
		setMemory(t, env, rec.ID, i+1)
		if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil {
			t.Fatalf("cycle %d: Suspend() = %v", i, err)
		}
		if _, err := m.Resume(ctx, rec.ID); err != nil {
			t.Fatalf("cycle %d: Resume() = %v", i, err)
		}
		b, _ := env.Runtime.Get(rec.ID)
		if b.Memory != i+1 {
			t.Errorf("cycle %d: memory after Resume = %d; want %d", i, b.Memory, i+1)
		}
		got, _ := env.Layers.Files(rec.ID)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("cycle %d: files (-want +got):\n%s", i, diff)
		}
	}
	if s := state(t, m, rec.ID); s != sandbox.StateRunning {
		t.Errorf("state after cycles = %s; want running", s)
	}
}

func TestResumeFailureKeepsSuspended(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{})
	setMemory(t, env, rec.ID, 4)
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	env.Agents.ReadyFn = func(context.Context, string) error { return boom }
	if _, err := m.Resume(ctx, rec.ID); !errors.Is(err, boom) {
		t.Fatalf("Resume with a dead agent = %v; want boom", err)
	}
	got, _ := m.Get(ctx, rec.ID)
	if got.State != sandbox.StateSuspended || got.Suspended == nil || !got.Suspended.Memory {
		t.Errorf("after failed Resume: %s %+v; want suspended with memory", got.State, got.Suspended)
	}
	if _, ok := env.Runtime.Get(rec.ID); ok {
		t.Errorf("runtime has %s after failed Resume", rec.ID)
	}
	env.Agents.ReadyFn = nil
	if _, err := m.Resume(ctx, rec.ID); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	if b, _ := env.Runtime.Get(rec.ID); b.Memory != 4 {
		t.Errorf("memory after Resume = %d; want 4", b.Memory)
	}
}

// TestResumeLosesProcesses: a resume whose restore fails starts a fresh
// agent on the saved files and records why in ProcessesLost; the next
// resume that brings the processes back clears it, and a resume of a box
// suspended without memory leaves it alone.
func TestResumeLosesProcesses(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{})
	setMemory(t, env, rec.ID, 5)
	if err := env.Layers.WriteFile(rec.ID, "/root/a", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil {
		t.Fatal(err)
	}
	env.Runtime.RestoreFn = func(context.Context, string, *sandbox.Spec, string) error {
		return errors.New("criu: kernel changed")
	}
	before := time.Now().Add(-time.Second)
	got, err := m.Resume(ctx, rec.ID)
	if err != nil || got.State != sandbox.StateRunning {
		t.Fatalf("Resume() with a failing restore = %s, %v; want running on a fresh agent", got.State, err)
	}
	pl := got.ProcessesLost
	if pl == nil || !strings.Contains(pl.Reason, "criu: kernel changed") || pl.Time.Before(before) {
		t.Fatalf("ProcessesLost = %+v; want the restore's error, now", pl)
	}
	if b, _ := env.Runtime.Get(rec.ID); b.Restored != "" || b.Memory != 0 {
		t.Errorf("runtime box = %+v; want a fresh start, not a restore", b)
	}
	if f, _ := env.Layers.Files(rec.ID); f["/root/a"] != "A" {
		t.Errorf("files after the fallback = %v; want /root/a", f)
	}
	if g, _ := m.Get(ctx, rec.ID); g.ProcessesLost == nil || g.ProcessesLost.Reason != pl.Reason {
		t.Errorf("Get().ProcessesLost = %+v; want %+v", g.ProcessesLost, pl)
	}
	// Filesystem only: nothing to bring back, the record stays.
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: true}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Resume(ctx, rec.ID); err != nil || got.ProcessesLost == nil {
		t.Errorf("Resume(filesystem-only) = %+v, %v; want ProcessesLost kept", got.ProcessesLost, err)
	}
	// Copies do not inherit it.
	copies, err := m.Fork(ctx, rec.ID, sandbox.ForkRequest{})
	if err != nil || len(copies) != 1 {
		t.Fatalf("Fork() = %v, %v", copies, err)
	}
	if copies[0].ProcessesLost != nil {
		t.Errorf("fork copy ProcessesLost = %+v; want nil", copies[0].ProcessesLost)
	}
	// A restore that works clears it.
	env.Runtime.RestoreFn = nil
	setMemory(t, env, rec.ID, 6)
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{}); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Resume(ctx, rec.ID); err != nil || got.ProcessesLost != nil {
		t.Errorf("Resume() restoring the processes = %+v, %v; want ProcessesLost cleared", got.ProcessesLost, err)
	}
	if b, _ := env.Runtime.Get(rec.ID); b.Memory != 6 {
		t.Errorf("memory after a working restore = %d; want 6", b.Memory)
	}
}

func TestRemoveSuspended(t *testing.T) {
	for _, fsOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "memory", true: "filesystem only"}[fsOnly], func(t *testing.T) {
			ctx := testutil.Context(t)
			env, m := newLifecycle(t)
			rec := mustCreate(t, m, sandbox.CreateRequest{})
			if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: fsOnly}); err != nil {
				t.Fatal(err)
			}
			if err := m.Delete(ctx, rec.ID, false); err != nil {
				t.Fatalf("Delete(suspended) = %v", err)
			}
			if left := env.Empty(); left != "" {
				t.Errorf("after Delete(suspended), left: %s", left)
			}
			if exists(checkpointDir(env, rec.ID)) {
				t.Errorf("checkpoint dir left")
			}
			if _, err := m.Get(ctx, rec.ID); !errdefs.IsNotFound(err) {
				t.Errorf("Get(removed) = %v; want NotFound", err)
			}
		})
	}
}

func TestSnapshot(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	src := mustCreate(t, m, sandbox.CreateRequest{Resources: sandbox.Resources{DiskBytes: 1 << 30}, Env: map[string]string{"A": "1"}})
	for _, f := range []string{"/a", "/b"} {
		if err := env.Layers.WriteFile(src.ID, f, "content of "+f); err != nil {
			t.Fatal(err)
		}
	}
	var statusDuringSave sandbox.Status
	env.Layers.SaveDiskFn = func(_ context.Context, key, _ string) error {
		statusDuringSave = runtimeStatus(env, key)
		return nil
	}
	img, err := m.Snapshot(ctx, src.ID, "snap1")
	if err != nil {
		t.Fatalf("Snapshot() = %v", err)
	}
	if img.Name != "snap1" || img.Disk == "" || img.DiskBytes != 1<<30 || img.Origin != src.ID || img.TopLayer != "host-layer" {
		t.Errorf("Snapshot() = %+v; want snap1 with a disk of 1 GiB from %s on host-layer", img, src.ID)
	}
	if statusDuringSave != sandbox.StatusPaused {
		t.Errorf("source status while its disk was saved = %s; want paused", statusDuringSave)
	}
	if env.Runtime.Syncs(src.ID) == 0 {
		t.Errorf("source was not synced before its disk was saved")
	}
	if s, st := runtimeStatus(env, src.ID), state(t, m, src.ID); s != sandbox.StatusRunning || st != sandbox.StateRunning {
		t.Errorf("source after Snapshot: runtime %s, record %s; want running", s, st)
	}
	if got, err := env.Images.Get(ctx, "snap1"); err != nil || got.Disk != img.Disk {
		t.Errorf("image snap1 = %+v, %v; want the snapshot", got, err)
	}

	cp := mustCreate(t, m, sandbox.CreateRequest{Image: "snap1"})
	if cp.Resources.DiskBytes != 1<<30 {
		t.Errorf("Create(snap1).Resources.DiskBytes = %d; want %d", cp.Resources.DiskBytes, 1<<30)
	}
	if n, _ := env.Layers.DiskBytes(cp.ID); n != 1<<30 {
		t.Errorf("layer disk size of the copy = %d; want %d", n, 1<<30)
	}
	srcFiles, _ := env.Layers.Files(src.ID)
	cpFiles, _ := env.Layers.Files(cp.ID)
	if diff := cmp.Diff(srcFiles, cpFiles); diff != "" {
		t.Errorf("files of the sandbox from the snapshot (-source +copy):\n%s", diff)
	}
	if b, _ := env.Runtime.Get(cp.ID); !slices.Contains(b.Spec.Env, "A=1") {
		t.Errorf("spec env of the copy = %v; want the source's A=1", b.Spec.Env)
	}
	// Writes do not leak between the copy, the source and the snapshot.
	_ = env.Layers.WriteFile(cp.ID, "/c", "copy")
	_ = env.Layers.WriteFile(src.ID, "/d", "source")
	srcFiles, _ = env.Layers.Files(src.ID)
	cpFiles, _ = env.Layers.Files(cp.ID)
	diskFiles, _ := env.Layers.DiskFiles(img.Disk)
	if _, ok := srcFiles["/c"]; ok {
		t.Errorf("the copy's write shows in the source")
	}
	if _, ok := cpFiles["/d"]; ok {
		t.Errorf("the source's write shows in the copy")
	}
	if len(diskFiles) != 2 {
		t.Errorf("saved disk files = %v; want only /a and /b", diskFiles)
	}

	same := mustCreate(t, m, sandbox.CreateRequest{Image: "snap1", Resources: sandbox.Resources{DiskBytes: 1 << 30}})
	if same.Resources.DiskBytes != 1<<30 {
		t.Errorf("Create(snap1, same disk size) = %d", same.Resources.DiskBytes)
	}
	_, err = m.Create(ctx, sandbox.CreateRequest{Image: "snap1", Resources: sandbox.Resources{DiskBytes: 2 << 30}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "resources.disk_bytes") {
		t.Errorf("Create(snap1, other disk size) = %v; want InvalidArgument naming resources.disk_bytes", err)
	}

	for _, tc := range []struct {
		name, box, snap string
		class           func(error) bool
	}{
		{"taken name", src.ID, "snap1", errdefs.IsAlreadyExists},
		{"image name", src.ID, "host", errdefs.IsAlreadyExists},
		{"bad name", src.ID, "../x", errdefs.IsInvalidArgument},
		{"unknown sandbox", "nope", "snap2", errdefs.IsNotFound},
	} {
		if _, err := m.Snapshot(ctx, tc.box, tc.snap); !tc.class(err) {
			t.Errorf("%s: Snapshot(%q, %q) = %v; want another class", tc.name, tc.box, tc.snap, err)
		}
	}
	// A paused source stays paused; a suspended one can be snapshotted.
	if _, err := m.Pause(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(ctx, src.ID, "snap2"); err != nil {
		t.Fatalf("Snapshot(paused) = %v", err)
	}
	if s := runtimeStatus(env, src.ID); s != sandbox.StatusPaused {
		t.Errorf("paused source after Snapshot = %s; want paused", s)
	}
	if _, err := m.Suspend(ctx, src.ID, sandbox.SuspendRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Snapshot(ctx, src.ID, "snap3"); err != nil {
		t.Errorf("Snapshot(suspended) = %v", err)
	}
	// A failed registration removes the saved disk.
	env.Snapshots.AddFn = func(context.Context, sandbox.Image) error { return errors.New("boom") }
	if _, err := m.Snapshot(ctx, same.ID, "snap4"); err == nil {
		t.Errorf("Snapshot with a failing store = nil; want error")
	}
	if d, _ := env.Layers.Disks(ctx); len(d) != 3 {
		t.Errorf("saved disks = %d; want 3 (the failed snapshot's removed)", len(d))
	}
}

func TestFork(t *testing.T) {
	ctx := testutil.Context(t)
	nw := &sandboxtest.Networker{}
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) { cfg.Network = nw })
	res := sandbox.Resources{CPUs: 2, MemoryBytes: 512 << 20, DiskBytes: 2 << 30, Pids: 100}
	src := mustCreate(t, m, sandbox.CreateRequest{
		Name: "src", Resources: res, Env: map[string]string{"A": "1"},
		Labels:  map[string]string{"team": "a"},
		Network: &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"example.com"}},
	})
	if err := env.Layers.WriteFile(src.ID, "/f", "source"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var during []sandbox.Status
	env.Layers.PrepareFn = func(_ context.Context, _, _ string, o sandbox.PrepareOpts) error {
		if o.FromActive != "" {
			mu.Lock()
			during = append(during, runtimeStatus(env, o.FromActive))
			mu.Unlock()
		}
		return nil
	}

	out, err := m.Fork(ctx, "src", sandbox.ForkRequest{Count: 3, Labels: map[string]string{"run": "x"}})
	if err != nil {
		t.Fatalf("Fork() = %v", err)
	}
	if len(out) != 3 {
		t.Fatalf("Fork() made %d sandboxes; want 3", len(out))
	}
	for _, s := range during {
		if s != sandbox.StatusPaused {
			t.Errorf("source status while its disk was copied = %s; want paused", s)
		}
	}
	ids := map[string]bool{src.ID: true}
	hosts := map[string]bool{}
	wantLabels := map[string]string{"team": "a", "run": "x"}
	for _, r := range out {
		if ids[r.ID] {
			t.Errorf("fork ID %s is not distinct", r.ID)
		}
		ids[r.ID] = true
		b, ok := env.Runtime.Get(r.ID)
		if !ok || b.Status != sandbox.StatusRunning {
			t.Errorf("copy %s in runtime = %+v, %v; want running", r.ID, b, ok)
			continue
		}
		if hosts[b.Spec.Hostname] || b.Spec.Hostname == "src" || b.Spec.Hostname == "" {
			t.Errorf("copy %s hostname %q; want its own", r.ID, b.Spec.Hostname)
		}
		hosts[b.Spec.Hostname] = true
		if r.State != sandbox.StateRunning || r.Origin != src.ID || r.Name != "" || r.Image != src.Image {
			t.Errorf("copy = state %s origin %s name %q image %s; want running from %s, no name, image %s", r.State, r.Origin, r.Name, r.Image, src.ID, src.Image)
		}
		if r.Resources != res || b.Spec.Resources != res {
			t.Errorf("copy limits = %+v (spec %+v); want %+v", r.Resources, b.Spec.Resources, res)
		}
		if diff := cmp.Diff(src.Network, r.Network); diff != "" {
			t.Errorf("copy network settings (-source +copy):\n%s", diff)
		}
		if set, ok := nw.Settings(r.ID); !ok || set.Mode != netpolicy.ModeAllowlist || !slices.Equal(set.Allow, []string{"example.com"}) {
			t.Errorf("copy %s attached with %+v, %v; want the source's allowlist", r.ID, set, ok)
		}
		if !maps.Equal(r.Labels, wantLabels) {
			t.Errorf("copy labels = %v; want %v", r.Labels, wantLabels)
		}
		if !slices.Contains(b.Spec.Env, "A=1") {
			t.Errorf("copy env = %v; want A=1", b.Spec.Env)
		}
		if f, _ := env.Layers.Files(r.ID); f["/f"] != "source" {
			t.Errorf("copy files = %v; want the source's /f", f)
		}
		if n, _ := env.Layers.DiskBytes(r.ID); n != res.DiskBytes {
			t.Errorf("copy disk size = %d; want %d", n, res.DiskBytes)
		}
	}
	got, _ := m.Get(ctx, "src")
	if !maps.Equal(got.Labels, map[string]string{"team": "a"}) {
		t.Errorf("source labels after Fork = %v; want unchanged", got.Labels)
	}
	if s := runtimeStatus(env, src.ID); s != sandbox.StatusRunning || got.State != sandbox.StateRunning {
		t.Errorf("source after Fork: runtime %s, record %s; want running", s, got.State)
	}
	if l, _ := m.List(ctx); len(l) != 4 {
		t.Errorf("List() = %d sandboxes; want 4", len(l))
	}
	// Writes are isolated.
	_ = env.Layers.WriteFile(out[0].ID, "/only0", "x")
	_ = env.Layers.WriteFile(src.ID, "/onlysrc", "y")
	for _, id := range []string{src.ID, out[1].ID, out[2].ID} {
		if f, _ := env.Layers.Files(id); f["/only0"] != "" {
			t.Errorf("copy 0's write shows in %s", id)
		}
	}
	for _, r := range out {
		if f, _ := env.Layers.Files(r.ID); f["/onlysrc"] != "" {
			t.Errorf("the source's later write shows in copy %s", r.ID)
		}
	}
}

// TestForkKeepsEgressCount: a fork starts with what its source has used
// of its egress budget, so forking is no way around the budget.
func TestForkKeepsEgressCount(t *testing.T) {
	ctx := testutil.Context(t)
	nw := &sandboxtest.Networker{}
	_, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) { cfg.Network = nw })
	src := mustCreate(t, m, sandbox.CreateRequest{
		Name:    "src",
		Network: &netpolicy.Settings{Mode: netpolicy.ModeFull, Limits: netpolicy.Limits{EgressBytes: 1 << 20}},
	})
	nw.SetEgressUsed(src.ID, 700<<10)
	out, err := m.Fork(ctx, "src", sandbox.ForkRequest{Count: 2})
	if err != nil {
		t.Fatalf("Fork() = %v", err)
	}
	for _, r := range out {
		if n, _ := nw.EgressUsed(r.ID); n != 700<<10 {
			t.Errorf("fork %s egress count = %d; want its source's %d", r.ID, n, 700<<10)
		}
	}
}

func TestForkCount(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	src := mustCreate(t, m, sandbox.CreateRequest{})
	out, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{})
	if err != nil || len(out) != 1 {
		t.Fatalf("Fork(count 0) = %d sandboxes, %v; want 1", len(out), err)
	}
	for _, n := range []int{-1, sandbox.MaxForkCount + 1} {
		if _, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{Count: n}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "count") {
			t.Errorf("Fork(count %d) = %v; want InvalidArgument naming count", n, err)
		}
	}
	if _, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{Labels: map[string]string{"-bad": "x"}}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Fork(bad label) = %v; want InvalidArgument", err)
	}
	if _, err := m.Fork(ctx, "nope", sandbox.ForkRequest{}); !errdefs.IsNotFound(err) {
		t.Errorf("Fork(unknown) = %v; want NotFound", err)
	}
	if n := len(env.Runtime.IDs()); n != 2 {
		t.Errorf("runtime sandboxes = %d; want 2 (refused forks make nothing)", n)
	}
}

func TestForkPausedSourceStaysPaused(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	src := mustCreate(t, m, sandbox.CreateRequest{})
	if _, err := m.Pause(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	out, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{Count: 2})
	if err != nil || len(out) != 2 {
		t.Fatalf("Fork(paused) = %d, %v; want 2 copies", len(out), err)
	}
	if s := runtimeStatus(env, src.ID); s != sandbox.StatusPaused || state(t, m, src.ID) != sandbox.StatePaused {
		t.Errorf("paused source after Fork = runtime %s; want paused", s)
	}
	for _, r := range out {
		if s := runtimeStatus(env, r.ID); s != sandbox.StatusRunning {
			t.Errorf("copy %s = %s; want running", r.ID, s)
		}
	}
}

func TestForkRollback(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	src := mustCreate(t, m, sandbox.CreateRequest{})
	boom := errors.New("boom")
	var mu sync.Mutex
	calls := 0
	env.Runtime.CreateFn = func(context.Context, string, *sandbox.Spec) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	}
	if _, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{Count: 3}); !errors.Is(err, boom) {
		t.Fatalf("Fork with a failing copy = %v; want boom", err)
	}
	want := []string{src.ID}
	for what, got := range map[string][]string{"runtime": env.Runtime.IDs(), "layers": env.Layers.Keys(), "records": env.Store.IDs()} {
		if !slices.Equal(got, want) {
			t.Errorf("%s after failed Fork = %v; want only the source %v", what, got, want)
		}
	}
	if l, _ := m.List(ctx); len(l) != 1 {
		t.Errorf("List() after failed Fork = %d; want 1", len(l))
	}
	if s := runtimeStatus(env, src.ID); s != sandbox.StatusRunning {
		t.Errorf("source after failed Fork = %s; want running", s)
	}
}

func TestForkMemoryState(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	src := mustCreate(t, m, sandbox.CreateRequest{})
	setMemory(t, env, src.ID, 42)
	out, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{Count: 2, MemoryState: true})
	if err != nil || len(out) != 2 {
		t.Fatalf("Fork(memory state) = %d, %v; want 2 copies", len(out), err)
	}
	for _, r := range out {
		b, ok := env.Runtime.Get(r.ID)
		if !ok || b.Status != sandbox.StatusRunning || b.Memory != 42 || b.Restored == "" {
			t.Errorf("copy %s = %+v; want running, restored with memory 42", r.ID, b)
		}
		if b.Spec.Hostname != r.ID {
			t.Errorf("copy %s hostname = %q; want its ID", r.ID, b.Spec.Hostname)
		}
	}
	if b, _ := env.Runtime.Get(src.ID); b.Status != sandbox.StatusRunning || b.Memory != 42 {
		t.Errorf("source after Fork = %+v; want running with its memory", b)
	}
	if !slices.Contains(env.Agents.Drops(), src.AgentAddr) {
		t.Errorf("DropAgentConns calls = %v; want the source's %s", env.Agents.Drops(), src.AgentAddr)
	}
	if ents, _ := os.ReadDir(filepath.Join(env.StateDir, "checkpoints")); len(ents) != 0 {
		t.Errorf("checkpoints left after Fork: %v", ents)
	}

	t.Run("cannot checkpoint", func(t *testing.T) {
		env.Runtime.Update(src.ID, func(b *sandboxtest.Box) { b.NoCheckpoint = "a TCP connection" })
		defer env.Runtime.Update(src.ID, func(b *sandboxtest.Box) { b.NoCheckpoint = "" })
		before := env.Runtime.IDs()
		// The checkpoint's own error, not a later one of a restore that
		// found no checkpoint.
		if _, err := m.Fork(ctx, src.ID, sandbox.ForkRequest{Count: 2, MemoryState: true}); !errors.Is(err, sandbox.ErrCheckpoint) || err == nil || !strings.Contains(err.Error(), "a TCP connection") {
			t.Errorf("Fork(memory state) of a box that cannot be saved = %v; want ErrCheckpoint naming the reason", err)
		}
		if got := env.Runtime.IDs(); !slices.Equal(got, before) {
			t.Errorf("runtime after failed Fork = %v; want %v", got, before)
		}
		if got := env.Layers.Keys(); !slices.Equal(got, before) {
			t.Errorf("layers after failed Fork = %v; want %v", got, before)
		}
		if s := runtimeStatus(env, src.ID); s != sandbox.StatusRunning {
			t.Errorf("source after failed Fork = %s; want running", s)
		}
	})
	t.Run("suspended", func(t *testing.T) {
		if _, err := m.Suspend(ctx, out[0].ID, sandbox.SuspendRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Fork(ctx, out[0].ID, sandbox.ForkRequest{MemoryState: true}); !errdefs.IsFailedPrecondition(err) {
			t.Errorf("Fork(memory state) of a suspended box = %v; want FailedPrecondition", err)
		}
		// Its files can still be forked.
		if got, err := m.Fork(ctx, out[0].ID, sandbox.ForkRequest{}); err != nil || len(got) != 1 {
			t.Errorf("Fork(suspended) = %d, %v; want 1 copy", len(got), err)
		}
	})
}

func TestIdleTimeout(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	if err := m.Start(ctx, nil); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	if err := m.Start(ctx, nil); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("second Start() = %v; want FailedPrecondition", err)
	}
	idle := 300 * time.Millisecond
	susp := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: idle})
	setMemory(t, env, susp.ID, 11)
	rm := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: idle, IdleAction: sandbox.IdleRemove})
	nock := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: idle})
	env.Runtime.Update(nock.ID, func(b *sandboxtest.Box) { b.NoCheckpoint = "a TCP connection" })
	never := mustCreate(t, m, sandbox.CreateRequest{})

	suspended := func(id string, memory bool) func() bool {
		return func() bool {
			r, err := m.Get(ctx, id)
			return err == nil && r.State == sandbox.StateSuspended && r.Suspended != nil && r.Suspended.Memory == memory
		}
	}
	eventually(t, "the idle box to be suspended with memory", suspended(susp.ID, true))
	eventually(t, "the idle box that cannot be checkpointed to be suspended with its files only", suspended(nock.ID, false))
	eventually(t, "the idle box with action remove to be removed", func() bool {
		_, err := m.Get(ctx, rm.ID)
		_, inRuntime := env.Runtime.Get(rm.ID)
		return errdefs.IsNotFound(err) && !inRuntime
	})
	if s := state(t, m, never.ID); s != sandbox.StateRunning {
		t.Errorf("box without idle timeout = %s; want running", s)
	}
	if _, ok := env.Runtime.Get(susp.ID); ok {
		t.Errorf("runtime still has the suspended idle box")
	}
	// Activity resumes it where it was.
	if r, err := m.EnsureRunning(ctx, susp.ID); err != nil || r.State != sandbox.StateRunning {
		t.Fatalf("EnsureRunning(idle-suspended) = %s, %v; want running", r.State, err)
	}
	if b, _ := env.Runtime.Get(susp.ID); b.Memory != 11 {
		t.Errorf("memory after auto-resume = %d; want 11", b.Memory)
	}
}

func TestIdleTouchKeepsAlive(t *testing.T) {
	ctx := testutil.Context(t)
	_, m := newLifecycle(t)
	if err := m.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	// The touched box's idle timeout is long enough that only a test
	// goroutine starved for a whole second could miss it.
	touched := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: time.Second})
	control := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: 300 * time.Millisecond})
	start := time.Now()
	for {
		m.Touch(touched.ID)
		r, _ := m.Get(ctx, control.ID)
		if r.State == sandbox.StateSuspended && time.Since(start) > 2*time.Second {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("control box never went idle")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s := state(t, m, touched.ID); s != sandbox.StateRunning {
		t.Errorf("touched box = %s; want running", s)
	}
}

// TestIdleBusyInside: CPU use in the box and a running command count as
// activity, so the idle timeout does not act on a box busy inside; once
// that stops, it does.
func TestIdleBusyInside(t *testing.T) {
	ctx := testutil.Context(t)
	var running sync.Map // agent address -> true while a command runs
	env, m := newLifecycle(t, func(c *sandbox.ManagerConfig) {
		c.IdleCPUPercent = 5
		c.RunningProcesses = func(_ context.Context, addr string) (int, error) {
			if _, ok := running.Load(addr); ok {
				return 1, nil
			}
			return 0, nil
		}
	})
	if err := m.Start(ctx, nil); err != nil {
		t.Fatal(err)
	}
	const idle = 300 * time.Millisecond
	cpu := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: idle})
	env.Runtime.Update(cpu.ID, func(b *sandboxtest.Box) { b.BusySince = time.Now() })
	proc := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: idle})
	running.Store(proc.AgentAddr, true)
	control := mustCreate(t, m, sandbox.CreateRequest{IdleTimeout: idle})

	// Many idle timeouts after the control box went idle.
	start := time.Now()
	eventually(t, "the control box to be suspended and a while to pass", func() bool {
		return state(t, m, control.ID) == sandbox.StateSuspended && time.Since(start) > 10*idle
	})
	for _, id := range []string{cpu.ID, proc.ID} {
		if s := state(t, m, id); s != sandbox.StateRunning {
			t.Errorf("box %s busy inside = %s; want running", id, s)
		}
	}

	env.Runtime.Update(cpu.ID, func(b *sandboxtest.Box) { b.BusySince = time.Time{} })
	running.Delete(proc.AgentAddr)
	for _, id := range []string{cpu.ID, proc.ID} {
		eventually(t, "box "+id+" to be suspended once idle inside", func() bool { return state(t, m, id) == sandbox.StateSuspended })
	}
}

func TestKeepAlive(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{Timeout: time.Hour})
	if rec.Deadline.IsZero() {
		t.Fatal("Create(timeout 1h).Deadline is zero")
	}
	before := time.Now().UTC().Truncate(time.Millisecond)
	got, err := m.KeepAlive(ctx, rec.ID, 2*time.Hour)
	if err != nil || got.Deadline.Before(before.Add(2*time.Hour)) {
		t.Fatalf("KeepAlive(2h) = deadline %v, %v; want at least %v", got.Deadline, err, before.Add(2*time.Hour))
	}
	if g, _ := m.Get(ctx, rec.ID); !g.Deadline.Equal(got.Deadline) {
		t.Errorf("Get().Deadline = %v; want %v", g.Deadline, got.Deadline)
	}
	recs, _ := env.Store.ListSandboxes(ctx)
	if len(recs) != 1 || !recs[0].Deadline.Equal(got.Deadline) {
		t.Errorf("stored deadline = %v; want %v", recs, got.Deadline)
	}
	before = time.Now().UTC().Truncate(time.Millisecond)
	got0, err := m.KeepAlive(ctx, rec.ID, 0) // the box's own timeout
	if err != nil || got0.Deadline.Before(before.Add(time.Hour)) || !got0.Deadline.Before(got.Deadline) {
		t.Errorf("KeepAlive(0) = deadline %v, %v; want now + 1h", got0.Deadline, err)
	}
	for _, d := range []time.Duration{-time.Second, sandbox.MaxTimeout + time.Hour} {
		if _, err := m.KeepAlive(ctx, rec.ID, d); !errdefs.IsInvalidArgument(err) {
			t.Errorf("KeepAlive(%s) = %v; want InvalidArgument", d, err)
		}
	}
	if _, err := m.KeepAlive(ctx, "nope", time.Hour); !errdefs.IsNotFound(err) {
		t.Errorf("KeepAlive(unknown) = %v; want NotFound", err)
	}
	plain := mustCreate(t, m, sandbox.CreateRequest{})
	if got, err := m.KeepAlive(ctx, plain.ID, 0); err != nil || !got.Deadline.IsZero() {
		t.Errorf("KeepAlive(0) without a timeout = %v, %v; want no deadline", got.Deadline, err)
	}
	// Moving the deadline re-arms the timer: an earlier one removes the box.
	if _, err := m.KeepAlive(ctx, rec.ID, 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the box to be removed at its moved deadline", func() bool {
		_, err := m.Get(ctx, rec.ID)
		return errdefs.IsNotFound(err)
	})
	if _, ok := env.Runtime.Get(rec.ID); ok {
		t.Errorf("runtime still has the expired box")
	}
}

// TestRecoverEndsStrayCheckpoints checks that Recover ends a checkpoint or
// restore left by the killed daemon before it judges a box, and removes a
// box whose stray CRIU cannot be ended.
func TestRecoverEndsStrayCheckpoints(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	env.StateDir = t.TempDir()
	const (
		ended = "cccccccccc01"
		stuck = "cccccccccc02"
	)
	var mu sync.Mutex
	called := map[string]int{}
	env.Runtime.EndStrayFn = func(_ context.Context, id string) error {
		mu.Lock()
		defer mu.Unlock()
		called[id]++
		if id == stuck {
			return errors.New("process group 42 still running")
		}
		return nil
	}
	for _, id := range []string{ended, stuck} {
		rec := sandbox.Record{ID: id, Runtime: "fake", Image: "host", Layer: "host-layer", State: sandbox.StateSuspending,
			AgentAddr: "fake://" + id, Spec: &sandbox.Spec{Hostname: id, AgentBinary: "/usr/local/bin/corral"}}
		if err := env.Store.PutSandbox(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		env.Layers.Put(id, "host-layer")
		env.Runtime.Put(id, sandboxtest.Box{Status: sandbox.StatusPaused})
	}
	m := newManager(t, env)
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []string{ended, stuck} {
		if called[id] != 1 {
			t.Errorf("EndStray(%s) called %d times; want 1", id, called[id])
		}
	}
	if r, err := m.Get(ctx, ended); err != nil || r.State != sandbox.StateSuspended {
		t.Errorf("box whose stray checkpoint ended: %+v, %v; want suspended", r, err)
	}
	if _, err := m.Get(ctx, stuck); !errdefs.IsNotFound(err) {
		t.Errorf("box whose stray checkpoint cannot be ended: Get = %v; want removed", err)
	}
}

func TestRecoverLifecycle(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	env.StateDir = t.TempDir()
	put := func(rec sandbox.Record, status sandbox.Status) {
		rec.Runtime, rec.Image, rec.Layer = "fake", "host", "host-layer"
		rec.AgentAddr = "fake://" + rec.ID
		rec.Spec = &sandbox.Spec{Hostname: rec.ID, AgentBinary: "/usr/local/bin/corral"}
		if err := env.Store.PutSandbox(ctx, &rec); err != nil {
			t.Fatal(err)
		}
		env.Layers.Put(rec.ID, "host-layer")
		if status != "" {
			env.Runtime.Put(rec.ID, sandboxtest.Box{Status: status})
		}
	}
	complete := func(id string, memory int) {
		dir := checkpointDir(env, id)
		if err := sandboxtest.WriteCheckpoint(dir, id, memory); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "corral-complete"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const (
		pausedKept      = "aaaaaaaaaaa1"
		pausedRunning   = "aaaaaaaaaaa2"
		suspendingMem   = "aaaaaaaaaaa3"
		suspendingFiles = "aaaaaaaaaaa4"
		suspended       = "aaaaaaaaaaa5"
		suspendedNoDisk = "aaaaaaaaaaa6"
		resumingAlive   = "aaaaaaaaaaa7"
		resumingDead    = "aaaaaaaaaaa8"
		pooled          = "aaaaaaaaaaa9"
		runningFrozen   = "aaaaaaaaaab1"
	)
	put(sandbox.Record{ID: pausedKept, State: sandbox.StatePaused}, sandbox.StatusPaused)
	put(sandbox.Record{ID: pausedRunning, State: sandbox.StatePaused}, sandbox.StatusRunning)
	put(sandbox.Record{ID: suspendingMem, State: sandbox.StateSuspending}, "")
	complete(suspendingMem, 9)
	put(sandbox.Record{ID: suspendingFiles, State: sandbox.StateSuspending}, sandbox.StatusStopped)
	if err := sandboxtest.WriteCheckpoint(checkpointDir(env, suspendingFiles), suspendingFiles, 1); err != nil { // no marker
		t.Fatal(err)
	}
	put(sandbox.Record{ID: suspended, State: sandbox.StateSuspended, Suspended: &sandbox.Suspension{}}, sandbox.StatusStopped)
	put(sandbox.Record{ID: suspendedNoDisk, State: sandbox.StateSuspended, Suspended: &sandbox.Suspension{}}, "")
	_ = env.Layers.Remove(ctx, suspendedNoDisk)
	put(sandbox.Record{ID: resumingAlive, State: sandbox.StateResuming, Suspended: &sandbox.Suspension{Memory: true}}, sandbox.StatusRunning)
	complete(resumingAlive, 2)
	put(sandbox.Record{ID: resumingDead, State: sandbox.StateResuming, Suspended: &sandbox.Suspension{Memory: true}}, sandbox.StatusCreated)
	complete(resumingDead, 5)
	put(sandbox.Record{ID: pooled, State: sandbox.StateRunning, Pool: "pool-0123456789ab"}, sandbox.StatusRunning)
	put(sandbox.Record{ID: runningFrozen, State: sandbox.StateRunning}, sandbox.StatusPaused)
	if err := os.MkdirAll(checkpointDir(env, "fork-bbbbbbbbbbbb"), 0o700); err != nil { // orphan
		t.Fatal(err)
	}

	m := newManager(t, env)
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	for _, tc := range []struct {
		id      string
		state   sandbox.RecordState
		memory  bool // Suspended.Memory, for suspended ones
		runtime sandbox.Status
	}{
		{pausedKept, sandbox.StatePaused, false, sandbox.StatusPaused},
		{pausedRunning, sandbox.StateRunning, false, sandbox.StatusRunning},
		{suspendingMem, sandbox.StateSuspended, true, "absent"},
		{suspendingFiles, sandbox.StateSuspended, false, "absent"},
		{suspended, sandbox.StateSuspended, false, "absent"},
		{resumingAlive, sandbox.StateRunning, false, sandbox.StatusRunning},
		{resumingDead, sandbox.StateSuspended, true, "absent"},
		{runningFrozen, sandbox.StateRunning, false, sandbox.StatusRunning},
	} {
		r, err := m.Get(ctx, tc.id)
		if err != nil {
			t.Errorf("Get(%s) after Recover = %v; want kept", tc.id, err)
			continue
		}
		if r.State != tc.state {
			t.Errorf("%s: state after Recover = %s; want %s", tc.id, r.State, tc.state)
		}
		if tc.state == sandbox.StateSuspended && (r.Suspended == nil || r.Suspended.Memory != tc.memory) {
			t.Errorf("%s: Suspended = %+v; want memory %v", tc.id, r.Suspended, tc.memory)
		}
		if tc.state != sandbox.StateSuspended && r.Suspended != nil {
			t.Errorf("%s: Suspended = %+v; want nil", tc.id, r.Suspended)
		}
		if s := runtimeStatus(env, tc.id); s != tc.runtime {
			t.Errorf("%s: runtime status after Recover = %s; want %s", tc.id, s, tc.runtime)
		}
	}
	for _, id := range []string{suspendedNoDisk, pooled} {
		if _, err := m.Get(ctx, id); !errdefs.IsNotFound(err) {
			t.Errorf("Get(%s) after Recover = %v; want removed", id, err)
		}
		if _, ok := env.Runtime.Get(id); ok || slices.Contains(env.Store.IDs(), id) || slices.Contains(env.Layers.Keys(), id) {
			t.Errorf("%s left in the runtime, store or layers", id)
		}
	}
	for id, want := range map[string]bool{
		suspendingMem: true, suspendingFiles: false, resumingAlive: false, resumingDead: true, "fork-bbbbbbbbbbbb": false,
	} {
		if got := exists(checkpointDir(env, id)); got != want {
			t.Errorf("checkpoint of %s exists = %v; want %v", id, got, want)
		}
	}
	// The recovered checkpoints resume the saved memory.
	for id, mem := range map[string]int{suspendingMem: 9, resumingDead: 5} {
		if _, err := m.Resume(ctx, id); err != nil {
			t.Errorf("Resume(%s) = %v", id, err)
			continue
		}
		if b, _ := env.Runtime.Get(id); b.Memory != mem || b.Status != sandbox.StatusRunning {
			t.Errorf("%s after Resume = %+v; want running with memory %d", id, b, mem)
		}
	}
	if r, err := m.Resume(ctx, suspendingFiles); err != nil || r.State != sandbox.StateRunning {
		t.Errorf("Resume(%s) = %s, %v; want running", suspendingFiles, r.State, err)
	}
}

// TestRecoverWithoutStateDir: without a state directory there are no
// checkpoints, and Recover must not look for them relative to the working
// directory.
func TestRecoverWithoutStateDir(t *testing.T) {
	ctx := testutil.Context(t)
	cwd := t.TempDir()
	t.Chdir(cwd)
	const id = "aaaaaaaaaaa1"
	stray := filepath.Join(cwd, "checkpoints", id)
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stray, "corral-complete"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	env := sandboxtest.NewEnv() // no StateDir
	rec := sandbox.Record{ID: id, Runtime: "fake", Image: "host", Layer: "host-layer", State: sandbox.StateSuspending,
		Spec: &sandbox.Spec{Hostname: id}}
	if err := env.Store.PutSandbox(ctx, &rec); err != nil {
		t.Fatal(err)
	}
	env.Layers.Put(id, "host-layer")
	m := newManager(t, env)
	if err := m.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	got, err := m.Get(ctx, id)
	if err != nil || got.State != sandbox.StateSuspended || got.Suspended == nil || got.Suspended.Memory {
		t.Errorf("Get() after Recover = %s %+v, %v; want suspended without memory", got.State, got.Suspended, err)
	}
	if !exists(stray) {
		t.Errorf("Recover removed %s, outside any state directory", stray)
	}
	if got, err := m.Resume(ctx, id); err != nil || got.State != sandbox.StateRunning {
		t.Errorf("Resume() = %s, %v; want running (a fresh start)", got.State, err)
	}
}

// TestNetworkAcrossLifecycle: a box's egress is served again after it
// resumes from suspend, and after a restarted daemon recovers it paused.
func TestNetworkAcrossLifecycle(t *testing.T) {
	ctx := testutil.Context(t)
	nw := &sandboxtest.Networker{}
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) { cfg.Network = nw })
	set := &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"example.com"}}
	rec := mustCreate(t, m, sandbox.CreateRequest{Network: set})
	if !nw.Attached(rec.ID) {
		t.Fatalf("box not attached after Create")
	}
	for _, fsOnly := range []bool{false, true} {
		if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: fsOnly}); err != nil {
			t.Fatal(err)
		}
		if nw.Attached(rec.ID) {
			t.Errorf("suspended box (filesystem only %v) still attached", fsOnly)
		}
		if _, err := m.Resume(ctx, rec.ID); err != nil {
			t.Fatal(err)
		}
		if got, ok := nw.Settings(rec.ID); !ok || !slices.Equal(got.Allow, set.Allow) {
			t.Errorf("after Resume (filesystem only %v): attached %v with %+v; want the box's settings", fsOnly, ok, got)
		}
	}
	if _, err := m.Pause(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	m.Close()

	// A new daemon: its network service starts empty.
	nw2 := &sandboxtest.Networker{}
	cfg := env.Config()
	cfg.Network = nw2
	m2, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m2.Close() })
	if err := m2.Recover(ctx); err != nil {
		t.Fatalf("Recover() = %v", err)
	}
	if s := state(t, m2, rec.ID); s != sandbox.StatePaused {
		t.Fatalf("recovered state = %s; want paused", s)
	}
	if _, err := m2.Resume(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if got, ok := nw2.Settings(rec.ID); !ok || !slices.Equal(got.Allow, set.Allow) {
		t.Errorf("box recovered paused, then resumed: attached %v with %+v; want the box's settings", ok, got)
	}
}

func TestSetDeadline(t *testing.T) {
	ctx := testutil.Context(t)
	_, m := newLifecycle(t)
	rec := mustCreate(t, m, sandbox.CreateRequest{Timeout: time.Hour})
	// Earlier than the current deadline is allowed (E2B's setTimeout).
	want := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Millisecond)
	got, err := m.SetDeadline(ctx, rec.ID, want)
	if err != nil || !got.Deadline.Equal(want) {
		t.Fatalf("SetDeadline(%v) = %v, %v; want that deadline", want, got.Deadline, err)
	}
	if got.Timeout != time.Hour {
		t.Errorf("SetDeadline changed Timeout to %s; want 1h", got.Timeout)
	}
	if got, err := m.SetDeadline(ctx, rec.ID, time.Time{}); err != nil || !got.Deadline.IsZero() {
		t.Errorf("SetDeadline(zero) = %v, %v; want no deadline", got.Deadline, err)
	}
	if _, err := m.SetDeadline(ctx, rec.ID, time.Now().Add(sandbox.MaxTimeout+time.Hour)); !errdefs.IsInvalidArgument(err) {
		t.Errorf("SetDeadline(beyond MaxTimeout) = %v; want InvalidArgument", err)
	}
	if _, err := m.SetDeadline(ctx, "nope", want); !errdefs.IsNotFound(err) {
		t.Errorf("SetDeadline(unknown) = %v; want NotFound", err)
	}
	// A deadline that has passed removes the box.
	if _, err := m.SetDeadline(ctx, rec.ID, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the box to be removed at its past deadline", func() bool {
		_, err := m.Get(ctx, rec.ID)
		return errdefs.IsNotFound(err)
	})
}

func TestTimeoutActionPause(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t)
	if _, err := m.Create(ctx, sandbox.CreateRequest{TimeoutAction: "sleep"}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Create(timeout action sleep) = %v; want InvalidArgument", err)
	}
	rec := mustCreate(t, m, sandbox.CreateRequest{Timeout: time.Hour, TimeoutAction: sandbox.TimeoutPause})
	if _, err := m.SetDeadline(ctx, rec.ID, time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the box to be paused at its deadline", func() bool {
		got, err := m.Get(ctx, rec.ID)
		return err == nil && got.State == sandbox.StatePaused
	})
	got, _ := m.Get(ctx, rec.ID)
	if !got.Deadline.IsZero() {
		t.Errorf("deadline of a box paused at its deadline = %v; want none", got.Deadline)
	}
	if b, _ := env.Runtime.Get(rec.ID); b.Status != sandbox.StatusPaused {
		t.Errorf("runtime status = %s; want paused", b.Status)
	}
}

func TestAccessTokens(t *testing.T) {
	ctx := testutil.Context(t)
	_, m := newLifecycle(t)
	e2b := &sandbox.E2BSettings{AutoResume: true, TrafficToken: "traffic-of-a", MaskRequestHost: "localhost"}
	a := mustCreate(t, m, sandbox.CreateRequest{E2B: e2b})
	b := mustCreate(t, m, sandbox.CreateRequest{})
	if len(a.AccessToken) < 20 || a.AccessToken == b.AccessToken {
		t.Errorf("access tokens %q and %q; want long and different", a.AccessToken, b.AccessToken)
	}
	forks, err := m.Fork(ctx, a.ID, sandbox.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if tok := forks[0].AccessToken; tok == "" || tok == a.AccessToken {
		t.Errorf("fork's access token %q; want its own", tok)
	}
	// The E2B settings are kept, with a traffic token of the fork's own.
	if a.E2B == nil || *a.E2B != *e2b || b.E2B != nil {
		t.Errorf("E2B settings %+v and %+v; want %+v and none", a.E2B, b.E2B, e2b)
	}
	f := forks[0].E2B
	if f == nil || !f.AutoResume || f.MaskRequestHost != "localhost" || len(f.TrafficToken) < 20 || f.TrafficToken == e2b.TrafficToken {
		t.Errorf("fork's E2B settings %+v; want the source's with a traffic token of its own", f)
	}
}
