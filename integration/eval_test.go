//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/eval"
)

// TestEvalExample runs the example suite of docs/evals.md end to end:
// validate, then one run per scripted agent (one that solves the task,
// one that does nothing, one that breaks something), show and diff, and
// checks the scores and that no box or snapshot is left.
func TestEvalExample(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	// The scripted agents call corral, which finds the daemon in
	// CORRAL_HOST (set by corral eval run).
	t.Setenv("PATH", filepath.Dir(corralBin)+":"+os.Getenv("PATH"))
	t.Setenv("CORRAL_EVAL_DIR", t.TempDir())
	const suite = "../docs/examples/eval"

	out := d.must("eval", "validate", suite+"/answer.yaml")
	if want := "answer: initial 0.00, reference 1.00: valid"; !strings.Contains(out, want) {
		t.Errorf("eval validate printed %q; want %q", out, want)
	}
	out = d.must("eval", "validate", "--repeats", "2", suite)
	if want := "answer: initial 0.00, reference 1.00 (2 repeats): valid"; !strings.Contains(out, want) {
		t.Errorf("eval validate printed %q; want %q", out, want)
	}
	nothingLeft(t, d)

	runs := map[string]string{}
	for _, tc := range []struct {
		agent    string
		attempts string
		want     float64
	}{
		{"solve", "2", 1},
		{"nothing", "1", 0},
		// Writes 41 and deletes the notes: half the tests, half of the
		// partial script, nothing else: (0*2 + 0.5 + 0.5 + 0) / 5.
		{"break", "1", 0.2},
	} {
		t.Run(tc.agent, func(t *testing.T) {
			out := d.must("eval", "run", suite, "--agent", suite+"/agents/"+tc.agent+".sh", "--attempts", tc.attempts, "--concurrency", "2", "--json")
			var run eval.Run
			if err := json.Unmarshal([]byte(out), &run); err != nil {
				t.Fatalf("eval run --json printed %q: %v", out, err)
			}
			runs[tc.agent] = run.ID
			if len(run.Scenarios) != 1 || run.Scenarios[0].Error != "" || strconv.Itoa(len(run.Scenarios[0].Attempts)) != tc.attempts {
				t.Fatalf("run = %+v; want one scenario with %s attempts", run, tc.attempts)
			}
			for _, a := range run.Scenarios[0].Attempts {
				if a.Error != "" || a.Agent.Reason != "exit" || a.Agent.ExitCode != 0 {
					t.Errorf("%s attempt %d: error %q, agent %+v; want a clean exit", tc.agent, a.N, a.Error, a.Agent)
				}
				if diff := a.Score - tc.want; diff > 1e-9 || diff < -1e-9 {
					t.Errorf("%s attempt %d score = %v; want %v; scorers: %+v", tc.agent, a.N, a.Score, tc.want, a.Scorers)
				}
				if tc.agent != "nothing" {
					// The agent's corral exec is in the attempt's trajectory.
					traj, err := os.ReadFile(filepath.Join(os.Getenv("CORRAL_EVAL_DIR"), run.ID, a.Trajectory))
					if a.Trajectory == "" || err != nil || !strings.Contains(string(traj), `"type":"exec"`) {
						t.Errorf("%s attempt %d trajectory %q: %q, %v; want the agent's exec", tc.agent, a.N, a.Trajectory, traj, err)
					}
				}
				changed := a.Diff != nil && a.Diff.FilesChanged > 0
				if changed != (tc.agent != "nothing") {
					t.Errorf("%s attempt %d diff = %+v; want changes only from an agent that made some", tc.agent, a.N, a.Diff)
				}
			}
			nothingLeft(t, d)
		})
	}
	if out := d.must("eval", "show", runs["solve"]); !strings.Contains(out, "answer    2         1.00  1.00  1.00  2/2") {
		t.Errorf("eval show printed\n%s\nwant a row for answer with 2 of 2 solved", out)
	}
	if out := d.must("eval", "diff", runs["nothing"], runs["solve"]); !strings.Contains(out, "+1.00  better") {
		t.Errorf("eval diff printed\n%s\nwant answer better by 1.00", out)
	}

	// A missing agent command fails before any box is made.
	_, errOut, err := d.corral("eval", "run", suite, "--agent", "/no/such/agent")
	if exitCode(err) != 1 || !strings.Contains(errOut, `--agent: command "/no/such/agent" not found`) {
		t.Errorf("eval run with a missing agent: exit %d, %q; want 1 and a message naming it", exitCode(err), errOut)
	}
	nothingLeft(t, d)
}

