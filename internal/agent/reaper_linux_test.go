package agent

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// procStat is the part of /proc/<pid>/stat the reaper tests look at.
type procStat struct {
	state     byte
	ppid      int
	starttime uint64
}

// readProcStat parses /proc/<pid>/stat; ok is false when the pid is gone.
func readProcStat(t testing.TB, pid int) (st procStat, ok bool) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields that follow start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		t.Fatalf("/proc/%d/stat: malformed %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), f[1] field 4 (ppid), f[19] field 22 (starttime).
	if len(f) < 20 {
		t.Fatalf("/proc/%d/stat: too few fields in %q", pid, b)
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("/proc/%d/stat: ppid %q: %v", pid, f[1], err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		t.Fatalf("/proc/%d/stat: starttime %q: %v", pid, f[19], err)
	}
	return procStat{state: f[0][0], ppid: ppid, starttime: start}, true
}

// zombieChildren lists the zombies whose parent is this process.
func zombieChildren(t testing.TB) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(t, pid); ok && st.ppid == self && st.state == 'Z' {
			out = append(out, pid)
		}
	}
	return out
}

// TestReaperReapsOrphans starts a command that leaves background
// grandchildren behind and exits. The grandchildren are re-parented to the
// agent (a child subreaper when not PID 1), and when they exit later the
// reaper must collect them: no zombie may stay behind.
func TestReaperReapsOrphans(t *testing.T) {
	c := startAgent(t, Config{})
	const n = 16
	gate := filepath.Join(t.TempDir(), "go")
	// Each orphan waits for the gate file, so it is still alive (and
	// re-parented) when the command ends, and exits only when told to.
	script := fmt.Sprintf(`i=0
while [ $i -lt %d ]; do
	(while [ ! -e '%s' ]; do sleep 0.01; done; exit 0) >/dev/null 2>&1 </dev/null &
	echo $!
	i=$((i+1))
done
exit 0`, n, gate)
	r, err := run(t.Context(), t, c, sh(script), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.end.GetExited() || r.end.GetExitCode() != 0 {
		t.Fatalf("end = %v; want exit code 0", r.end)
	}
	var pids []int
	for _, f := range strings.Fields(r.stdout.String()) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("stdout %q: %v", r.stdout.String(), err)
		}
		pids = append(pids, pid)
	}
	if len(pids) != n {
		t.Fatalf("got %d orphan pids (%q); want %d", len(pids), r.stdout.String(), n)
	}
	// The command has ended, so the orphans now belong to this process.
	// The kernel re-parents them when the shell exits, which the end event
	// follows; poll briefly anyway in case the end event won the race.
	self := os.Getpid()
	starts := make(map[int]uint64, n)
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for {
			st, ok := readProcStat(t, pid)
			if !ok {
				t.Fatalf("orphan %d vanished before the gate opened", pid)
			}
			if st.state == 'Z' {
				t.Fatalf("orphan %d is a zombie before the gate opened", pid)
			}
			if st.ppid == self {
				starts[pid] = st.starttime
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("orphan %d has parent %d; want this process (%d): not a subreaper?", pid, st.ppid, self)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Let them all exit at once: their SIGCHLDs coalesce, and the reaper
	// must still collect every one of them.
	mustWrite(t, gate, "")
	deadline = time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, pid := range pids {
			st, ok := readProcStat(t, pid)
			if !ok || st.starttime != starts[pid] {
				continue // reaped (the pid may even have been reused)
			}
			left = append(left, fmt.Sprintf("%d(%c)", pid, st.state))
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans not reaped 10s after they were told to exit: %v", left)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Nothing else of ours lingers as a zombie either.
	deadline = time.Now().Add(5 * time.Second)
	for {
		z := zombieChildren(t)
		if len(z) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("zombie children of the agent remain: %v", z)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReaperWatchesPidfd: a child's exit reaches its waiter through the
// child's pidfd alone. The test runs again in a process of its own (this
// test binary), where nothing handles SIGCHLD, so without the pidfd nothing
// would reap the child and its waiter would wait forever.
func TestReaperWatchesPidfd(t *testing.T) {
	const childEnv = "CORRAL_TEST_REAPER_PIDFD"
	if os.Getenv(childEnv) != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReaperWatchesPidfd$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), childEnv+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestReaperWatchesPidfd")) {
			t.Fatalf("in a process of its own: %v\n%s", err, out)
		}
		return
	}
	r := &reaper{waiters: make(map[int]chan exitStatus)}
	for i := range 3 {
		pid, ch, err := r.start(func() (int, error) {
			p, err := os.StartProcess("/bin/sh", []string{"sh", "-c", fmt.Sprintf("exit %d", 7+i)}, &os.ProcAttr{})
			if err != nil {
				return 0, err
			}
			pid := p.Pid
			_ = p.Release()
			return pid, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case ws := <-ch:
			if !ws.Exited() || ws.ExitStatus() != 7+i {
				t.Errorf("child %d: wait status %#x; want exit %d", pid, uint32(ws.WaitStatus), 7+i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("child %d: no exit dispatched 10 s after it started", pid)
		}
		if _, ok := readProcStat(t, pid); ok {
			t.Errorf("child %d still exists (a zombie?) after its exit was dispatched", pid)
		}
	}
}
