package eval

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/jsonschema-go/jsonschema"
	"gopkg.in/yaml.v3"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/client/clienttest"
)

// validateSchema checks the YAML file at path against docs/eval.schema.json.
func validateSchema(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile("../../docs/eval.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var sch jsonschema.Schema
	if err := json.Unmarshal(data, &sch); err != nil {
		t.Fatal(err)
	}
	rs, err := sch.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(v)
	var inst any
	_ = json.Unmarshal(js, &inst)
	if err := rs.Validate(inst); err != nil {
		t.Errorf("%s does not validate against the schema: %v\n%s", path, err, doc)
	}
}

// TestCapture captures a box of the fake daemon: without a start
// snapshot it fails naming the fix and writes nothing; with one it writes
// a scenario from the snapshot with the box's settings, the diff since
// the start as a counter-example, the trajectory and a scorer stub.
func TestCapture(t *testing.T) {
	d := clienttest.New()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sandboxes/{id}/trajectory", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(client.AuditEvent{Sandbox: r.PathValue("id"), Seq: 1, Type: "exec"})
	})
	mux.Handle("/", d.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if err := c.SetSecret(ctx, "API_KEY", []byte("value")); err != nil {
		t.Fatal(err)
	}
	info, err := c.CreateSandbox(ctx, client.CreateOptions{Image: "busybox", Workdir: "/work", Env: map[string]string{"MODE": "x"},
		Resources: rest.Resources{MemoryBytes: 256 << 20}, Network: &client.Network{Mode: "allowlist", Allow: []string{"example.org"}},
		Secrets: []client.SecretBinding{{Name: "API_KEY", Hosts: []string{"api.example.org"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "case")
	_, err = Capture(ctx, c, CaptureOptions{Box: info.ID, Out: out})
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "corral create --keep-start") {
		t.Fatalf("Capture without a start snapshot = %v; want failed precondition naming --keep-start", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Errorf("a failed capture left %v", entries)
	}

	if _, err := c.Snapshot(ctx, info.ID, StartSnapshot(info.ID)); err != nil {
		t.Fatal(err)
	}
	patch := "--- a/answer.txt\n+++ b/answer.txt\n@@ -1 +1 @@\n-0\n+41\n"
	d.Mu.Lock()
	d.Diffs = map[string]clienttest.Diff{info.ID: {Stat: rest.DiffStat{FilesChanged: 1, Insertions: 1, Deletions: 1}, Patch: patch}}
	d.Mu.Unlock()
	got, err := Capture(ctx, c, CaptureOptions{Box: info.ID, Out: out, Name: "wrong-answer"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Start != "start-"+info.ID || got.Events != 1 || got.Diff.FilesChanged != 1 {
		t.Errorf("captured = %+v; want the start snapshot, 1 event, 1 file", got)
	}
	d.Mu.Lock()
	if len(d.DiffQueries) != 1 || !strings.Contains(d.DiffQueries[0], "stat=true") {
		t.Errorf("diff queries = %q; want one patch with its stat (one pass)", d.DiffQueries)
	}
	for _, q := range d.DiffQueries {
		if !strings.Contains(q, "from=start-"+info.ID) || !strings.Contains(q, "dir=%2Fwork") {
			t.Errorf("diff query %q; want the workdir compared with the start snapshot", q)
		}
	}
	d.Mu.Unlock()
	file := filepath.Join(out, "wrong-answer.yaml")
	validateSchema(t, file)
	s, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	e := s.Environment
	if e.Snapshot != "start-"+info.ID || e.Workdir != "/work" || e.Env["MODE"] != "x" || e.Limits.Memory != "268435456" ||
		e.Network == nil || e.Network.Mode != "allowlist" || e.Network.Allow[0] != "example.org" {
		t.Errorf("environment = %+v; want the box's settings from its start snapshot", e)
	}
	if len(s.Agent.Secrets) != 1 || s.Agent.Secrets[0] != "API_KEY=api.example.org" {
		t.Errorf("agent.secrets = %v; want the box's binding", s.Agent.Secrets)
	}
	if !strings.Contains(s.Problem, "EDIT ME") || len(s.Scorers) != 1 || s.Scorers[0].Name != "edit-me" || !strings.Contains(s.Scorers[0].Command, "EDIT ME") {
		t.Errorf("problem %q, scorers %+v; want a placeholder and the marked stub", s.Problem, s.Scorers)
	}
	if len(s.Counterexamples) != 1 || s.Counterexamples[0].Patch != CaptureCounterexample || s.Counterexamples[0].Trajectory != CaptureTrajectory {
		t.Errorf("counterexamples = %+v; want the patch and trajectory", s.Counterexamples)
	}
	if data, _ := os.ReadFile(filepath.Join(out, CaptureCounterexample)); string(data) != patch {
		t.Errorf("counterexample.patch = %q; want %q", data, patch)
	}
	if data, _ := os.ReadFile(filepath.Join(out, CaptureTrajectory)); !strings.Contains(string(data), `"type":"exec"`) {
		t.Errorf("trajectory.jsonl = %q; want the box's event", data)
	}
	raw, _ := os.ReadFile(file)
	if !strings.Contains(string(raw), "# EDIT ME:") {
		t.Errorf("scenario file has no EDIT ME comment:\n%s", raw)
	}

	// A second capture into the same directory is refused.
	if _, err := Capture(ctx, c, CaptureOptions{Box: info.ID, Out: out}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("Capture into a full directory = %v; want already exists", err)
	}
	// A bad name is refused before anything is written.
	if _, err := Capture(ctx, c, CaptureOptions{Box: info.ID, Out: out + "2", Name: "no spaces"}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--name") {
		t.Errorf("Capture with a bad name = %v; want invalid argument naming --name", err)
	}
	if _, err := os.Stat(out + "2"); err == nil {
		t.Error("a refused capture made its directory")
	}
}

// TestFlaky checks that a scorer is flagged when its score for one state
// changes between repeats, and not otherwise.
func TestFlaky(t *testing.T) {
	rs := func(scores ...float64) []ScorerResult {
		var out []ScorerResult
		for i, s := range scores {
			out = append(out, ScorerResult{Name: string(rune('a' + i)), Score: s})
		}
		return out
	}
	got := flaky("reference", [][]ScorerResult{rs(1, 1), rs(1, 0), rs(1, 1)})
	if len(got) != 1 || got[0].Scorer != "b" || got[0].State != "reference" || scoreList(got[0].Scores) != "1.00, 0.00, 1.00" {
		t.Errorf("flaky = %+v; want scorer b with 1, 0, 1", got)
	}
	if got := flaky("initial", [][]ScorerResult{rs(0, 0.5), rs(0, 0.5)}); len(got) != 0 {
		t.Errorf("flaky of steady scorers = %+v; want none", got)
	}
	if got := flaky("initial", [][]ScorerResult{rs(0, 1)}); len(got) != 0 {
		t.Errorf("flaky of one repeat = %+v; want none", got)
	}
}
