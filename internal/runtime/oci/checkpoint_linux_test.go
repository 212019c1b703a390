package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/runtime/runtimetest"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// counterScript runs a background process that writes "<n> <hostname>" to
// /tmp/c every 20 ms and its own pid (as the box sees it) to /tmp/pid,
// then waits.
const counterScript = `/bin/sh -c 'echo $$ > /tmp/pid; i=0; while true; do i=$((i+1)); echo "$i $(cat /proc/sys/kernel/hostname)" > /tmp/c.new; mv /tmp/c.new /tmp/c; sleep 0.02; done' &
wait`

// requiresCRIU skips t when CRIU cannot run here.
func requiresCRIU(t testing.TB) {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, "criu")
	if out, err := exec.Command("criu", "check").CombinedOutput(); err != nil {
		t.Skipf("criu check: %v: %s", err, out)
	}
}

// addApplets adds busybox applet links to a root made by busyboxRootfs.
func addApplets(t testing.TB, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", n)); err != nil && !errors.Is(err, fs.ErrExist) {
			t.Fatal(err)
		}
	}
}

// copyRoot copies a root directory (the "disk" of a fork).
func copyRoot(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dst
}

// copyRootPaused copies the root of running box id while the box is
// paused, as a fork does: a counter renames files in it, which cp would
// race with.
func copyRootPaused(t testing.TB, r *Runtime, id, root string) string {
	t.Helper()
	ctx := testutil.Context(t)
	if err := r.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	dst := copyRoot(t, root)
	if err := r.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
	return dst
}

// rootOf returns the host directory of a spec's root (a bind mount).
func rootOf(spec *sandbox.Spec) string { return spec.Rootfs[0].Source }

// counter reads /tmp/c of a root: the count and the hostname.
func counter(t testing.TB, root string) (int, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "tmp/c"))
	if err != nil {
		return 0, ""
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, ""
	}
	n, _ := strconv.Atoi(f[0])
	return n, f[1]
}

// waitCounter waits until the counter of root exceeds n and returns it.
func waitCounter(t testing.TB, root string, n int) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, _ := counter(t, root); c > n {
			return c
		}
		if time.Now().After(deadline) {
			c, _ := counter(t, root)
			t.Fatalf("counter in %s = %d after 10s; want > %d", root, c, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// run creates and starts sandbox id and registers its deletion and the
// check that it left nothing.
func run(t testing.TB, r *Runtime, id string, spec *sandbox.Spec) {
	t.Helper()
	ctx := context.Background()
	if err := r.Create(ctx, id, spec); err != nil {
		t.Fatalf("Create(%q) = %v", id, err)
	}
	cleanupBox(t, r, id)
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v", id, err)
	}
}

// cleanupBox registers the deletion of id and the check that nothing of
// it is left.
func cleanupBox(t testing.TB, r *Runtime, id string) {
	t.Cleanup(func() {
		if err := r.Delete(context.Background(), id); err != nil {
			t.Errorf("Delete(%q) = %v", id, err)
		}
		checkLeftNothing(t, r, id)
	})
}

// checkLeftNothing fails t when anything of sandbox id is left: its
// directory, a mount (in the host's or the runtime's namespace), a cgroup,
// the runtime's state or a process of its cgroup.
func checkLeftNothing(t testing.TB, r *Runtime, id string) {
	t.Helper()
	dir := r.Dir(id)
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete(%q): %s exists (%v)", id, dir, err)
	}
	for _, info := range []string{"/proc/self/mountinfo", r.MountInfoPath()} {
		if left, err := mount.Under(info, dir); err != nil || len(left) > 0 {
			t.Errorf("after Delete(%q): mounts in %s: %q, %v", id, info, left, err)
		}
	}
	if dirs, _ := cgroups.Dirs(cgroups.Root, r.CgroupPath(id)); len(dirs) > 0 {
		t.Errorf("after Delete(%q): cgroups left: %q", id, dirs)
	}
	if _, err := os.Stat(filepath.Join(r.cfg.StateDir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete(%q): runtime state left (%v)", id, err)
	}
}

// inBoxPid returns the pid, as the box sees it, of the host process hostPid.
func inBoxPid(hostPid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", hostPid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "NSpid:"); ok {
			f := strings.Fields(v)
			n, _ := strconv.Atoi(f[len(f)-1])
			return n
		}
	}
	return 0
}

// boxPids returns the host pids of the processes in id's cgroup (its
// pids controller: the v1 hierarchy, or the v2 cgroup).
func boxPids(t testing.TB, r *Runtime, id string) []int {
	t.Helper()
	d := filepath.Join(cgroups.Root, "pids", r.CgroupPath(id))
	if cgroups.DetectMode(cgroups.Root) == cgroups.Unified {
		d = filepath.Join(cgroups.Root, r.CgroupPath(id))
	}
	b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		t.Fatalf("processes of %s: %v", id, err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(f)
		pids = append(pids, n)
	}
	return pids
}