// nothingLeft fails the test when a box or an eval snapshot is left.
func nothingLeft(t *testing.T, d *daemon) {
	t.Helper()
	if out := strings.TrimSpace(d.must("ls", "-q")); out != "" {
		t.Errorf("boxes left behind: %s", out)
	}
	if out := d.must("snapshot", "ls"); strings.Contains(out, "eval-") {
		t.Errorf("snapshots left behind:\n%s", out)
	}
}

// TestEvalHangAndInterrupt checks that a scorer that hangs is killed at
// its timeout and scores 0 while the others count, and that Ctrl-C during
// an attempt ends corral eval run with 130, its boxes and snapshots
// removed and its results marked interrupted.
func TestEvalHangAndInterrupt(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	runs := t.TempDir()
	t.Setenv("CORRAL_EVAL_DIR", runs)
	scenario := filepath.Join(t.TempDir(), "hang.yaml")
	if err := os.WriteFile(scenario, []byte(`name: hang
environment: {image: busybox}
problem: wait
scorers:
  - name: hangs
    command: sleep 600
    timeout: 1s
  - name: ok
    command: "true"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := d.must("eval", "run", scenario, "--agent", "true", "--json")
	var run eval.Run
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("eval run --json printed %q: %v", out, err)
	}
	a := run.Scenarios[0].Attempts[0]
	if a.Score != 0.5 || len(a.Scorers) != 2 || a.Scorers[0].Reason != "timeout" || a.Scorers[0].Score != 0 || a.Scorers[1].Score != 1 {
		t.Errorf("attempt = %+v; want 0.5: the hanging scorer 0 (timeout), the other 1", a)
	}
	nothingLeft(t, d)

	cmd := exec.Command(corralBin, "--host", "unix://"+d.socket, "eval", "run", scenario, "--agent", "sleep 600", "--attempts", "2", "--concurrency", "2", "--out", filepath.Join(runs, "interrupted"))
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	for i := 0; ; i++ {
		if strings.Count(d.must("ls", "-q", "--filter", "label=corral.eval.attempt"), "\n") == 2 {
			break
		}
		if i == 600 {
			t.Fatalf("no attempt boxes after a minute; stderr: %s", stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if code := exitCode(err); code != 130 {
		t.Errorf("eval run after SIGINT exited %d; want 130; stderr: %s", code, stderr.String())
	}
	nothingLeft(t, d)
	got, err := eval.LoadRun(runs, "interrupted")
	if err != nil || !got.Interrupted || got.Scenarios[0].Attempts[0].Error != "interrupted" {
		t.Errorf("results after SIGINT = %+v, %v; want interrupted attempts", got, err)
	}
}

// TestEvalValidatePatch validates a scenario whose reference is a patch
// (applied with patch -p1 in busybox, which has no git), and one whose
// reference does not solve it: exit 1 naming the scorer.
func TestEvalValidatePatch(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	dir := t.TempDir()
	patch := `--- a/greeting.txt
+++ b/greeting.txt
@@ -1 +1 @@
-hello
+hello, world
`
	scenario := `name: %s
environment: {image: busybox, workdir: /app}
problem: greet the world
setup: ["mkdir -p /app && echo hello > /app/greeting.txt"]
scorers:
  - files: [{path: /app/greeting.txt, matches: '^hello, world$'}]
reference: {patch: fix.patch}
`
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("fix.patch", patch)
	good := write("good.yaml", strings.Replace(scenario, "%s", "good", 1))
	if out := d.must("eval", "validate", good); !strings.Contains(out, "good: initial 0.00, reference 1.00: valid") {
		t.Errorf("eval validate printed %q; want valid", out)
	}
	bad := write("bad.yaml", strings.Replace(strings.Replace(scenario, "%s", "bad", 1), "patch: fix.patch", "commands: [\"true\"]", 1))
	out, errOut, err := d.corral("eval", "validate", bad)
	if exitCode(err) != 1 || !strings.Contains(out, "the reference solution scores 0.00: scorer files-1 gives 0.00") || !strings.Contains(errOut, "1 of 1 scenarios not valid") {
		t.Errorf("eval validate of a wrong reference = %d, %q, %q; want 1 naming the scorer", exitCode(err), out, errOut)
	}
	nothingLeft(t, d)
}

// TestEvalCapture turns a box that did not end well into a scenario: a
// box created with --keep-start gets a wrong answer, corral eval capture
// writes the scenario (its start snapshot, the wrong answer as a
// counter-example, a stub scorer), which runs as written (score 0), and
// once the user replaced the stub and added a reference, validates (the
// counter-example scores below 1, in repeats) and scores a solving agent.
func TestEvalCapture(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	t.Setenv("PATH", filepath.Dir(corralBin)+":"+os.Getenv("PATH"))
	t.Setenv("CORRAL_EVAL_DIR", t.TempDir())
	id := strings.TrimSpace(d.must("create", "--keep-start", "--image", "busybox", "--workdir", "/work"))
	start := eval.StartSnapshot(id)
	t.Cleanup(func() { _, _, _ = d.corral("snapshot", "rm", start) })
	if out := d.must("snapshot", "ls"); !strings.Contains(out, start) {
		t.Fatalf("create --keep-start: snapshots\n%s\nwant %s", out, start)
	}
	// The "agent" gets it wrong.
	d.must("exec", id, "--", "sh", "-c", "mkdir -p /work && echo 41 > /work/answer.txt")
	dir := filepath.Join(t.TempDir(), "case")
	d.must("eval", "capture", id, "-o", dir, "--name", "wrong-answer", "--problem", "Write 42 on a line of its own to /work/answer.txt.")
	d.must("rm", "-f", id)
	patch, err := os.ReadFile(filepath.Join(dir, eval.CaptureCounterexample))
	if err != nil || !strings.Contains(string(patch), "+41") {
		t.Fatalf("counterexample.patch = %q, %v; want the wrong answer", patch, err)
	}
	if traj, err := os.ReadFile(filepath.Join(dir, eval.CaptureTrajectory)); err != nil || !strings.Contains(string(traj), "echo 41") {
		t.Errorf("trajectory.jsonl = %q, %v; want the box's exec", traj, err)
	}

	// As written: the stub scores 0.
	var run eval.Run
	if err := json.Unmarshal([]byte(d.must("eval", "run", dir, "--agent", "true", "--json")), &run); err != nil {
		t.Fatal(err)
	}
	if sr := run.Scenarios[0]; sr.Error != "" || sr.Attempts[0].Error != "" || sr.Attempts[0].Score != 0 || sr.Attempts[0].Scorers[0].Name != "edit-me" {
		t.Fatalf("run of the captured scenario = %+v; want one attempt scored 0 by the stub", sr)
	}
	nothingLeft(t, d)

	// The user replaces the stub and adds a reference.
	file := filepath.Join(dir, "wrong-answer.yaml")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "  - name: edit-me")
	j := strings.Index(s, "counterexamples:")
	if i < 0 || j < i {
		t.Fatalf("captured scenario has no stub before its counterexamples:\n%s", s)
	}
	s = s[:i] + "  - name: answer\n    files: [{path: /work/answer.txt, matches: '^42$'}]\nreference:\n  commands: [\"echo 42 > /work/answer.txt\"]\n" + s[j:]
	if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := d.must("eval", "validate", "--repeats", "2", dir); !strings.Contains(out, "wrong-answer: initial 0.00, reference 1.00, counter-example 1 0.00 (2 repeats): valid") {
		t.Errorf("eval validate of the edited capture printed %q; want valid with the counter-example at 0", out)
	}
	agent := filepath.Join(t.TempDir(), "solve.sh")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\ncorral exec \"$CORRAL_SANDBOX_ID\" -- sh -c 'echo 42 > /work/answer.txt'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	run = eval.Run{}
	if err := json.Unmarshal([]byte(d.must("eval", "run", dir, "--agent", agent, "--json")), &run); err != nil {
		t.Fatal(err)
	}
	if a := run.Scenarios[0].Attempts[0]; a.Score != 1 {
		t.Errorf("solving attempt = %+v; want score 1", a)
	}
	nothingLeft(t, d)
}

// TestEvalExportHarbor exports the example scenario as a Harbor task and
// runs it the way Harbor does, in a busybox box: the Dockerfile's WORKDIR
// and RUN lines, then tests/ in /tests and tests/test.sh, which must write
// reward 0 for the untouched state, 1 after solution/solve.sh and 0.2
// after what the break agent does, as corral eval scores them.
func TestEvalExportHarbor(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	task := filepath.Join(t.TempDir(), "answer")
	d.must("eval", "export", "--harbor", task, "../docs/examples/eval/answer.yaml")
	for _, f := range []string{"task.toml", "instruction.md", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"} {
		if _, err := os.Stat(filepath.Join(task, f)); err != nil {
			t.Errorf("Harbor task lacks %s: %v", f, err)
		}
	}
	df, err := os.ReadFile(filepath.Join(task, "environment/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"untouched", "solve", "break"} {
		var image, workdir string
		var runs [][]string
		for _, line := range strings.Split(string(df), "\n") {
			switch k, v, _ := strings.Cut(line, " "); k {
			case "FROM":
				image = v
			case "WORKDIR":
				workdir = v
			case "RUN":
				var argv []string
				if err := json.Unmarshal([]byte(v), &argv); err != nil {
					t.Fatalf("Dockerfile RUN %s: %v", v, err)
				}
				runs = append(runs, argv)
			}
		}
		id := strings.TrimSpace(d.must("create", "--image", image))
		d.must("exec", id, "--", "mkdir", "-p", workdir)
		for _, argv := range runs {
			d.must(append([]string{"exec", "-w", workdir, id, "--"}, argv...)...)
		}
		d.must("cp", filepath.Join(task, "tests"), id+":/tests")
		switch mode {
		case "solve":
			d.must("cp", filepath.Join(task, "solution"), id+":/solution")
			d.must("exec", id, "--", "sh", "/solution/solve.sh")
		case "break": // as docs/examples/eval/agents/break.sh
			d.must("exec", id, "--", "sh", "-c", "echo 41 > /work/answer.txt && rm /work/notes.txt")
		}
		d.must("exec", id, "--", "sh", "/tests/test.sh")
		reward := strings.TrimSpace(d.must("exec", id, "--", "cat", "/logs/verifier/reward.txt"))
		if want := map[string]string{"untouched": "0", "solve": "1", "break": "0.2"}[mode]; reward != want {
			t.Errorf("reward of the %s state = %q; want %s", mode, reward, want)
		}
		d.must("rm", "-f", id)
	}
}

// TestEvalAgentInBox runs a scenario whose agent runs inside the box: the
// agent, installed once by agent.install (it exists only in the box, so
// the host's check of --agent must not look for it), gets the problem on
// its stdin and its secret as the placeholder, never the value.
func TestEvalAgentInBox(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	t.Setenv("CORRAL_EVAL_DIR", t.TempDir())
	const value = "s3cret-value-never-in-the-box"
	if out, errOut, err := d.corralIn([]byte(value), "secret", "set", "EVAL_TOKEN"); err != nil {
		t.Fatalf("secret set: %v %s %s", err, out, errOut)
	}
	scenario := filepath.Join(t.TempDir(), "inbox.yaml")
	if err := os.WriteFile(scenario, []byte(`name: inbox
environment: {image: busybox, workdir: /work, network: {mode: allowlist, allow: [api.example.org]}}
setup: ["mkdir -p /work"]
agent:
  wiring: box
  install:
    - mkdir -p /opt/agent && printf '#!/bin/sh\ncat > problem.txt\necho "$EVAL_TOKEN" > token.txt\nenv > env.txt\nbusybox nslookup denied-name.test >/dev/null 2>&1\ntrue\n' > /opt/agent/run && chmod +x /opt/agent/run
  secrets: [EVAL_TOKEN=api.example.org]
problem: fix the frobnicator
scorers:
  - name: problem-on-stdin
    files: [{path: /work/problem.txt, contains: fix the frobnicator}]
  - name: placeholder
    files: [{path: /work/token.txt, matches: '^corral-secret-[0-9a-f]+$'}]
  - name: no-value
    command: "! grep -rq `+value+` /work"
  - name: env
    files: [{path: /work/env.txt, contains: CORRAL_EVAL_SCENARIO=inbox}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var run eval.Run
	out := d.must("eval", "run", scenario, "--agent", "/opt/agent/run", "--json")
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("eval run --json printed %q: %v", out, err)
	}
	sr := run.Scenarios[0]
	if sr.Error != "" || len(sr.Attempts) != 1 {
		t.Fatalf("scenario = %+v; want one attempt", sr)
	}
	if a := sr.Attempts[0]; a.Score != 1 || a.Agent.Reason != "exit" || a.Agent.ExitCode != 0 {
		t.Errorf("attempt = %+v; want score 1 from an agent that ran in the box", a)
	}
	// The box's resource use and the agent's denied DNS query are
	// recorded with the attempt.
	if r := sr.Attempts[0].Resources; r == nil || r.CPU <= 0 || r.DiskBytes == 0 || r.OOMKills != 0 || r.EgressDenied < 1 {
		t.Errorf("attempt resources = %+v; want CPU time, disk use, no OOM kill and the denied query", r)
	}
	if strings.Contains(out, value) {
		t.Error("the results hold the secret's value")
	}
	nothingLeft(t, d)
}

// TestEvalWarmPool runs 3 attempts one at a time: the run keeps a warm
// pool of the prepared snapshot for the later ones, so the second and
// third attempts get their box handed out of it (each agent waits, while
// the pool exists, until a box is ready in it: an event, not a time),
// every attempt records its overhead, and the pool is gone at the end.
func TestEvalWarmPool(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		t.Skip("busybox not installed (apt-get install busybox-static)")
	}
	d := startDaemon(t)
	t.Setenv("PATH", filepath.Dir(corralBin)+":"+os.Getenv("PATH"))
	t.Setenv("CORRAL_EVAL_DIR", t.TempDir())
	agent := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(agent, []byte(`#!/bin/sh
cat > /dev/null
i=0
while corral pool ls --json | grep -q '"image": *"eval-' && ! corral pool ls --json | grep -Eq '"ready": *[1-9]'; do
	i=$((i + 1)); [ $i -lt 1200 ] || exit 3
	sleep 0.1
done
corral exec "$CORRAL_SANDBOX_ID" -- sh -c 'echo 42 > /work/answer.txt'
`), 0o755); err != nil {
		t.Fatal(err)
	}
	var run eval.Run
	out := d.must("eval", "run", "../docs/examples/eval", "--agent", agent, "--attempts", "3", "--concurrency", "1", "--json")
	if err := json.Unmarshal([]byte(out), &run); err != nil {
		t.Fatalf("eval run --json printed %q: %v", out, err)
	}
	pooled := 0
	for _, a := range run.Scenarios[0].Attempts {
		if a.Error != "" || a.Agent.ExitCode != 0 || a.Score != 1 {
			t.Errorf("attempt %d = error %q, agent %+v, score %v; want 1", a.N, a.Error, a.Agent, a.Score)
		}
		if a.Overhead <= 0 || a.Overhead >= a.Duration {
			t.Errorf("attempt %d overhead %v of %v; want a part of its duration", a.N, a.Overhead, a.Duration)
		}
		if a.Pooled {
			pooled++
		}
	}
	if pooled < 2 {
		t.Errorf("%d attempts got a box from the warm pool; want the 2 after the first", pooled)
	}
	if out := d.must("pool", "ls", "--json"); strings.Contains(out, "eval-") {
		t.Errorf("pool left behind: %s", out)
	}
	nothingLeft(t, d)
}
