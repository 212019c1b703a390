package eval

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	toml "github.com/pelletier/go-toml/v2"
)

// TestExportHarbor exports the example scenario of docs/evals.md and
// checks the Harbor task's layout and content.
func TestExportHarbor(t *testing.T) {
	s, err := Load("../../docs/examples/eval/answer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "task")
	files, err := ExportHarbor(s, dir, HarborOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"environment/Dockerfile", "instruction.md", "solution/solve.sh", "task.toml", "tests/files-2/tests/check.sh", "tests/scorer-3.sh", "tests/test.sh"}
	if !slices.Equal(files, want) {
		t.Errorf("files = %v; want %v", files, want)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	var task struct {
		Version  string
		Metadata map[string]any
		Verifier struct {
			TimeoutSec float64 `toml:"timeout_sec"`
		}
		Agent struct {
			TimeoutSec float64 `toml:"timeout_sec"`
		}
		Environment struct {
			CPUs          float64 `toml:"cpus"`
			MemoryMB      int64   `toml:"memory_mb"`
			AllowInternet bool    `toml:"allow_internet"`
		}
	}
	if err := toml.Unmarshal([]byte(read("task.toml")), &task); err != nil {
		t.Fatalf("task.toml: %v", err)
	}
	// 4 scorers of 30s each; the agent's 2m; 256m; network none.
	if task.Version != "1.0" || task.Agent.TimeoutSec != 120 || task.Verifier.TimeoutSec != 120 || task.Environment.CPUs != 1 ||
		task.Environment.MemoryMB != 256 || task.Environment.AllowInternet || task.Metadata["corral_scenario"] != "answer" {
		t.Errorf("task.toml = %+v", task)
	}
	if got := read("instruction.md"); got != s.Problem {
		t.Errorf("instruction.md = %q; want the problem %q", got, s.Problem)
	}
	df := read("environment/Dockerfile")
	for _, line := range []string{"FROM busybox\n", "WORKDIR /work\n", `RUN ["/bin/sh","-c","mkdir -p /work && echo 'remember the towel' > /work/notes.txt"]` + "\n"} {
		if !strings.Contains(df, line) {
			t.Errorf("Dockerfile\n%s\nwants %q", df, line)
		}
	}
	sh := read("tests/test.sh")
	for _, part := range []string{"#!/bin/sh\n", "> /logs/verifier/reward.txt", "score 'answer-file' 2 ", "cp -R \"$T\"/'files-2/tests/.' '/corral-eval/tests'", "limit 30 sh \"$T\"/scorer-3.sh"} {
		if !strings.Contains(sh, part) {
			t.Errorf("test.sh wants %q:\n%s", part, sh)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "tests/test.sh")); err != nil || st.Mode()&0o111 == 0 {
		t.Errorf("test.sh is not executable: %v", err)
	}
	if got := read("tests/scorer-3.sh"); got != s.Scorers[2].Script.Run {
		t.Errorf("scorer-3.sh = %q; want the script", got)
	}
	if got := read("solution/solve.sh"); !strings.Contains(got, "sh -c 'echo 42 > /work/answer.txt'") {
		t.Errorf("solve.sh = %q; want the reference command", got)
	}

	// agent.install comes after setup, as corral eval prepares a box.
	s.Agent.Install = []string{"pip install my-agent==1.4", `printf '%s\n' "a \"b\"" > /opt/x`}
	inst := filepath.Join(t.TempDir(), "install")
	if _, err := ExportHarbor(s, inst, HarborOptions{}); err != nil {
		t.Fatal(err)
	}
	df2, err := os.ReadFile(filepath.Join(inst, "environment/Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	setup := strings.Index(string(df2), `RUN ["/bin/sh","-c","mkdir -p /work`)
	pip := strings.Index(string(df2), `RUN ["/bin/sh","-c","pip install my-agent==1.4"]`+"\n")
	quoted := strings.Index(string(df2), `RUN ["/bin/sh","-c","printf '%s\\n' \"a \\\"b\\\"\" > /opt/x"]`+"\n")
	if setup < 0 || pip < setup || quoted < pip {
		t.Errorf("Dockerfile\n%s\nwants the setup, then agent.install's commands as RUN lines", df2)
	}
	s.Agent.Install = nil

	if _, err := ExportHarbor(s, dir, HarborOptions{}); !errdefs.IsAlreadyExists(err) {
		t.Errorf("export into a full directory = %v; want already exists", err)
	}
	snap := scenario(t, "environment: {snapshot: start-abc}\nscorers: [{command: \"true\"}]\n")
	empty := filepath.Join(t.TempDir(), "snap")
	if _, err := ExportHarbor(snap, empty, HarborOptions{}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--image") {
		t.Errorf("export of a snapshot scenario = %v; want invalid argument naming --image", err)
	}
	if _, err := os.Stat(empty); err == nil {
		t.Error("a refused export made its directory")
	}
	if _, err := ExportHarbor(snap, empty, HarborOptions{Image: "registry.example/start:1"}); err != nil {
		t.Errorf("export with --image: %v", err)
	} else if df, _ := os.ReadFile(filepath.Join(empty, "environment/Dockerfile")); !strings.Contains(string(df), "FROM registry.example/start:1\n") {
		t.Errorf("Dockerfile = %q; want FROM the given image", df)
	}
}