func TestPause(t *testing.T) {
	for _, bin := range []string{"crun", "runc"} {
		t.Run(bin, func(t *testing.T) {
			r := newTestRuntime(t, bin, WithProcessArgs("/bin/sh", "-c", counterScript))
			ctx := testutil.Context(t)
			id := runtimetest.ID(t)
			spec := testSpec(t, defaultResources)
			root := rootOf(spec)
			if err := r.Pause(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("Pause(%q) of an unknown sandbox = %v; want ErrNotFound", id, err)
			}
			run(t, r, id, spec)
			n := waitCounter(t, root, 2)
			for range 2 { // idempotent
				if err := r.Pause(ctx, id); err != nil {
					t.Fatalf("Pause(%q) = %v", id, err)
				}
			}
			if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusPaused {
				t.Fatalf("State(%q) of a paused sandbox = %+v, %v; want paused", id, st, err)
			}
			frozen, _ := counter(t, root)
			time.Sleep(200 * time.Millisecond)
			if c, _ := counter(t, root); c != frozen || c < n {
				t.Errorf("counter of a paused sandbox went from %d to %d; want it stopped", frozen, c)
			}
			for range 2 {
				if err := r.Unpause(ctx, id); err != nil {
					t.Fatalf("Unpause(%q) = %v", id, err)
				}
			}
			if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusRunning {
				t.Fatalf("State(%q) after Unpause = %+v, %v; want running", id, st, err)
			}
			waitCounter(t, root, frozen)
			// Delete of a paused sandbox thaws and kills it.
			if err := r.Pause(ctx, id); err != nil {
				t.Fatalf("Pause(%q) = %v", id, err)
			}
			if err := r.Delete(ctx, id); err != nil {
				t.Fatalf("Delete(%q) of a paused sandbox = %v", id, err)
			}
			checkLeftNothing(t, r, id)
		})
	}
}

func TestPauseNotRunning(t *testing.T) {
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sleep", "1000000"))
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	if err := r.Create(ctx, id, testSpec(t, defaultResources)); err != nil {
		t.Fatal(err)
	}
	cleanupBox(t, r, id)
	if err := r.Pause(ctx, id); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Pause(%q) of a created sandbox = %v; want ErrFailedPrecondition", id, err)
	}
	if err := r.Unpause(ctx, id); err != nil {
		t.Errorf("Unpause(%q) of a created sandbox = %v; want nil", id, err)
	}
}

// agentDir holds the test agent built by buildTestAgent; TestMain removes
// it.
var agentDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if agentDir != "" {
		os.RemoveAll(agentDir)
	}
	os.Exit(code)
}

// buildTestAgent builds testdata/agent (the agent on fd 3) once per test
// binary.
var buildTestAgent = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "corral-agent")
	if err != nil {
		return "", err
	}
	agentDir = dir
	out := filepath.Join(dir, "agent")
	cmd := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", out, "./testdata/agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build agent: %v: %s", err, b)
	}
	return out, nil
})

// agentSpec returns a spec whose PID 1 is the real agent.
func agentSpec(t testing.TB, res sandbox.Resources) *sandbox.Spec {
	t.Helper()
	bin, err := buildTestAgent()
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(t, res)
	spec.AgentBinary = bin
	addApplets(t, rootOf(spec), "tr", "hostname", "kill")
	return spec
}

// client returns an agent client for sandbox id, ready.
func client(t testing.TB, r *Runtime, id string) *agentclient.Client {
	t.Helper()
	c, err := agentclient.New(r.AgentAddr(id))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("agent of %s at %s: %v", id, r.AgentAddr(id), err)
	}
	return c
}

// execResult is the outcome of a command run through the agent.
type execResult struct {
	out  string
	exit int32
	oom  bool
}

// execIn runs sh -c script in the box through its agent.
func execIn(ctx context.Context, c *agentclient.Client, script string) (execResult, error) {
	stream, err := c.Process.Start(ctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}},
	}))
	if err != nil {
		return execResult{}, err
	}
	defer stream.Close()
	var res execResult
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		res.out += string(ev.GetData().GetStdout()) + string(ev.GetData().GetStderr())
		if e := ev.GetEnd(); e != nil {
			res.exit, res.oom = e.GetExitCode(), e.GetOomKilled()
		}
	}
	return res, stream.Err()
}

func mustExec(t testing.TB, c *agentclient.Client, script string) string {
	t.Helper()
	res, err := execIn(context.Background(), c, script)
	if err != nil || res.exit != 0 {
		t.Fatalf("exec %q = %+v, %v; want exit 0", script, res, err)
	}
	return res.out
}

// TestAgentAddr: the agent is reached at AgentAddr, in the box's network
// namespace, both for a box with its own network and for one on the
// host's network; the box's own processes are refused.
func TestAgentAddr(t *testing.T) {
	for _, host := range []bool{false, true} {
		t.Run(map[bool]string{false: "own-network", true: "host-network"}[host], func(t *testing.T) {
			r := newTestRuntime(t, "crun")
			id := runtimetest.ID(t)
			spec := agentSpec(t, defaultResources)
			spec.HostNetwork = host
			run(t, r, id, spec)
			c := client(t, r, id)
			defer c.Close()
			if got := mustExec(t, c, "echo hello"); got != "hello\n" {
				t.Errorf("exec echo through %s = %q; want hello", r.AgentAddr(id), got)
			}
			if host {
				err := r.Checkpoint(context.Background(), id, t.TempDir(), true)
				if !errors.Is(err, sandbox.ErrCheckpoint) {
					t.Errorf("Checkpoint(%q) of a box on the host's network = %v; want ErrCheckpoint", id, err)
				}
			}
			// A process of the box can reach the name (in its network
			// namespace) but the agent closes on it.
			out := mustExec(t, c, AgentPath+" probe @"+AgentSocketName)
			want := "refused:"
			if host {
				want = "refused: dial unix" // not in the box's namespace at all
			}
			if !strings.HasPrefix(out, want) {
				t.Errorf("a box process probing its agent got %q; want %q...", out, want)
			}
		})
	}
}

