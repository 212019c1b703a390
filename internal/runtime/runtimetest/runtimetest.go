// Package runtimetest is the conformance suite that every sandbox.Runtime
// backend must pass (after containerd's snapshots/testsuite). A backend's
// privileged test calls Run with a factory that skips when the backend
// cannot run on the host.
package runtimetest

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// Env describes what the suite needs to know about a backend under test.
type Env struct {
	// Spec returns a new spec whose PID 1 keeps running until it is
	// signalled (a stand-in for the agent, so the suite does not depend on
	// it). It is called once per sandbox.
	Spec func(t *testing.T) *sandbox.Spec
	// MountInfo is the mountinfo file in which the backend's mounts are
	// visible; "" means /proc/self/mountinfo.
	MountInfo string
	// RunDir is the directory under which the backend keeps per-sandbox
	// files: after Delete no mount may remain under RunDir/<id>, and that
	// directory must be gone.
	RunDir string
	// CgroupDirs returns the cgroup directories of a sandbox that exist now;
	// none may remain after Delete. Nil skips the check.
	CgroupDirs func(id string) []string
	// PID1Comm is the command name (/proc/PID/comm) of Spec's PID 1 once
	// it runs its program: Start may return while the runtime's own code
	// still runs as PID 1 (there is no agent to wait for), and the
	// Checkpoint subtest waits for it. "" skips the wait.
	PID1Comm string
	// Disk, for a backend whose boxes can have a disk limit, returns a
	// spec like Spec's whose root file system's writable layer holds at
	// most limit bytes (the layer store the backend runs on), and
	// registers its removal. Nil skips the Disk subtest.
	Disk func(t *testing.T, limit int64) *sandbox.Spec
	// Exec runs args in running sandbox id without the agent (the suite
	// has none; the OCI runtime's exec, for example) and returns what
	// they wrote to stdout and stderr. The Disk subtest writes with it.
	Exec func(ctx context.Context, id string, args ...string) ([]byte, error)
}

// Run runs the suite: the subtests every backend must pass, then one per
// optional capability (sandbox.Pauser, sandbox.Syncer,
// sandbox.Checkpointer, and the disk limit when Env.Disk is set), which
// skips when the backend does not implement it. A Checkpointer that is FilesOnly must refuse with
// sandbox.ErrCheckpoint and leave the box running. newRuntime is called once per sub-test and must
// register its own cleanup.
func Run(t *testing.T, newRuntime func(t *testing.T) (sandbox.Runtime, Env)) {
	tests := []struct {
		name string
		fn   func(t *testing.T, rt sandbox.Runtime, env Env)
	}{
		{"Lifecycle", testLifecycle},
		{"DeleteRunning", testDeleteRunning},
		{"DeleteIdempotent", testDeleteIdempotent},
		{"StateUnknown", testStateUnknown},
		{"CreateTwice", testCreateTwice},
		{"StartTwice", testStartTwice},
		{"StopNotStarted", testStopNotStarted},
		{"InvalidID", testInvalidID},
		{"Restart", testRestart},
		// Optional capabilities: each runs when the backend implements it.
		{"Pause", testPause},
		{"Sync", testSync},
		{"Checkpoint", testCheckpoint},
		{"Disk", testDisk},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, env := newRuntime(t)
			tc.fn(t, rt, env)
		})
	}
}

// ID returns a sandbox id unique to t.
func ID(t *testing.T) string {
	r := strings.NewReplacer("/", "-", "_", "-", " ", "-", "#", "-")
	id := strings.ToLower(r.Replace(t.Name()))
	for strings.Contains(id, "--") {
		id = strings.ReplaceAll(id, "--", "-")
	}
	return strings.Trim(id, "-")
}

// create creates id and registers its deletion.
func create(t *testing.T, ctx context.Context, rt sandbox.Runtime, env Env, id string) {
	t.Helper()
	if err := rt.Create(ctx, id, env.Spec(t)); err != nil {
		t.Fatalf("Create(%q) = %v; want nil", id, err)
	}
	t.Cleanup(func() {
		if err := rt.Delete(context.WithoutCancel(ctx), id); err != nil {
			t.Errorf("cleanup: Delete(%q) = %v", id, err)
		}
	})
}

