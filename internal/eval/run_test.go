package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/client/clienttest"
	"github.com/corral-sandbox/corral/internal/identifiers"
)

func fakeClient(t *testing.T) (*clienttest.Daemon, *client.Client) {
	t.Helper()
	d := clienttest.New()
	srv := d.Server()
	t.Cleanup(srv.Close)
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

// leftovers lists the boxes and snapshots left on the fake daemon.
func leftovers(t *testing.T, c *client.Client) []string {
	t.Helper()
	var left []string
	boxes, err := c.ListSandboxes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range boxes {
		left = append(left, "box "+b.ID)
	}
	snaps, err := c.Snapshots(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range snaps {
		left = append(left, "snapshot "+s.Name)
	}
	return left
}

// TestRunFake runs a scenario with a files scorer against the fake
// daemon: every attempt is scored from a box of the prepared snapshot,
// the results are saved, and no box or snapshot is left.
func TestRunFake(t *testing.T) {
	d, c := fakeClient(t)
	s := scenario(t, `environment: {image: busybox, workdir: /work}
scorers:
  - files:
      - {path: /work/gone, absent: true}
      - {path: /work/answer}
`)
	dir := filepath.Join(t.TempDir(), "run")
	r := NewRunner(c, "r1", Options{Agent: "echo agent $CORRAL_SANDBOX_ID; cat", Attempts: 3, Concurrency: 2, Host: "tcp://h", Dir: dir})
	run, err := r.Run(t.Context(), []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	sr := run.Scenarios[0]
	if sr.Error != "" || len(sr.Attempts) != 3 {
		t.Fatalf("scenario result = %+v; want 3 attempts", sr)
	}
	for _, a := range sr.Attempts {
		if a.Error != "" || a.Score != 0.5 || a.Agent.Reason != "exit" || a.Agent.ExitCode != 0 {
			t.Errorf("attempt %d = %+v; want score 0.5 and a clean agent exit", a.N, a)
		}
		if want := "agent " + a.Sandbox + "\nx\n"; a.Agent.Output != want {
			t.Errorf("attempt %d agent output = %q; want %q (its box's ID, then the problem from stdin)", a.N, a.Agent.Output, want)
		}
	}
	d.Mu.Lock()
	creates := d.Creates
	d.Mu.Unlock()
	if len(creates) != 4 || creates[0].Image != "busybox" {
		t.Fatalf("creates = %+v; want the prepared box then 3 attempts", creates)
	}
	for _, cr := range creates[1:] {
		if !strings.HasPrefix(cr.Snapshot, "eval-r1-") || cr.Labels[LabelRun] != "r1" {
			t.Errorf("attempt create = %+v; want from the prepared snapshot with the run's label", cr)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, ResultsFile))
	if err != nil {
		t.Fatal(err)
	}
	var saved Run
	if err := json.Unmarshal(data, &saved); err != nil || len(saved.Scenarios[0].Attempts) != 3 {
		t.Errorf("saved results = %s, %v; want 3 attempts", data, err)
	}
	if left := leftovers(t, c); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestRunAgentMissing checks that an agent command that does not exist
// fails the run before any box is made.
func TestRunAgentMissing(t *testing.T) {
	d, c := fakeClient(t)
	s := scenario(t, "scorers:\n  - command: \"true\"\n")
	r := NewRunner(c, "r2", Options{Agent: "/no/such/agent --flag", Dir: t.TempDir()})
	_, err := r.Run(t.Context(), []*Scenario{s})
	if !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), `--agent: command "/no/such/agent" not found`) {
		t.Fatalf("Run = %v; want a not-found error naming the agent", err)
	}
	if len(d.Creates) != 0 {
		t.Errorf("creates = %d; want none", len(d.Creates))
	}
}

// TestRunInterrupted checks that a cancelled run (Ctrl-C) records its
// attempts as interrupted and leaves nothing behind.
func TestRunInterrupted(t *testing.T) {
	_, c := fakeClient(t)
	s := scenario(t, "scorers:\n  - files: [{path: /a}]\n")
	ctx, cancel := context.WithCancel(t.Context())
	// The agent cancels the run, as a Ctrl-C while it works would.
	r := NewRunner(c, "r3", Options{Agent: "true", Attempts: 2, Dir: t.TempDir()})
	r.afterAgent = cancel
	run, err := r.Run(ctx, []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	if !run.Interrupted {
		t.Error("Interrupted = false; want true")
	}
	for _, a := range run.Scenarios[0].Attempts {
		if a.Error != "interrupted" {
			t.Errorf("attempt %d error = %q; want interrupted", a.N, a.Error)
		}
	}
	if left := leftovers(t, c); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

// TestRunSuiteConcurrent runs two scenarios three attempts each, three at
// once, reporting progress (run with -race).
func TestRunSuiteConcurrent(t *testing.T) {
	_, c := fakeClient(t)
	a := scenario(t, "name: a\nscorers:\n  - files: [{path: /x, absent: true}]\n")
	b := scenario(t, "name: b\nscorers:\n  - files: [{path: /x}]\n")
	var progress strings.Builder
	r := NewRunner(c, "r4", Options{Agent: "true", Attempts: 3, Concurrency: 3, Dir: t.TempDir(), Progress: &progress})
	run, err := r.Run(t.Context(), []*Scenario{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if m0, m1 := run.Scenarios[0].Mean(), run.Scenarios[1].Mean(); m0 != 1 || m1 != 0 {
		t.Errorf("means = %v, %v; want 1, 0", m0, m1)
	}
	if n := strings.Count(progress.String(), "\n"); n != 6 {
		t.Errorf("progress has %d lines; want 6:\n%s", n, progress.String())
	}
	if left := leftovers(t, c); len(left) != 0 {
		t.Errorf("left behind: %v", left)
	}
}

func TestSnapshotName(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"answer", "Answer", "a.b_c-d", "A", strings.Repeat("x", 64), "x--y"} {
		got := snapshotName("20261126-191115-243b40", name)
		if err := identifiers.ValidateImageName(got); err != nil {
			t.Errorf("snapshotName(%q) = %q: %v", name, got, err)
		}
		if seen[got] {
			t.Errorf("snapshotName(%q) = %q, as for another name", name, got)
		}
		seen[got] = true
	}
}

// TestRunTrajectory checks that each attempt saves its box's trajectory
// in the run's directory, taken after the agent and before the scorers
// (before the scoring network is set), and that WriteAttempts names it.
func TestRunTrajectory(t *testing.T) {
	d := clienttest.New()
	var mu sync.Mutex
	var calls []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/trajectory", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, "trajectory")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-ndjson")
		for i := range 2 {
			_ = json.NewEncoder(w).Encode(client.AuditEvent{Sandbox: r.PathValue("id"), Seq: uint64(i + 1), Type: "exec"})
		}
	})
	mux.HandleFunc("PUT /v1/sandboxes/{id}/network", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, "network")
		mu.Unlock()
		d.Handler().ServeHTTP(w, r)
	})
	mux.Handle("/", d.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s := scenario(t, "name: traj\nscorers:\n  - files: [{path: /x}]\n")
	dir := t.TempDir()
	run, err := NewRunner(c, "r5", Options{Agent: "true", Dir: dir}).Run(t.Context(), []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	a := run.Scenarios[0].Attempts[0]
	if a.Trajectory != "traj.1.trajectory.jsonl" || a.Events != 2 {
		t.Fatalf("attempt trajectory = %q, %d events; want traj.1.trajectory.jsonl with 2", a.Trajectory, a.Events)
	}
	data, err := os.ReadFile(filepath.Join(dir, a.Trajectory))
	if err != nil || strings.Count(string(data), "\n") != 2 || !strings.Contains(string(data), `"sandbox":"`+a.Sandbox+`"`) {
		t.Errorf("trajectory file = %q, %v; want 2 events of the attempt's box", data, err)
	}
	mu.Lock()
	if len(calls) != 2 || calls[0] != "trajectory" || calls[1] != "network" {
		t.Errorf("calls = %v; want the trajectory taken before the scoring network is set", calls)
	}
	mu.Unlock()
	loaded, err := LoadRun("", dir)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := WriteAttempts(&out, loaded); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "traj.1.trajectory.jsonl"); !strings.Contains(out.String(), want) {
		t.Errorf("WriteAttempts printed\n%s\nwant the trajectory's path %s", out.String(), want)
	}
}

// TestRunWarmPool checks that attempts beyond the first wave get a warm
// pool of the prepared snapshot, with the attempts' limits, that shrinks
// as attempts start and is gone at the end; and that a run whose attempts
// all start at once makes none.
func TestRunWarmPool(t *testing.T) {
	d := clienttest.New()
	var mu sync.Mutex
	var calls []string
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/pools", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var spec client.PoolSpec
		_ = json.Unmarshal(body, &spec)
		mu.Lock()
		calls = append(calls, fmt.Sprintf("set %s size %d memory %d", strings.SplitN(spec.Image, "-", 3)[1], spec.Size, spec.Resources.MemoryBytes))
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		d.Handler().ServeHTTP(w, r)
	})
	mux.HandleFunc("DELETE /v1/pools/{key}", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, "remove")
		mu.Unlock()
		d.Handler().ServeHTTP(w, r)
	})
	mux.Handle("/", d.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s := scenario(t, "environment: {limits: {memory: 64m}}\nscorers:\n  - files: [{path: /x}]\n")
	run, err := NewRunner(c, "r6", Options{Agent: "true", Attempts: 4, Concurrency: 2, Dir: t.TempDir()}).Run(t.Context(), []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range run.Scenarios[0].Attempts {
		if a.Error != "" {
			t.Errorf("attempt %d: %s", a.N, a.Error)
		}
	}
	mu.Lock()
	got := strings.Join(calls, "; ")
	mu.Unlock()
	// 4 attempts, 2 at once: a pool of 2 for the second wave, kept at 2
	// while the first wave starts, then 1, then gone.
	if want := "set r6 size 2 memory 67108864; set r6 size 1 memory 67108864; remove"; got != want {
		t.Errorf("pool calls = %q; want %q", got, want)
	}
	pools, err := c.Pools(t.Context())
	if err != nil || len(pools) != 0 {
		t.Errorf("pools left = %+v, %v; want none", pools, err)
	}

	mu.Lock()
	calls = nil
	mu.Unlock()
	if _, err := NewRunner(c, "r7", Options{Agent: "true", Attempts: 2, Concurrency: 2, Dir: t.TempDir()}).Run(t.Context(), []*Scenario{s}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRunner(c, "r8", Options{Agent: "true", Attempts: 4, Concurrency: 1, NoPool: true, Dir: t.TempDir()}).Run(t.Context(), []*Scenario{s}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(calls) != 0 {
		t.Errorf("pool calls = %v; want none when every attempt starts at once, or with NoPool", calls)
	}
	mu.Unlock()
}

// TestRunDurations checks that an attempt records its duration, its
// agent's, its scorers' and Corral's overhead, the rest.
func TestRunDurations(t *testing.T) {
	_, c := fakeClient(t)
	s := scenario(t, "scorers:\n  - files: [{path: /x}]\n")
	run, err := NewRunner(c, "r9", Options{Agent: "true", Dir: t.TempDir()}).Run(t.Context(), []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	a := run.Scenarios[0].Attempts[0]
	if a.Duration <= 0 || a.Agent.Duration <= 0 || a.Scorers[0].Duration <= 0 || a.Overhead <= 0 {
		t.Fatalf("attempt durations: total %v, agent %v, scorer %v, overhead %v; want each recorded", a.Duration, a.Agent.Duration, a.Scorers[0].Duration, a.Overhead)
	}
	if a.Overhead != a.Duration-a.Agent.Duration-a.Scorers[0].Duration {
		t.Errorf("overhead %v; want the duration %v less the agent's %v and the scorer's %v", a.Overhead, a.Duration, a.Agent.Duration, a.Scorers[0].Duration)
	}
}

// TestRunInterruptedCreate checks that an attempt whose box's create ends
// with the run (Ctrl-C while the daemon makes it) is recorded as
// interrupted, not as a failed create.
func TestRunInterruptedCreate(t *testing.T) {
	d := clienttest.New()
	ctx, cancel := context.WithCancel(t.Context())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "corral.eval.attempt") {
			cancel() // Ctrl-C while the attempt's box is made
			<-r.Context().Done()
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		d.Handler().ServeHTTP(w, r)
	})
	mux.Handle("/", d.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	s := scenario(t, "scorers:\n  - files: [{path: /a}]\n")
	run, err := NewRunner(c, "r10", Options{Agent: "true", Dir: t.TempDir()}).Run(ctx, []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	if a := run.Scenarios[0].Attempts[0]; a.Error != "interrupted" {
		t.Errorf("attempt error = %q; want interrupted", a.Error)
	}
}

// TestRunResources records per attempt the box's resource use from its
// inspect usage and its egress denials from its egress log (the fake
// keeps no audit trail), in the results and in show --attempts.
func TestRunResources(t *testing.T) {
	d, c := fakeClient(t)
	s := scenario(t, `environment: {image: busybox, workdir: /work, network: {mode: allowlist, allow: [example.com]}}
scorers:
  - command: "true"
`)
	dir := filepath.Join(t.TempDir(), "run")
	r := NewRunner(c, "r1", Options{Agent: "true", Attempts: 1, Dir: dir})
	r.afterAgent = func() {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		for id, sb := range d.Sandboxes {
			sb.Usage = &client.Usage{CPUNanos: 1500e6, MemoryPeakBytes: 64 << 20, DiskBytes: 3 << 20, OOMKills: 2}
			d.NetLog[id] = []client.NetworkEvent{
				{Sandbox: id, Kind: "dns", Host: "example.com", Verdict: "allow"},
				{Sandbox: id, Kind: "tcp", Host: "evil.test", Verdict: "deny"},
				{Sandbox: id, Kind: "dns", Host: "evil.test", Verdict: "deny"},
			}
			d.Diffs[id] = clienttest.Diff{Stat: client.DiffStat{FilesChanged: 1, Insertions: 1}, Patch: "diff --git a/x b/x\n"}
		}
	}
	run, err := r.Run(t.Context(), []*Scenario{s})
	if err != nil {
		t.Fatal(err)
	}
	a := run.Scenarios[0].Attempts[0]
	want := Resources{CPU: 1500 * time.Millisecond, MemoryPeakBytes: 64 << 20, DiskBytes: 3 << 20, OOMKills: 2, EgressDenied: 2}
	if a.Resources == nil || *a.Resources != want {
		t.Fatalf("attempt resources = %+v; want %+v", a.Resources, want)
	}
	// The diff's stat and patch come from one request (one pass).
	if a.Diff == nil || a.Diff.FilesChanged != 1 || a.Patch == "" {
		t.Errorf("attempt diff = %+v, patch %q; want 1 file and its patch", a.Diff, a.Patch)
	} else if data, err := os.ReadFile(filepath.Join(dir, a.Patch)); err != nil || string(data) != "diff --git a/x b/x\n" {
		t.Errorf("patch file = %q, %v; want the patch without its stat line", data, err)
	}
	d.Mu.Lock()
	if q := d.DiffQueries; len(q) != 1 || !strings.Contains(q[0], "format=patch") || !strings.Contains(q[0], "stat=true") {
		t.Errorf("diff requests = %q; want one patch with its stat", q)
	}
	d.Mu.Unlock()
	loaded, err := LoadRun("", dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := loaded.Scenarios[0].Attempts[0].Resources; got == nil || *got != want {
		t.Errorf("results.json resources = %+v; want %+v", got, want)
	}
	var buf bytes.Buffer
	if err := WriteAttempts(&buf, loaded); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "CPU") || !strings.Contains(lines[0], "DENIED") {
		t.Fatalf("show --attempts = %q; want a header with CPU and DENIED and one row", buf.String())
	}
	cell := func(col string) string { // the row's cell under the header's column
		i := strings.Index(lines[0], col)
		if i < 0 || i >= len(lines[1]) {
			return ""
		}
		return strings.Fields(lines[1][i:])[0]
	}
	for col, want := range map[string]string{"CPU": "1.5s", "MEM PEAK": "64", "DISK": "3", "OOM": "2", "DENIED": "2"} {
		if got := cell(col); got != want {
			t.Errorf("attempt row %q: %s = %q; want %q", lines[1], col, got, want)
		}
	}
	buf.Reset()
	if err := WriteTable(&buf, loaded); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "attempt 1: 2 OOM kills in the box") {
		t.Errorf("table = %q; want the OOM kills in the note", buf.String())
	}
}