// TestCheckpointRestore: a box whose background process counts is
// checkpointed (its processes end), deleted, and restored under the same
// id on the same root: the same process, with the same pid in the box,
// counts on from where it was.
func TestCheckpointRestore(t *testing.T) {
	forRuntimes(t, testCheckpointRestore)
}

// forRuntimes runs fn for crun and runc, each with CRIU.
func forRuntimes(t *testing.T, fn func(t *testing.T, bin string)) {
	for _, bin := range []string{"crun", "runc"} {
		t.Run(bin, func(t *testing.T) {
			requiresCRIU(t)
			fn(t, bin)
		})
	}
}

func testCheckpointRestore(t *testing.T, bin string) {
	r := newTestRuntime(t, bin, WithProcessArgs("/bin/sh", "-c", counterScript))
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := testSpec(t, defaultResources)
	root := rootOf(spec)
	run(t, r, id, spec)
	waitCounter(t, root, 3)
	pidBefore, _ := os.ReadFile(filepath.Join(root, "tmp/pid"))
	img := t.TempDir()
	if err := r.Checkpoint(ctx, id, img, false); err != nil {
		t.Fatalf("Checkpoint(%q) = %v", id, err)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusStopped {
		t.Fatalf("State(%q) after Checkpoint = %+v, %v; want stopped", id, st, err)
	}
	saved, _ := counter(t, root)
	time.Sleep(100 * time.Millisecond)
	if c, _ := counter(t, root); c != saved {
		t.Fatalf("counter after Checkpoint went from %d to %d; want stopped", saved, c)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatalf("Delete(%q) = %v", id, err)
	}
	if err := r.Restore(ctx, id, spec, img); err != nil {
		t.Fatalf("Restore(%q) = %v", id, err)
	}
	st, err := r.State(ctx, id)
	if err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("State(%q) after Restore = %+v, %v; want running", id, st, err)
	}
	after := waitCounter(t, root, saved)
	if after > saved+25 { // 500 ms of counting: a restart from 0 reads low, not high
		t.Errorf("counter after Restore = %d; want it to go on from %d", after, saved)
	}
	pidAfter, _ := os.ReadFile(filepath.Join(root, "tmp/pid"))
	if string(pidAfter) != string(pidBefore) {
		t.Errorf("counter's pid file = %q after Restore; want %q (not rewritten)", pidAfter, pidBefore)
	}
	want, _ := strconv.Atoi(strings.TrimSpace(string(pidBefore)))
	found := false
	for _, p := range boxPids(t, r, id) {
		if inBoxPid(p) == want {
			found = true
		}
	}
	if !found {
		t.Errorf("no process of the restored box has pid %d in the box; want the counter's", want)
	}
	if _, err := os.Stat(filepath.Join(img, dumpLogFile)); err != nil {
		t.Errorf("CRIU's dump log: %v; want it kept in the image directory", err)
	}
	checkStdout(t, r, id, st.Pid)
}

// checkStdout checks that pid's stdout is sandbox id's log (the restore
// gave CRIU the new sandbox's log for the checkpointed one).
func checkStdout(t *testing.T, r *Runtime, id string, pid int) {
	t.Helper()
	got, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/1", pid))
	if want := filepath.Join(r.Dir(id), agentLog); err != nil || got != want {
		t.Errorf("stdout of the restored PID 1 = %q, %v; want %q", got, err, want)
	}
}

// TestForkRestore: a paused box is checkpointed with leaveRunning (as a
// fork does: it stays paused) and restored under a new id on a copy of its
// root, with its own hostname: two independent boxes.
func TestForkRestore(t *testing.T) { forRuntimes(t, testForkRestore) }

