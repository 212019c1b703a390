//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestManagedProcesses: a detached command's output from its start, attach
// with input, wait's exit code, kill by tag and ps's history, on a real box.
func TestManagedProcesses(t *testing.T) {
	d := startDaemon(t)
	id := d.create()
	pid := strings.TrimSpace(d.must("exec", "-d", "-i", "--tag", "job", id, "--", "sh", "-c", "echo started; echo oops >&2; read x; echo got $x; exit 7"))
	if pid == "" {
		t.Fatal("exec -d printed no pid")
	}
	// Its output before anyone attached, once it is there.
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errOut, err := d.corral("logs", id, "job")
		if err == nil && out == "started\n" && errOut == "oops\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("logs = %q, %q, %v; want the output so far", out, errOut, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, errOut, err := d.corralIn([]byte("in\n"), "attach", id, pid)
	if exitCode(err) != 7 || out != "started\ngot in\n" || errOut != "oops\n" {
		t.Errorf("attach = %d, %q, %q; want 7, the replay and the answer", exitCode(err), out, errOut)
	}
	if _, _, err := d.corral("wait", id, "job"); exitCode(err) != 7 {
		t.Errorf("wait after the end = %v; want exit 7", err)
	}
	if out, _, err := d.corral("logs", "--tail", "1", id, pid); err != nil || out != "got in\n" {
		t.Errorf("logs --tail 1 after the end = %q, %v; want the last line", out, err)
	}

	d.must("exec", "-d", "--tag", "sleeper", id, "--", "sleep", "600")
	d.must("kill", "-s", "TERM", id, "sleeper")
	if _, _, err := d.corral("wait", id, "sleeper"); exitCode(err) != 143 {
		t.Errorf("wait after kill -s TERM = %v; want exit 143", err)
	}
	ps := d.must("ps", id)
	for _, want := range []string{"job", "sleeper"} {
		found := false
		for line := range strings.Lines(ps) {
			f := strings.Fields(line)
			found = found || len(f) > 3 && f[1] == want && f[2] == "exited"
		}
		if !found {
			t.Errorf("ps:\n%s\nwant %s exited", ps, want)
		}
	}
	if _, errOut, err := d.corral("kill", id, "nope"); exitCode(err) != 1 || !strings.Contains(errOut, `process with tag "nope" not found`) {
		t.Errorf("kill of an unknown tag = %v, %q; want exit 1 and not found", err, errOut)
	}
}

// TestIdleTimeoutBusyBox: a box whose command keeps a CPU busy is not
// suspended by its idle timeout (with running commands not counted, so
// that only the CPU keeps it), while an idle one is; once the command
// stops, the busy box is suspended too.
func TestIdleTimeoutBusyBox(t *testing.T) {
	d := startDaemonWith(t, func(cfg *string, _ string) { *cfg += "idle_processes = false\n" })
	busy := d.create("--idle-timeout", "2s")
	d.must("exec", "-d", "--tag", "spin", busy, "--", "sh", "-c", "while :; do :; done")
	idle := d.create("--idle-timeout", "2s")
	state := func(id string) string { return strings.TrimSpace(d.must("inspect", "-f", "{{.State}}", id)) }
	start := time.Now()
	for state(idle) != "suspended" || time.Since(start) < 10*time.Second {
		if time.Since(start) > 2*time.Minute {
			t.Fatalf("the idle box is %s after 2 minutes; want suspended", state(idle))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if s := state(busy); s != "running" {
		t.Fatalf("the CPU-busy box is %s; want running", s)
	}
	d.must("kill", busy, "spin")
	for state(busy) != "suspended" {
		if time.Since(start) > 4*time.Minute {
			t.Fatalf("the box is %s long after its command was killed; want suspended", state(busy))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestOutputLogFile: with [output_log] on, a detached command that prints
// more than the agent's ring holds still shows its start in corral logs,
// from the daemon's log file on the host, which goes with the box.
// TestLogsFloodAtStart: a command that prints far more than the output
// buffer before anyone reads it (no log files) still shows its start in
// logs, then a gap line on stderr with the bytes not kept, then its end.
func TestLogsFloodAtStart(t *testing.T) {
	d := startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += fmt.Sprintf("output_buffer = %d\n", 64<<10)
	})
	id := d.create()
	d.must("exec", "-d", "--tag", "flood", id, "--", "sh", "-c", "seq 1 100000; echo END")
	if _, _, err := d.corral("wait", id, "flood"); err != nil {
		t.Fatalf("wait = %v", err)
	}
	var all strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&all, "%d\n", i)
	}
	all.WriteString("END\n")
	out, errOut, err := d.corral("logs", id, "flood")
	m := regexp.MustCompile(`^\[corral: ([0-9]+) bytes not kept\]\n$`).FindStringSubmatch(errOut)
	if err != nil || m == nil {
		t.Fatalf("logs = %d bytes, stderr %q, %v; want a gap line on stderr", len(out), errOut, err)
	}
	n, _ := strconv.Atoi(m[1])
	if !strings.HasPrefix(out, "1\n2\n3\n") || !strings.HasSuffix(out, "99999\n100000\nEND\n") || len(out)+n != all.Len() {
		t.Errorf("logs = %d bytes (%.20q...%.20q) and a gap of %d; want the first and the last lines, %d bytes in all", len(out), out, out[max(len(out)-20, 0):], n, all.Len())
	}
	// The bytes kept are the output's start and its end, nothing else.
	p, q := 0, 0 // common prefix and suffix of out and the output
	for p < len(out) && out[p] == all.String()[p] {
		p++
	}
	for q < len(out) && out[len(out)-1-q] == all.String()[all.Len()-1-q] {
		q++
	}
	if p+q >= len(out) {
		return
	}
	t.Errorf("logs is not the output's start and end around a gap of %d bytes", n)
}

// TestLogsGapFromLogFile: the bytes the agent dropped between the start
// and the end of a command's output come from the daemon's log file when
// it copied them, with no gap line.
func TestLogsGapFromLogFile(t *testing.T) {
	d := startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += fmt.Sprintf("output_buffer = %d\n[output_log]\nenabled = true\n", 64<<10)
	})
	id := d.create()
	// Four batches, each far less than the ring, together far more; the
	// next once the test saw the last one copied.
	const batches = 4
	script := `for i in 1 2 3 4; do seq $((i*100000)) $((i*100000+7000)); until [ -e /tmp/go$i ]; do sleep 0.1; done; done`
	pid := strings.TrimSpace(d.must("exec", "-d", "--tag", "batches", id, "--", "sh", "-c", script))
	file := filepath.Join(d.root, "sandboxes", id, "logs", pid+".log")
	var all strings.Builder
	for i := 1; i <= batches; i++ {
		for n := i * 100000; n <= i*100000+7000; n++ {
			fmt.Fprintf(&all, "%d\n", n)
		}
		last := fmt.Appendf(nil, "\n%d\n", i*100000+7000)
		deadline := time.Now().Add(60 * time.Second)
		for b, _ := os.ReadFile(file); !bytes.Contains(b, last); b, _ = os.ReadFile(file) {
			if time.Now().After(deadline) {
				t.Fatalf("log file %s = %d bytes; want batch %d copied", file, len(b), i)
			}
			time.Sleep(100 * time.Millisecond)
		}
		d.must("exec", id, "--", "touch", fmt.Sprintf("/tmp/go%d", i))
	}
	if _, _, err := d.corral("wait", id, "batches"); err != nil {
		t.Fatalf("wait = %v", err)
	}
	if ps := d.must("ps", "--json", id); !strings.Contains(ps, `"output_dropped_bytes"`) {
		t.Fatalf("ps --json = %s; want output dropped by the agent", ps)
	}
	out, errOut, err := d.corral("logs", id, "batches")
	if err != nil || out != all.String() || errOut != "" {
		t.Errorf("logs = %d bytes (%.20q...%.20q), stderr %q, %v; want all %d bytes, no gap line", len(out), out, out[max(len(out)-20, 0):], errOut, err, all.Len())
	}
}

