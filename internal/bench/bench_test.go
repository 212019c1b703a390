package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 10; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	r := summarize("x", s, nil)
	if r.Median != 6*time.Millisecond {
		t.Errorf("summarize median = %v; want 6ms", r.Median)
	}
	if r.P90 != 9*time.Millisecond {
		t.Errorf("summarize p90 = %v; want 9ms", r.P90)
	}
	if s[0] != 10*time.Millisecond {
		t.Errorf("summarize sorted its input in place")
	}
	if e := summarize("y", nil, os.ErrNotExist); e.Err == "" || e.Median != 0 {
		t.Errorf("summarize of an error = %+v; want the error and no median", e)
	}
}

func TestPatchSpec(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(p, []byte(`{"ociVersion":"1.0.2","process":{"terminal":true,"args":["sh"],"cwd":"/"},"root":{"path":"rootfs"}}`), 0o644)
	if err := patchSpec(p, "/abs/rootfs"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	var spec struct {
		Process struct {
			Terminal bool     `json:"terminal"`
			Args     []string `json:"args"`
			Cwd      string   `json:"cwd"`
		} `json:"process"`
		Root struct{ Path string } `json:"root"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Process.Terminal || len(spec.Process.Args) != 1 || spec.Process.Args[0] != "/bin/true" || spec.Process.Cwd != "/" || spec.Root.Path != "/abs/rootfs" {
		t.Errorf("patchSpec result = %s", b)
	}
	if err := patchSpec(filepath.Join(t.TempDir(), "missing.json"), "/r"); err == nil {
		t.Errorf("patchSpec of a missing file succeeded")
	}
}

func TestPrint(t *testing.T) {
	rep := &Report{
		Results: []Result{
			{Name: "corral create+exec+rm", Samples: make([]time.Duration, 3), Median: 12 * time.Millisecond},
			{Name: "corral exec round trip", Samples: make([]time.Duration, 3), Median: 900 * time.Microsecond},
			{Name: "crun run true", Samples: make([]time.Duration, 3), Median: 10 * time.Millisecond},
			{Name: "bwrap run true", Err: "bwrap not installed"},
		},
		Ratios: map[string]float64{"crun": 1.2},
	}
	var buf bytes.Buffer
	Print(&buf, rep)
	out := buf.String()
	for _, want := range []string{"corral lifecycle / crun run: 1.20x", "lifecycle <= 1.5x raw crun run: met", "exec round trip <= 2 ms median: met (0.9 ms)", "error: bwrap not installed"} {
		if !strings.Contains(out, want) {
			t.Errorf("Print output lacks %q:\n%s", want, out)
		}
	}
}