func testForkRestore(t *testing.T, bin string) {
	r := newTestRuntime(t, bin, WithProcessArgs("/bin/sh", "-c", counterScript))
	ctx := testutil.Context(t)
	src := runtimetest.ID(t)
	spec := testSpec(t, defaultResources)
	root := rootOf(spec)
	run(t, r, src, spec)
	waitCounter(t, root, 3)
	if err := r.Pause(ctx, src); err != nil {
		t.Fatal(err)
	}
	img := t.TempDir()
	if err := r.Checkpoint(ctx, src, img, true); err != nil {
		t.Fatalf("Checkpoint(%q, leaveRunning) = %v", src, err)
	}
	if st, err := r.State(ctx, src); err != nil || st.Status != sandbox.StatusPaused {
		t.Fatalf("State(%q) after Checkpoint(leaveRunning) of a paused box = %+v, %v; want paused", src, st, err)
	}
	forkSpec := *spec
	forkSpec.Rootfs = []mount.Mount{{Type: "bind", Source: copyRoot(t, root), Options: []string{"rbind"}}}
	forkSpec.Hostname = "fork"
	forkRoot := rootOf(&forkSpec)
	if err := r.Unpause(ctx, src); err != nil {
		t.Fatal(err)
	}
	fork := src + "-fork"
	if err := r.Restore(ctx, fork, &forkSpec, img); err != nil {
		t.Fatalf("Restore(%q) = %v", fork, err)
	}
	cleanupBox(t, r, fork)
	n, _ := counter(t, forkRoot)
	waitCounter(t, forkRoot, n)
	c, host := counter(t, forkRoot)
	waitCounter(t, forkRoot, c) // the hostname is read once per count
	if _, host = counter(t, forkRoot); host != "fork" {
		t.Errorf("hostname in the fork = %q; want fork", host)
	}
	cs, hs := counter(t, root)
	waitCounter(t, root, cs)
	if hs != "box" {
		t.Errorf("hostname in the source = %q; want box", hs)
	}
	// Independent: stopping the source leaves the fork counting.
	if err := r.Stop(ctx, src, 0); err != nil {
		t.Fatal(err)
	}
	c, _ = counter(t, forkRoot)
	waitCounter(t, forkRoot, c)
	for _, p := range boxPids(t, r, fork) {
		if !r.inCgroup(p, fork) {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); errors.Is(err, fs.ErrNotExist) {
				continue // a short-lived process of the counter's loop (sleep) that has exited since
			}
			t.Errorf("fork process %d is not in the fork's cgroup", p)
		}
	}
	if len(boxPids(t, r, fork)) == 0 {
		t.Errorf("fork's cgroup has no process")
	}
	st, err := r.State(ctx, fork)
	if err != nil {
		t.Fatal(err)
	}
	checkStdout(t, r, fork, st.Pid)
}

// TestRestoreLimits: a restored box gets its new spec's limits, and they
// hold: a memory hog is OOM-killed and forks stop at the pids limit.
func TestRestoreLimits(t *testing.T) { forRuntimes(t, testRestoreLimits) }