func TestOutputLogFile(t *testing.T) {
	const ring = 64 << 10
	d := startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += fmt.Sprintf("output_buffer = %d\n[output_log]\nenabled = true\nmax_bytes_per_process = %d\n", ring, 4<<20)
	})
	id := d.create()
	// The start, then (once the test saw it copied) far more than the
	// ring holds.
	script := `echo START; echo err-start >&2; until [ -e /tmp/go ]; do sleep 0.1; done
i=0; while [ $i -lt 20000 ]; do echo "line $i of the flood"; i=$((i+1)); done; echo END`
	pid := strings.TrimSpace(d.must("exec", "-d", "--tag", "flood", id, "--", "sh", "-c", script))
	file := filepath.Join(d.root, "sandboxes", id, "logs", pid+".log")
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, _ := os.ReadFile(file)
		if bytes.Contains(b, []byte("START\n")) && bytes.Contains(b, []byte("err-start\n")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("log file %s = %q; want the start copied", file, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.must("exec", id, "--", "touch", "/tmp/go")
	if _, _, err := d.corral("wait", id, "flood"); err != nil {
		t.Fatalf("wait = %v", err)
	}
	out, errOut, err := d.corral("logs", id, "flood")
	// The flood may outrun the copy: then neither the agent nor the file
	// has its middle, and logs says so.
	gapLine := regexp.MustCompile(`^err-start\n(\[corral: [0-9]+ bytes not kept\]\n)?$`)
	if err != nil || !strings.HasPrefix(out, "START\n") || !strings.HasSuffix(out, "line 19999 of the flood\nEND\n") || !gapLine.MatchString(errOut) {
		t.Errorf("logs = %d bytes (%.40q...%.40q), %q, %v; want from START to END and the stderr", len(out), out, out[max(len(out)-40, 0):], errOut, err)
	}
	// A filesystem-only suspend restarts the agent, which forgets the
	// command: its output by pid is the log file's.
	d.must("suspend", "--filesystem-only", id)
	d.must("resume", id)
	if out, errOut, err := d.corral("logs", id, pid); err != nil || !strings.HasPrefix(out, "START\n") || errOut != "err-start\n" {
		t.Errorf("logs %s after the agent restarted = %d bytes (%.40q), %q, %v; want the log file's", pid, len(out), out, errOut, err)
	}
	if diff := d.must("diff", id); strings.Contains(diff, ".log") {
		t.Errorf("diff = %q; want the log file out of the box", diff)
	}
	d.must("rm", "-f", id)
	if _, err := os.Stat(filepath.Join(d.root, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(box state) after rm = %v; want not exist", err)
	}
}