func wantState(t *testing.T, ctx context.Context, rt sandbox.Runtime, id string, want sandbox.Status) sandbox.State {
	t.Helper()
	st, err := rt.State(ctx, id)
	if err != nil {
		t.Fatalf("State(%q) error = %v; want %s", id, err, want)
	}
	if st.Status != want {
		t.Fatalf("State(%q) = %+v; want status %s", id, st, want)
	}
	return st
}

// pidAlive reports whether pid exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// checkGone asserts that nothing of id is left: no process, mount, cgroup
// or directory.
func checkGone(t *testing.T, env Env, id string, pid int) {
	t.Helper()
	if pid > 0 && pidAlive(pid) {
		t.Errorf("after Delete(%q): pid %d is alive; want gone", id, pid)
	}
	info := env.MountInfo
	if info == "" {
		info = "/proc/self/mountinfo"
	}
	if env.RunDir != "" {
		dir := strings.TrimSuffix(env.RunDir, "/") + "/" + id
		b, err := os.ReadFile(info)
		if err != nil {
			t.Fatalf("read %s: %v", info, err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
				t.Errorf("after Delete(%q): mount left: %s", id, l)
			}
		}
		if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Delete(%q): Lstat(%q) = %v; want not exist", id, dir, err)
		}
	}
	if env.CgroupDirs != nil {
		if dirs := env.CgroupDirs(id); len(dirs) > 0 {
			t.Errorf("after Delete(%q): cgroups left: %q", id, dirs)
		}
	}
}

// dialAgent checks that AgentAddr accepts connections (the listening
// socket is held by the stand-in PID 1, which need not accept).
func dialAgent(t *testing.T, rt sandbox.Runtime, id string) {
	t.Helper()
	addr := rt.AgentAddr(id)
	p, ok := strings.CutPrefix(addr, "unix://")
	if !ok {
		return // other schemes are checked by their backend
	}
	if len(p) >= 108 {
		t.Logf("AgentAddr(%q) = %q is too long to dial", id, addr)
		return
	}
	c, err := net.DialTimeout("unix", p, 5*time.Second)
	if err != nil {
		t.Errorf("dial AgentAddr(%q) = %q: %v; want a listening socket", id, addr, err)
		return
	}
	c.Close()
}

func testLifecycle(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	create(t, ctx, rt, env, id)
	wantState(t, ctx, rt, id, sandbox.StatusCreated)
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	st := wantState(t, ctx, rt, id, sandbox.StatusRunning)
	if st.Pid <= 0 || !pidAlive(st.Pid) {
		t.Fatalf("State(%q).Pid = %d; want a live pid", id, st.Pid)
	}
	if err := checkNetNS(st.NetNS); err != nil {
		t.Errorf("State(%q).NetNS = %q: %v; want the box's network namespace", id, st.NetNS, err)
	}
	dialAgent(t, rt, id)
	if err := rt.Stop(ctx, id, 200*time.Millisecond); err != nil {
		t.Fatalf("Stop(%q) = %v; want nil", id, err)
	}
	if got := wantState(t, ctx, rt, id, sandbox.StatusStopped); got.NetNS != "" {
		t.Errorf("State(%q).NetNS of a stopped sandbox = %q; want none", id, got.NetNS)
	}
	if pidAlive(st.Pid) {
		t.Errorf("after Stop(%q): pid %d alive; want gone", id, st.Pid)
	}
	if err := rt.Stop(ctx, id, time.Second); err != nil {
		t.Errorf("Stop(%q) of a stopped sandbox = %v; want nil", id, err)
	}
	if err := rt.Delete(ctx, id); err != nil {
		t.Fatalf("Delete(%q) = %v; want nil", id, err)
	}
	if _, err := rt.State(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State(%q) after Delete = %v; want ErrNotFound", id, err)
	}
	checkGone(t, env, id, st.Pid)
}

func testDeleteRunning(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	create(t, ctx, rt, env, id)
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	st := wantState(t, ctx, rt, id, sandbox.StatusRunning)
	if err := rt.Delete(ctx, id); err != nil {
		t.Fatalf("Delete(%q) = %v; want nil", id, err)
	}
	checkGone(t, env, id, st.Pid)
}