func testRestoreLimits(t *testing.T, bin string) {
	r := newTestRuntime(t, bin)
	ctx := testutil.Context(t)
	src := runtimetest.ID(t)
	spec := agentSpec(t, defaultResources)
	run(t, r, src, spec)
	c := client(t, r, src)
	mustExec(t, c, "echo ready")
	c.Close()
	img := t.TempDir()
	if err := r.Checkpoint(ctx, src, img, true); err != nil {
		t.Fatalf("Checkpoint(%q) = %v", src, err)
	}
	// The agent keeps up to 16 threads (reserved at its start, under the
	// source's limit), which count against the pids limit.
	small := sandbox.Resources{CPUs: 1, MemoryBytes: 48 << 20, Pids: 40}
	forkSpec := *spec
	forkSpec.Resources = small
	forkSpec.Rootfs = []mount.Mount{{Type: "bind", Source: copyRoot(t, rootOf(spec)), Options: []string{"rbind"}}}
	fork := src + "-small"
	if err := r.Restore(ctx, fork, &forkSpec, img); err != nil {
		t.Fatalf("Restore(%q) = %v", fork, err)
	}
	cleanupBox(t, r, fork)
	u, err := r.Usage(ctx, fork)
	if err != nil {
		t.Fatal(err)
	}
	if u.MemoryLimitBytes != uint64(small.MemoryBytes) || u.PidsLimit != uint64(small.Pids) {
		t.Errorf("Usage(%q) = memory limit %d, pids limit %d; want %d, %d", fork, u.MemoryLimitBytes, u.PidsLimit, small.MemoryBytes, small.Pids)
	}
	fc := client(t, r, fork)
	defer fc.Close()
	res, err := execIn(ctx, fc, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(res.out, "survived") || (!res.oom && res.exit != 137) {
		t.Errorf("memory hog in a box limited to %d bytes = %+v; want it OOM-killed", small.MemoryBytes, res)
	}
	res, err = execIn(ctx, fc, `i=0; while [ $i -lt 60 ]; do (sleep 30 &) 2>/dev/null; i=$((i+1)); done; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n; kill -9 -1`)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(strings.TrimSpace(res.out)); n == 0 || n > int(small.Pids) {
		t.Errorf("processes in a box limited to %d pids = %q; want 1..%d", small.Pids, res.out, small.Pids)
	}
	// The source keeps its own limits.
	if u, err := r.Usage(ctx, src); err != nil || u.MemoryLimitBytes != uint64(defaultResources.MemoryBytes) {
		t.Errorf("Usage(%q) of the source = %+v, %v; want its memory limit %d", src, u, err, defaultResources.MemoryBytes)
	}
}

// TestCheckpointRefusesTCP: a box with an established TCP connection
// (over its loopback) cannot be checkpointed: the error wraps
// ErrCheckpoint, names the reason, and the box keeps running.
func TestCheckpointRefusesTCP(t *testing.T) {
	requiresCRIU(t)
	// Each side's stdin is a pipe that never ends (nc hangs up at EOF).
	script := `sleep 1000 | nc -l -p 5555 > /dev/null &
sleep 0.2
sleep 1000 | nc 127.0.0.1 5555 > /dev/null &
` + counterScript
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sh", "-c", script))
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := testSpec(t, defaultResources)
	root := rootOf(spec)
	addApplets(t, root, "nc")
	run(t, r, id, spec)
	n := waitCounter(t, root, 3)
	st, err := r.State(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the connection: state 01 (ESTABLISHED) in the box's table.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b4, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", st.Pid))
		b6, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp6", st.Pid))
		b := append(b4, b6...)
		if strings.Contains(string(b), ":15B3 ") && strings.Contains(string(b), " 01 ") {
			break
		}
		if time.Now().After(deadline) {
			logb, _ := os.ReadFile(filepath.Join(r.Dir(id), agentLog))
			t.Fatalf("no established connection on port 5555 in the box: %s\nbox output: %s", b, logb)
		}
	}
	for _, leave := range []bool{false, true} {
		img := t.TempDir()
		err := r.Checkpoint(ctx, id, img, leave)
		if !errors.Is(err, sandbox.ErrCheckpoint) || !strings.Contains(err.Error(), "TCP connection") {
			t.Fatalf("Checkpoint(%q, leaveRunning=%v) with an established TCP connection = %v; want ErrCheckpoint naming it", id, leave, err)
		}
		if strings.Count(err.Error(), "\n") > 0 {
			t.Errorf("Checkpoint error has several lines: %q", err)
		}
		if b, err := os.ReadFile(filepath.Join(img, dumpLogFile)); err != nil || len(b) == 0 {
			t.Errorf("dump log after a failed checkpoint: %d bytes, %v; want it kept", len(b), err)
		}
		if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusRunning {
			t.Fatalf("State(%q) after a failed Checkpoint = %+v, %v; want running", id, st, err)
		}
		n = waitCounter(t, root, n)
	}
}

// TestCheckpointRefusesUserNS: a box with a user namespace is refused a
// memory checkpoint before CRIU runs (CRIU cannot restore it: see
// errUserNSCheckpoint), with an error that names userns = "off"; the box
// keeps running, unfrozen, and the image directory stays empty.
func TestCheckpointRefusesUserNS(t *testing.T) {
	requiresCRIU(t)
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sh", "-c", counterScript))
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := testSpec(t, defaultResources)
	spec.UserNS = &testRange
	root := rootOf(spec)
	run(t, r, id, spec)
	n := waitCounter(t, root, 1)
	for _, leave := range []bool{false, true} {
		img := t.TempDir()
		err := r.Checkpoint(ctx, id, img, leave)
		if !errors.Is(err, sandbox.ErrCheckpoint) || !errors.Is(err, errUserNSCheckpoint) || !strings.Contains(err.Error(), `userns = "off"`) {
			t.Errorf("Checkpoint(%q, leaveRunning=%v) of a box with a user namespace = %v; want errUserNSCheckpoint naming userns = \"off\"", id, leave, err)
		}
		if ents, err := os.ReadDir(img); err != nil || len(ents) > 0 {
			t.Errorf("image directory after a refused Checkpoint: %d entries, %v; want empty (CRIU never ran)", len(ents), err)
		}
		if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusRunning {
			t.Fatalf("State(%q) after a refused Checkpoint = %+v, %v; want running", id, st, err)
		}
		n = waitCounter(t, root, n)
	}
}

// TestCheckpointNonRootProcess: a box (without a user namespace) with a
// process running as a user other than root is checkpointed where the
// daemon has CAP_SYS_RESOURCE; where it has not, CRIU cannot read that
// process's limits and the error says so in words. Either way the box
// keeps running.
func TestCheckpointNonRootProcess(t *testing.T) {
	requiresCRIU(t)
	r := newTestRuntime(t, "crun")
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := agentSpec(t, defaultResources)
	run(t, r, id, spec)
	c := client(t, r, id)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	stream, err := c.Process.Start(sctx, connect.NewRequest(&pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "sleep 1000 </dev/null >/dev/null 2>&1 &"}, User: ptr("1000")},
	}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	stream.Close()
	cancel()
	c.Close()
	found := false
	for _, p := range boxPids(t, r, id) {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		found = found || strings.Contains(string(b), "\nUid:\t1000\t")
	}
	if !found {
		t.Fatal("no process of the box runs as uid 1000")
	}
	err = r.Checkpoint(ctx, id, t.TempDir(), true)
	t.Logf("Checkpoint(%q) = %v", id, err)
	if hasCapSysResource(t) {
		if err != nil {
			t.Errorf("Checkpoint(%q) with a process of uid 1000, daemon with CAP_SYS_RESOURCE = %v; want nil", id, err)
		}
	} else if !errors.Is(err, sandbox.ErrCheckpoint) || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
		t.Errorf("Checkpoint(%q) with a process of uid 1000, daemon without CAP_SYS_RESOURCE = %v; want ErrCheckpoint naming CAP_SYS_RESOURCE", id, err)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("State(%q) after Checkpoint = %+v, %v; want running", id, st, err)
	}
}

func ptr[T any](v T) *T { return &v }

// hasCapSysResource reports whether the test process has CAP_SYS_RESOURCE
// in its effective set.
func hasCapSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
			return eff&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// TestCheckpointAgentConnections: an open stream from the daemon to the
// agent (a running command) makes Checkpoint fail, after its retries, with
// an error that says so; the box keeps running. Once the daemon has closed
// its connections, also while the box is paused and the agent cannot see
// them close, the checkpoint works, and the restored agent answers at the
// same address.
func TestCheckpointAgentConnections(t *testing.T) { forRuntimes(t, testCheckpointAgentConnections) }