func testDeleteIdempotent(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	if err := rt.Delete(ctx, id); err != nil {
		t.Errorf("Delete(%q) of an unknown sandbox = %v; want nil", id, err)
	}
	create(t, ctx, rt, env, id)
	for i := range 2 {
		if err := rt.Delete(ctx, id); err != nil {
			t.Errorf("Delete(%q) #%d = %v; want nil", id, i+1, err)
		}
	}
	checkGone(t, env, id, 0)
}

func testStateUnknown(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	if st, err := rt.State(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("State(%q) = %+v, %v; want ErrNotFound", id, st, err)
	}
	if err := rt.Start(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Start(%q) = %v; want ErrNotFound", id, err)
	}
}

func testCreateTwice(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	create(t, ctx, rt, env, id)
	if err := rt.Create(ctx, id, env.Spec(t)); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create(%q) twice = %v; want ErrAlreadyExists", id, err)
	}
	// The failed Create must not have damaged the first one.
	if err := rt.Start(ctx, id); err != nil {
		t.Errorf("Start(%q) after a failed second Create = %v; want nil", id, err)
	}
}

func testStartTwice(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	create(t, ctx, rt, env, id)
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	if err := rt.Start(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Start(%q) twice = %v; want ErrFailedPrecondition", id, err)
	}
}

func testStopNotStarted(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	create(t, ctx, rt, env, id)
	if err := rt.Stop(ctx, id, time.Second); err != nil {
		t.Errorf("Stop(%q) of a created sandbox = %v; want nil", id, err)
	}
}

func testInvalidID(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	for _, id := range []string{"", "../escape", "a/b", "-x", strings.Repeat("a", 77)} {
		if err := rt.Create(ctx, id, env.Spec(t)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Create(%q) = %v; want ErrInvalidArgument", id, err)
		}
		if _, err := rt.State(ctx, id); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("State(%q) = %v; want ErrInvalidArgument", id, err)
		}
	}
}

func testRestart(t *testing.T, rt sandbox.Runtime, env Env) {
	ctx := testutil.Context(t)
	id := ID(t)
	create(t, ctx, rt, env, id)
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	first := wantState(t, ctx, rt, id, sandbox.StatusRunning)
	if err := rt.Stop(ctx, id, 0); err != nil {
		t.Fatalf("Stop(%q) = %v; want nil", id, err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) of a stopped sandbox = %v; want nil", id, err)
	}
	second := wantState(t, ctx, rt, id, sandbox.StatusRunning)
	if second.Pid == first.Pid {
		t.Errorf("State(%q).Pid after restart = %d; want a new pid", id, second.Pid)
	}
	dialAgent(t, rt, id)
	if err := rt.Delete(ctx, id); err != nil {
		t.Fatalf("Delete(%q) = %v; want nil", id, err)
	}
	checkGone(t, env, id, second.Pid)
}

// start creates and starts id and returns its state.
func start(t *testing.T, ctx context.Context, rt sandbox.Runtime, env Env, id string) sandbox.State {
	t.Helper()
	create(t, ctx, rt, env, id)
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	return wantState(t, ctx, rt, id, sandbox.StatusRunning)
}