func testCheckpointAgentConnections(t *testing.T, bin string) {
	r := newTestRuntime(t, bin)
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := agentSpec(t, defaultResources)
	run(t, r, id, spec)
	c := client(t, r, id)
	mustExec(t, c, "echo warm")

	sctx, cancel := context.WithCancel(ctx)
	started := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		stream, err := c.Process.Start(sctx, connect.NewRequest(&pb.StartRequest{
			Process: &pb.ProcessConfig{Cmd: "/bin/sleep", Args: []string{"30"}},
		}))
		if err != nil {
			close(started)
			return
		}
		defer stream.Close()
		first := true
		for stream.Receive() {
			if first {
				close(started)
				first = false
			}
		}
	}()
	<-started
	err := r.Checkpoint(ctx, id, t.TempDir(), true)
	if !errors.Is(err, sandbox.ErrCheckpoint) || !strings.Contains(err.Error(), "unix socket") {
		t.Errorf("Checkpoint(%q) with a stream open to the agent = %v; want ErrCheckpoint naming the connection", id, err)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("State(%q) after a failed Checkpoint = %+v, %v; want running", id, st, err)
	}
	cancel()
	<-done
	mustExec(t, c, "echo still here")
	// An idle connection left open, without leaveRunning (suspend): the
	// processes are not killed.
	err = r.Checkpoint(ctx, id, t.TempDir(), false)
	if !errors.Is(err, sandbox.ErrCheckpoint) {
		t.Errorf("Checkpoint(%q) with an idle connection open = %v; want ErrCheckpoint", id, err)
	}
	if st, err := r.State(ctx, id); err != nil || st.Status != sandbox.StatusRunning {
		t.Fatalf("State(%q) after a failed Checkpoint without leaveRunning = %+v, %v; want running", id, st, err)
	}
	mustExec(t, c, "echo still here")

	// Paused, then the daemon drops its (idle) connections: the agent is
	// frozen and keeps its ends, whose peers are gone.
	if err := r.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	c.Close()
	checkpointAndRestore(t, r, id, spec, "of a paused box with no connection left")
	c = client(t, r, id)
	defer c.Close()
	if got := mustExec(t, c, "echo back; hostname"); got != "back\nbox\n" {
		t.Errorf("exec after Restore = %q; want back, box", got)
	}
}

// TestRestoreFailureLeavesNothing: a restore that CRIU cannot complete
// (a file the processes held open is missing from the new root) fails
// with ErrCheckpoint and leaves nothing; one from a directory that holds no
// checkpoint is ErrNotFound.
func TestRestoreFailureLeavesNothing(t *testing.T) {
	requiresCRIU(t)
	script := "echo x > /tmp/held; exec 4</tmp/held\n" + counterScript
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sh", "-c", script))
	ctx, cancel := context.WithTimeout(testutil.Context(t), time.Minute)
	defer cancel()
	id := runtimetest.ID(t)
	spec := testSpec(t, defaultResources)
	run(t, r, id, spec)
	waitCounter(t, rootOf(spec), 1)
	if err := r.Restore(ctx, id+"-x", spec, t.TempDir()); !errdefs.IsNotFound(err) {
		t.Errorf("Restore from an empty directory = %v; want ErrNotFound", err)
	}
	checkLeftNothing(t, r, id+"-x")
	img := t.TempDir()
	if err := r.Checkpoint(ctx, id, img, true); err != nil {
		t.Fatal(err)
	}
	badSpec := *spec
	badRoot := copyRootPaused(t, r, id, rootOf(spec))
	if err := os.Remove(filepath.Join(badRoot, "tmp/held")); err != nil {
		t.Fatal(err)
	}
	badSpec.Rootfs = []mount.Mount{{Type: "bind", Source: badRoot, Options: []string{"rbind"}}}
	bad := id + "-bad"
	err := r.Restore(ctx, bad, &badSpec, img)
	if !errors.Is(err, sandbox.ErrCheckpoint) {
		t.Errorf("Restore(%q) onto a root that lacks an open file = %v; want ErrCheckpoint", bad, err)
	}
	t.Logf("Restore(%q) = %v", bad, err)
	checkLeftNothing(t, r, bad)
	if _, err := os.Stat(filepath.Join(img, "restore-"+bad+".log")); err != nil {
		t.Errorf("restore log of the failed restore: %v; want it in the image directory", err)
	}

	// Truncated page images make CRIU 4.1 loop forever, logging: the
	// restore is stopped once its log passes the limit.
	defer func(l int64) { criuLogLimit = l }(criuLogLimit)
	criuLogLimit = 4 << 20
	pages, _ := filepath.Glob(filepath.Join(img, "pages-*.img"))
	for _, p := range pages {
		if err := os.Truncate(p, 0); err != nil {
			t.Fatal(err)
		}
	}
	stuck := id + "-stuck"
	err = r.Restore(ctx, stuck, spec, img)
	if !errors.Is(err, sandbox.ErrCheckpoint) {
		t.Errorf("Restore(%q) from truncated images = %v; want ErrCheckpoint", stuck, err)
	}
	t.Logf("Restore(%q) = %v", stuck, err)
	checkLeftNothing(t, r, stuck)
	if fi, err := os.Stat(filepath.Join(img, "restore-"+stuck+".log")); err != nil || fi.Size() > logTail {
		t.Errorf("kept restore log: %v, %v; want at most %d bytes", fi, err, logTail)
	}
}