// testPause: Pause freezes a running box (paused, idempotent), Unpause
// thaws it (idempotent), a box that is not running cannot be paused, and
// a paused box can be deleted with nothing left.
func testPause(t *testing.T, rt sandbox.Runtime, env Env) {
	p, ok := rt.(sandbox.Pauser)
	if !ok {
		t.Skip("the backend is not a sandbox.Pauser")
	}
	ctx := testutil.Context(t)
	id := ID(t)
	created := id + "-created"
	create(t, ctx, rt, env, created)
	if err := p.Pause(ctx, created); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Pause(%q) of a created sandbox = %v; want ErrFailedPrecondition", created, err)
	}
	if err := p.Pause(ctx, id+"-unknown"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Pause of an unknown sandbox = %v; want ErrNotFound", err)
	}
	st := start(t, ctx, rt, env, id)
	for i := range 2 {
		if err := p.Pause(ctx, id); err != nil {
			t.Fatalf("Pause(%q) #%d = %v; want nil", id, i+1, err)
		}
		if got := wantState(t, ctx, rt, id, sandbox.StatusPaused); got.NetNS != st.NetNS {
			t.Errorf("State(%q).NetNS of the paused sandbox = %q; want %q, as running", id, got.NetNS, st.NetNS)
		}
	}
	if !pidAlive(st.Pid) {
		t.Errorf("pid %d of paused sandbox %q is gone; want it kept", st.Pid, id)
	}
	for i := range 2 {
		if err := p.Unpause(ctx, id); err != nil {
			t.Fatalf("Unpause(%q) #%d = %v; want nil", id, i+1, err)
		}
		wantState(t, ctx, rt, id, sandbox.StatusRunning)
	}
	if err := p.Pause(ctx, id); err != nil {
		t.Fatalf("Pause(%q) = %v; want nil", id, err)
	}
	if err := rt.Delete(ctx, id); err != nil {
		t.Fatalf("Delete(%q) of a paused sandbox = %v; want nil", id, err)
	}
	checkGone(t, env, id, st.Pid)
}

// testSync: Sync flushes a created, running or paused box's file system,
// and names an unknown one.
func testSync(t *testing.T, rt sandbox.Runtime, env Env) {
	s, ok := rt.(sandbox.Syncer)
	if !ok {
		t.Skip("the backend is not a sandbox.Syncer")
	}
	ctx := testutil.Context(t)
	id := ID(t)
	if err := s.Sync(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Sync(%q) of an unknown sandbox = %v; want ErrNotFound", id, err)
	}
	create(t, ctx, rt, env, id)
	if err := s.Sync(ctx, id); err != nil {
		t.Errorf("Sync(%q) of a created sandbox = %v; want nil", id, err)
	}
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	if err := s.Sync(ctx, id); err != nil {
		t.Errorf("Sync(%q) of a running sandbox = %v; want nil", id, err)
	}
	if p, ok := rt.(sandbox.Pauser); ok {
		if err := p.Pause(ctx, id); err != nil {
			t.Fatalf("Pause(%q) = %v", id, err)
		}
		if err := s.Sync(ctx, id); err != nil {
			t.Errorf("Sync(%q) of a paused sandbox = %v; want nil", id, err)
		}
	}
	if err := s.Sync(ctx, "../escape"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Sync(%q) = %v; want ErrInvalidArgument", "../escape", err)
	}
}

// testCheckpoint: a Checkpointer saves a running box, leaving it running,
// and restores the save as a new box with a new pid; one that is
// FilesOnly refuses both with sandbox.ErrCheckpoint, keeps the box
// running and leaves nothing of the refused restore.
func testCheckpoint(t *testing.T, rt sandbox.Runtime, env Env) {
	ck, ok := rt.(sandbox.Checkpointer)
	if !ok {
		t.Skip("the backend is not a sandbox.Checkpointer")
	}
	ctx := testutil.Context(t)
	id := ID(t)
	copyID := id + "-copy"
	if f, ok := rt.(sandbox.FilesOnly); ok && f.FilesOnly() != "" {
		st := start(t, ctx, rt, env, id)
		if err := ck.Checkpoint(ctx, id, t.TempDir(), true); !errors.Is(err, sandbox.ErrCheckpoint) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Checkpoint(%q) of a files-only backend = %v; want ErrCheckpoint (failed precondition)", id, err)
		}
		if got := wantState(t, ctx, rt, id, sandbox.StatusRunning); got.Pid != st.Pid {
			t.Errorf("State(%q).Pid after a refused checkpoint = %d; want %d", id, got.Pid, st.Pid)
		}
		if err := ck.Restore(ctx, copyID, env.Spec(t), t.TempDir()); !errors.Is(err, sandbox.ErrCheckpoint) {
			t.Errorf("Restore(%q) of a files-only backend = %v; want ErrCheckpoint", copyID, err)
		}
		if _, err := rt.State(ctx, copyID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("State(%q) after a refused restore = %v; want ErrNotFound", copyID, err)
		}
		checkGone(t, env, copyID, 0)
		return
	}
	testutil.RequiresBinary(t, "criu")
	st := start(t, ctx, rt, env, id)
	waitComm(t, st.Pid, env.PID1Comm)
	dir := t.TempDir()
	if err := ck.Checkpoint(ctx, id, dir, true); err != nil {
		t.Fatalf("Checkpoint(%q, leave running) = %v; want nil", id, err)
	}
	if got := wantState(t, ctx, rt, id, sandbox.StatusRunning); got.Pid != st.Pid {
		t.Errorf("State(%q).Pid after a checkpoint that leaves it running = %d; want %d", id, got.Pid, st.Pid)
	}
	if err := ck.Restore(ctx, copyID, env.Spec(t), dir); err != nil {
		t.Fatalf("Restore(%q) = %v; want nil", copyID, err)
	}
	t.Cleanup(func() { _ = rt.Delete(context.WithoutCancel(ctx), copyID) })
	cp := wantState(t, ctx, rt, copyID, sandbox.StatusRunning)
	if cp.Pid == st.Pid || !pidAlive(cp.Pid) {
		t.Errorf("State(%q).Pid = %d; want a live pid other than the source's %d", copyID, cp.Pid, st.Pid)
	}
	if err := rt.Delete(ctx, copyID); err != nil {
		t.Fatalf("Delete(%q) = %v; want nil", copyID, err)
	}
	checkGone(t, env, copyID, cp.Pid)
}