// BenchmarkCheckpointRestore measures, on a small process tree (a shell
// whose child counts, and its sleeps):
//   - checkpoint: Checkpoint with leaveRunning of a running box (fork);
//   - restore: Restore of that checkpoint under a new id (Delete excluded);
//   - restore+exec: Restore of a box whose PID 1 is the agent, then the
//     first exec round trip through it (what a caller waits for).
func BenchmarkCheckpointRestore(b *testing.B) {
	requiresCRIU(b)
	ctx := context.Background()
	b.Run("checkpoint", func(b *testing.B) {
		r := newTestRuntime(b, "crun", WithProcessArgs("/bin/sh", "-c", counterScript))
		spec := testSpec(b, defaultResources)
		run(b, r, "src", spec)
		waitCounter(b, rootOf(spec), 1)
		for b.Loop() {
			b.StopTimer()
			img := b.TempDir()
			b.StartTimer()
			if err := r.Checkpoint(ctx, "src", img, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		r := newTestRuntime(b, "crun", WithProcessArgs("/bin/sh", "-c", counterScript))
		spec := testSpec(b, defaultResources)
		run(b, r, "src", spec)
		waitCounter(b, rootOf(spec), 1)
		img := b.TempDir()
		if err := r.Checkpoint(ctx, "src", img, false); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("copy-%d", i)
			if err := r.Restore(ctx, id, spec, img); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := r.Delete(ctx, id); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	b.Run("restore+exec", func(b *testing.B) {
		r := newTestRuntime(b, "crun")
		spec := agentSpec(b, defaultResources)
		run(b, r, "src", spec)
		c := client(b, r, "src")
		mustExec(b, c, "true")
		c.Close()
		img := b.TempDir()
		if err := r.Checkpoint(ctx, "src", img, false); err != nil {
			b.Fatal(err)
		}
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("copy-%d", i)
			if err := r.Restore(ctx, id, spec, img); err != nil {
				b.Fatal(err)
			}
			c := client(b, r, id)
			mustExec(b, c, "true")
			b.StopTimer()
			c.Close()
			if err := r.Delete(ctx, id); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
}

// TestSync: a file written in a box whose root's writable layer is on an
// ext4 disk image is in a copy of that image taken after Pause and Sync
// (read with debugfs, without mounting the copy).
func TestSync(t *testing.T) {
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (apt-get install e2fsprogs)", tool)
		}
	}
	r := newTestRuntime(t, "crun")
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := agentSpec(t, defaultResources)
	lower := rootOf(spec)
	work := t.TempDir()
	seed := filepath.Join(work, "seed")
	for _, d := range []string{"upper", "work"} {
		if err := os.MkdirAll(filepath.Join(seed, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	disk := filepath.Join(work, "disk.img")
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-d", seed, disk, "32M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mnt := filepath.Join(work, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	spec.Rootfs = []mount.Mount{
		{Type: "ext4", Source: disk, Target: mnt, Options: []string{"loop"}},
		{Type: "overlay", Source: "overlay", Options: []string{
			"lowerdir=" + lower, "upperdir=" + mnt + "/upper", "workdir=" + mnt + "/work",
		}},
	}
	if err := r.Sync(ctx, id); !errdefs.IsNotFound(err) {
		t.Errorf("Sync(%q) of an unknown sandbox = %v; want ErrNotFound", id, err)
	}
	run(t, r, id, spec)
	c := client(t, r, id)
	defer c.Close()
	mustExec(t, c, "echo synced-data > /synced")
	if err := r.Pause(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx, id); err != nil {
		t.Fatalf("Sync(%q) = %v", id, err)
	}
	cp := filepath.Join(work, "copy.img")
	if out, err := exec.Command("cp", "--sparse=always", disk, cp).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	out, err := exec.Command("debugfs", "-R", "cat /upper/synced", cp).Output()
	if err != nil || string(out) != "synced-data\n" {
		t.Errorf("/upper/synced in a copy of the disk after Sync = %q, %v; want synced-data", out, err)
	}
	if err := r.Unpause(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestParallelRestores: copies restored at the same time from one
// checkpoint (as a fork of several does) all run.
func TestParallelRestores(t *testing.T) {
	requiresCRIU(t)
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sh", "-c", counterScript))
	ctx := testutil.Context(t)
	src := runtimetest.ID(t)
	spec := testSpec(t, defaultResources)
	run(t, r, src, spec)
	n := waitCounter(t, rootOf(spec), 1)
	img := t.TempDir()
	if err := r.Checkpoint(ctx, src, img, true); err != nil {
		t.Fatal(err)
	}
	const copies = 3
	roots := make([]string, copies)
	errs := make([]error, copies)
	var wg sync.WaitGroup
	for i := range copies {
		roots[i] = copyRootPaused(t, r, src, rootOf(spec))
		id := fmt.Sprintf("%s-%d", src, i)
		cleanupBox(t, r, id)
		s := *spec
		s.Rootfs = []mount.Mount{{Type: "bind", Source: roots[i], Options: []string{"rbind"}}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.Restore(ctx, id, &s, img)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Restore of copy %d = %v", i, err)
			continue
		}
		waitCounter(t, roots[i], n)
	}
}

// TestCheckpointAfterDaemonRestart: a Runtime made again on the same
// directories (a restarted daemon, whose runtime thread has a new mount
// namespace without the old one's mounts) checkpoints a box the first one
// started, restores it, and reaches its agent.
func TestCheckpointAfterDaemonRestart(t *testing.T) {
	requiresCRIU(t)
	r := newTestRuntime(t, "crun")
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	spec := agentSpec(t, defaultResources)
	if err := r.Create(ctx, id, spec); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	c := client(t, r, id)
	mustExec(t, c, "echo before > /f")
	c.Close()
	r.Close()
	r2, err := New(r.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r2.Close() })
	cleanupBox(t, r2, id)
	c = client(t, r2, id)
	if got := mustExec(t, c, "cat /f"); got != "before\n" {
		t.Fatalf("exec through a new Runtime = %q", got)
	}
	c.Close()
	checkpointAndRestore(t, r2, id, spec, "after a restart")
	c = client(t, r2, id)
	defer c.Close()
	if got := mustExec(t, c, "cat /f"); got != "before\n" {
		t.Errorf("exec after Restore = %q; want before", got)
	}
}

// checkpointAndRestore checkpoints sandbox id (stopping it), deletes it and
// restores it from the checkpoint; when names the case in failures.
func checkpointAndRestore(t *testing.T, r *Runtime, id string, spec *sandbox.Spec, when string) {
	t.Helper()
	ctx := testutil.Context(t)
	img := t.TempDir()
	if err := r.Checkpoint(ctx, id, img, false); err != nil {
		t.Fatalf("Checkpoint(%q) %s = %v", id, when, err)
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore(ctx, id, spec, img); err != nil {
		t.Fatalf("Restore(%q) %s = %v", id, when, err)
	}
}

// TestEndStray checks that the group of a checkpoint left by a killed
// daemon is let finish, or ended once strayWait is over, members included,
// and that a pid reused by another process is left alone.
func TestEndStray(t *testing.T) {
	defer func(w time.Duration) { strayWait = w }(strayWait)
	strayWait = 100 * time.Millisecond
	r := &Runtime{cfg: Config{RunDir: t.TempDir()}}
	const id = "stray"
	if err := os.MkdirAll(r.Dir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatalf("no checkpoint in flight: %v", err)
	}
	if err := r.EndStray(context.Background(), "../x"); err == nil {
		t.Error("EndStray took an invalid id")
	}
	// A leader and a member that outlives it, as crun and its CRIU.
	start := func() (*exec.Cmd, int) {
		cmd := exec.Command("sh", "-c", "sleep 60 & echo $!; exec sleep 60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var member int
		if _, err := fmt.Fscan(out, &member); err != nil {
			t.Fatal(err)
		}
		reaped := make(chan struct{})
		go func() { _ = cmd.Wait(); close(reaped) }() // reap the leader, as init would
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-reaped })
		return cmd, member
	}
	group := filepath.Join(r.Dir(id), criuGroupFile)
	write := func(pid int, st uint64) {
		if err := os.WriteFile(group, []byte(fmt.Sprintf("%d %d\n", pid, st)), 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// A different start time: the pid now names another process.
	other, _ := start()
	st, err := procStartTime(other.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	write(other.Process.Pid, st+1)
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if !groupAlive(other.Process.Pid) {
		t.Error("EndStray killed a group whose leader's start time differs")
	}
	if _, err := os.Stat(group); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group file left: %v", err)
	}

	// The recorded group: leader and member both end.
	write(other.Process.Pid, st)
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if groupAlive(other.Process.Pid) {
		t.Error("a member of the stray group is still running")
	}
	if _, err := os.Stat(group); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group file left: %v", err)
	}

	// The leader is gone (crun died with the daemon), its member is not.
	leader, member := start()
	st, err = procStartTime(leader.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	write(leader.Process.Pid, st)
	_ = syscall.Kill(leader.Process.Pid, syscall.SIGKILL)
	for i := 0; i < 500; i++ {
		if _, err := procStartTime(leader.Process.Pid); err != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if syscall.Kill(member, 0) != nil {
		t.Fatal("the member died with its leader")
	}
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if groupAlive(leader.Process.Pid) {
		t.Error("the member of a stray group whose leader is gone is still running")
	}

	// Killed before the group was known: the file says so, and the group
	// is found by the sandbox directory on its leader's command line.
	write2 := func(s string) {
		if err := os.WriteFile(group, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write2(criuStarting + "\n")
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatalf("a runtime that never started: %v", err)
	}
	if _, err := os.Stat(group); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("group file left: %v", err)
	}
	named := exec.Command("sh", "-c", "sleep 60 & wait; : --log "+filepath.Join(r.Dir(id), runtimeLog))
	named.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := named.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = named.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-named.Process.Pid, syscall.SIGKILL) })
	write2(criuStarting + "\n")
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if groupAlive(named.Process.Pid) {
		t.Error("a stray group known only by its command line is still running")
	}

	// A group that ends within strayWait ends by itself, not killed.
	strayWait = 20 * time.Second
	done := exec.Command("sh", "-c", "sleep 0.3; exit 7")
	done.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := done.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- done.Wait() }() // reap it, as init would
	if st, err = procStartTime(done.Process.Pid); err != nil {
		t.Fatal(err)
	}
	write(done.Process.Pid, st)
	began := time.Now()
	if err := r.EndStray(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("EndStray waited %s for a group that ended after 0.3 s", took)
	}
	var ee *exec.ExitError
	if err := <-exited; !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Errorf("a stray group that ends by itself: %v; want exit status 7, not killed", err)
	}
}