// waitComm waits until pid runs a program named comm (see
// Env.PID1Comm).
func waitComm(t *testing.T, pid int, comm string) {
	t.Helper()
	if comm == "" {
		return
	}
	file := "/proc/" + strconv.Itoa(pid) + "/comm"
	var got []byte
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got, _ = os.ReadFile(file); strings.TrimSpace(string(got)) == comm {
			return
		}
	}
	t.Fatalf("%s = %q; want %q, PID 1 running its program", file, got, comm)
}

// diskLimit is the writable layer's size in the Disk subtest, and
// diskFill what it tries to write there.
const (
	diskLimit = 64 << 20
	diskFill  = 2 * diskLimit
)

// testDisk: a write past the box's disk limit fails with ENOSPC in the
// box, and the box lives: it is still running, and writes again once
// the file is removed.
func testDisk(t *testing.T, rt sandbox.Runtime, env Env) {
	if env.Disk == nil || env.Exec == nil {
		t.Skip("the backend sets no disk limit (Env.Disk, Env.Exec)")
	}
	ctx := testutil.Context(t)
	id := ID(t)
	if err := rt.Create(ctx, id, env.Disk(t, diskLimit)); err != nil {
		t.Fatalf("Create(%q) with a %d-byte disk = %v; want nil", id, diskLimit, err)
	}
	t.Cleanup(func() {
		if err := rt.Delete(context.WithoutCancel(ctx), id); err != nil {
			t.Errorf("cleanup: Delete(%q) = %v", id, err)
		}
	})
	if err := rt.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v; want nil", id, err)
	}
	st := wantState(t, ctx, rt, id, sandbox.StatusRunning)
	fill := "dd if=/dev/zero of=/fill bs=1048576 count=" + strconv.Itoa(diskFill>>20) + " && sync /fill; echo exit=$?"
	out, err := env.Exec(ctx, id, "/bin/sh", "-c", fill)
	if err != nil {
		t.Fatalf("exec %q in %q = %v\n%s", fill, id, err, out)
	}
	if !strings.Contains(string(out), "No space left on device") || strings.Contains(string(out), "exit=0") {
		t.Errorf("writing %d bytes on a %d-byte disk: %s\nwant ENOSPC (No space left on device)", diskFill, diskLimit, out)
	}
	if got := wantState(t, ctx, rt, id, sandbox.StatusRunning); got.Pid != st.Pid || !pidAlive(st.Pid) {
		t.Errorf("State(%q).Pid after a full disk = %d (alive %v); want %d, alive", id, got.Pid, pidAlive(st.Pid), st.Pid)
	}
	again := "rm /fill && echo written > /again && cat /again"
	if out, err := env.Exec(ctx, id, "/bin/sh", "-c", again); err != nil || strings.TrimSpace(string(out)) != "written" {
		t.Errorf("exec %q in %q after a full disk = %q, %v; want \"written\": the box lives", again, id, out, err)
	}
}
