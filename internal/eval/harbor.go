package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	toml "github.com/pelletier/go-toml/v2"

	"github.com/corral-sandbox/corral/client"
)

// Harbor task layout (the harness Terminal-Bench 2.0 runs on): the agent
// gets instruction.md in a container built from environment/; after it,
// tests/ is copied to /tests and tests/test.sh writes the reward, a number
// from 0 to 1, to /logs/verifier/reward.txt; solution/solve.sh is the
// oracle.
const (
	harborTests     = "/tests"
	harborRewardDir = "/logs/verifier"
)

// HarborOptions tune ExportHarbor.
type HarborOptions struct {
	// Image is the image the task's Dockerfile starts FROM (default: the
	// scenario's environment.image). A scenario from a spec or a snapshot
	// needs it: those live in this daemon only.
	Image string
}

// harborTask is task.toml.
type harborTask struct {
	Version     string            `toml:"version"`
	Metadata    map[string]any    `toml:"metadata"`
	Verifier    harborTimeout     `toml:"verifier"`
	Agent       harborTimeout     `toml:"agent"`
	Environment harborEnvironment `toml:"environment"`
}

type harborTimeout struct {
	TimeoutSec float64 `toml:"timeout_sec"`
}

type harborEnvironment struct {
	BuildTimeoutSec float64 `toml:"build_timeout_sec"`
	CPUs            float64 `toml:"cpus,omitempty"`
	MemoryMB        int64   `toml:"memory_mb,omitempty"`
	StorageMB       int64   `toml:"storage_mb,omitempty"`
	AllowInternet   bool    `toml:"allow_internet"`
}

// ExportHarbor writes scenario s as a Harbor task directory at dir, which
// must not exist or be empty: task.toml, instruction.md (the problem),
// environment/Dockerfile (the image, env, workdir and setup), tests/
// (test.sh running the scorers and writing their weighted score to
// /logs/verifier/reward.txt, with the scorers' test files and scripts) and,
// with a reference, solution/solve.sh. It returns the files written,
// relative to dir. Nothing is left behind when it fails.
func ExportHarbor(s *Scenario, dir string, o HarborOptions) ([]string, error) {
	image := cmpStr(o.Image, s.Environment.Image)
	switch {
	case image == "" && s.Environment.Snapshot != "":
		return nil, fmt.Errorf("%s: environment.snapshot %s lives in this daemon only: push its image to a registry and name it with --image: %w", s.File, s.Environment.Snapshot, errdefs.ErrInvalidArgument)
	case image == "" && s.Environment.Spec != "":
		return nil, fmt.Errorf("%s: environment.spec: a corral.yaml does not translate to a Dockerfile: build it, push the image to a registry and name it with --image: %w", s.File, errdefs.ErrInvalidArgument)
	case image == "":
		return nil, fmt.Errorf("%s: environment.image: the scenario names no image (it runs on the daemon's default): name one with --image: %w", s.File, errdefs.ErrInvalidArgument)
	}
	if err := checkEmptyDir(dir); err != nil {
		return nil, err
	}
	files := map[string][]byte{}
	modes := map[string]os.FileMode{}

	// task.toml
	var scorerSecs float64
	for i := range s.Scorers {
		scorerSecs += s.ScorerTimeout(i).Seconds()
	}
	task := harborTask{
		Version: "1.0",
		Metadata: map[string]any{
			"corral_scenario": s.Name,
			"category":        "corral-eval",
			"tags":            []string{"corral"},
		},
		Verifier:    harborTimeout{TimeoutSec: scorerSecs},
		Agent:       harborTimeout{TimeoutSec: s.AgentTimeout().Seconds()},
		Environment: harborEnvironment{BuildTimeoutSec: 600, CPUs: s.Environment.Limits.CPUs},
	}
	if s.Description != "" {
		task.Metadata["description"] = s.Description
	}
	if n := s.Environment.Network; n != nil && n.Mode != "" && n.Mode != "none" {
		task.Environment.AllowInternet = true // Harbor has no allowlist
	}
	if m, _ := client.ParseBytes(cmpStr(s.Environment.Limits.Memory, "0")); m > 0 {
		task.Environment.MemoryMB = (m + 1<<20 - 1) >> 20
	}
	if d, _ := client.ParseBytes(cmpStr(s.Environment.Limits.Disk, "0")); d > 0 {
		task.Environment.StorageMB = (d + 1<<20 - 1) >> 20
	}
	data, err := toml.Marshal(task)
	if err != nil {
		return nil, fmt.Errorf("task.toml: %w", err)
	}
	files["task.toml"] = append([]byte("# Exported by corral eval export --harbor from the scenario "+s.Name+".\n"), data...)

	problem := s.Problem
	if !strings.HasSuffix(problem, "\n") {
		problem += "\n"
	}
	files["instruction.md"] = []byte(problem)
	files["environment/Dockerfile"] = harborDockerfile(s, image)

	// tests/: test.sh, the scorers' scripts and test files.
	script, extra, err := harborTestScript(s)
	if err != nil {
		return nil, err
	}
	files["tests/test.sh"], modes["tests/test.sh"] = script, 0o755
	for name, data := range extra {
		files[name] = data
	}
	if err := harborTestFiles(s, files, modes); err != nil {
		return nil, err
	}
	if s.Reference != nil {
		solve, patch, err := harborSolution(s)
		if err != nil {
			return nil, err
		}
		files["solution/solve.sh"], modes["solution/solve.sh"] = solve, 0o755
		if patch != nil {
			files["solution/reference.patch"] = patch
		}
	}

	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Clean(dir)), ".harbor-")
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer os.RemoveAll(tmp)
	var names []string
	for name, data := range files {
		p := filepath.Join(tmp, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		if err := os.WriteFile(p, data, cmpMode(modes[name], 0o644)); err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		names = append(names, name)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	_ = os.Remove(dir) // an empty directory
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	slices.Sort(names)
	return names, nil
}

func cmpMode(a, b os.FileMode) os.FileMode {
	if a != 0 {
		return a
	}
	return b
}

// harborDockerfile is the task's environment: the image, the scenario's
// env and workdir, and its setup and then its agent.install commands as
// RUN lines, in the order corral eval prepares a scenario. The install's
// secrets are not there: corral eval gives them to the agent, not to its
// install.
func harborDockerfile(s *Scenario, image string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Exported by corral eval export --harbor from the scenario %s.\nFROM %s\n", s.Name, image)
	keys := make([]string, 0, len(s.Environment.Env))
	for k := range s.Environment.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "ENV %s=%s\n", k, strconv.Quote(s.Environment.Env[k]))
	}
	if s.Environment.Workdir != "" {
		fmt.Fprintf(&b, "WORKDIR %s\n", s.Environment.Workdir)
	}
	run := func(cmd string) {
		// The exec form with sh -c keeps the command as it is, whatever
		// its quotes and newlines.
		var js bytes.Buffer
		enc := json.NewEncoder(&js)
		enc.SetEscapeHTML(false)
		_ = enc.Encode([]string{"/bin/sh", "-c", cmd})
		fmt.Fprintf(&b, "RUN %s", js.Bytes())
	}
	for _, cmd := range s.Setup {
		run(cmd)
	}
	if len(s.Agent.Install) > 0 {
		b.WriteString("# agent.install: the agent under test, as corral eval installs it\n")
	}
	for _, cmd := range s.Agent.Install {
		run(cmd)
	}
	return b.Bytes()
}

// harborTestScript writes test.sh: each scorer in turn, as corral eval
// scores it, and the weighted mean into /logs/verifier/reward.txt. It is
// POSIX sh (busybox's does), using awk, grep and, where present,
// timeout. Scripts of script scorers go beside it.
func harborTestScript(s *Scenario) ([]byte, map[string][]byte, error) {
	extra := map[string][]byte{}
	var b strings.Builder
	b.WriteString(`#!/bin/sh
# Exported by corral eval export --harbor from the scenario ` + s.Name + `: runs its
# scorers after the agent, as corral eval does, and writes their weighted mean
# (0 to 1) to ` + harborRewardDir + `/reward.txt.
T=$(cd "$(dirname "$0")" && pwd)
W=` + shellQuote(cmpStr(s.Environment.Workdir, "/")) + `
mkdir -p ` + harborRewardDir + `
SUM=0
WEIGHTS=0
# score NAME WEIGHT VALUE: count a scorer's score.
score() {
	echo "scorer $1: $3"
	SUM=$(awk -v a="$SUM" -v w="$2" -v s="$3" 'BEGIN { print a + w * s }')
	WEIGHTS=$(awk -v a="$WEIGHTS" -v w="$2" 'BEGIN { print a + w }')
}
# limit SECONDS CMD...: run CMD, killed after SECONDS where timeout exists.
limit() {
	s=$1
	shift
	if command -v timeout >/dev/null 2>&1; then timeout "$s" "$@"; else "$@"; fi
}
# tests: the share of passed tests in TAP, go test -v or pytest -v output
# (stdin), else 1 for exit status $1 = 0.
tests() {
	awk -v code="$1" '
		/^ok([^A-Za-z0-9_]|$)/ { p++; next }
		/^not ok([^A-Za-z0-9_]|$)/ { f++; next }
		/^[ \t]*--- PASS:/ { p++; next }
		/^[ \t]*--- FAIL:/ { f++; next }
		/::/ && /(^|[^A-Za-z0-9_])PASSED([^A-Za-z0-9_]|$)/ { p++; next }
		/::/ && /(^|[^A-Za-z0-9_])(FAILED|ERROR)([^A-Za-z0-9_]|$)/ { f++; next }
		END { if (p + f > 0) print p / (p + f); else if (code == 0) print 1; else print 0 }'
}
# script: the last score=<0..1> line of stdin, else 0.
script() {
	awk '/^[ \t]*score[ \t]*=[ \t]*[^ \t]+[ \t]*$/ { sub(/^[ \t]*score[ \t]*=[ \t]*/, ""); sub(/[ \t]+$/, ""); v = $0 }
		END { if (v != "" && v + 0 == v && v >= 0 && v <= 1) print v + 0; else print 0 }'
}
`)
	for i, sc := range s.Scorers {
		secs := strconv.Itoa(max(1, int(s.ScorerTimeout(i).Seconds())))
		w := strconv.FormatFloat(sc.Weight, 'g', -1, 64)
		name := shellQuote(sc.Name)
		fmt.Fprintf(&b, "\n# scorer %s (%s, weight %s)\n", sc.Name, sc.Kind(), w)
		switch {
		case sc.Tests != nil:
			src := filepath.Base(sc.Tests.Files)
			fmt.Fprintf(&b, "mkdir -p %s && cp -R \"$T\"/%s %s\n", shellQuote(sc.Tests.Dest), shellQuote(path2("files", i, src)+"/."), shellQuote(sc.Tests.Dest))
			fmt.Fprintf(&b, "OUT=$(cd \"$W\" && limit %s sh -c %s 2>&1)\nCODE=$?\necho \"$OUT\"\nscore %s %s \"$(echo \"$OUT\" | tests $CODE)\"\n", secs, shellQuote(sc.Tests.Command), name, w)
		case sc.Script != nil:
			prog, ext := "sh", "sh"
			switch sc.Script.Lang {
			case "bash":
				prog, ext = "bash", "sh"
			case "python", "python3":
				prog, ext = "python3", "py"
			}
			file := fmt.Sprintf("scorer-%d.%s", i+1, ext)
			extra["tests/"+file] = []byte(sc.Script.Run)
			fmt.Fprintf(&b, "OUT=$(cd \"$W\" && limit %s %s \"$T\"/%s 2>&1)\necho \"$OUT\"\nscore %s %s \"$(echo \"$OUT\" | script)\"\n", secs, prog, file, name, w)
		case sc.Files != nil:
			b.WriteString("OK=0\n")
			for _, fc := range sc.Files {
				p := shellQuote(fc.Path)
				var cond []string
				if fc.Absent {
					cond = append(cond, fmt.Sprintf("[ ! -e %s ] && [ ! -L %s ]", p, p))
				} else {
					cond = append(cond, fmt.Sprintf("[ -e %s ]", p))
					if fc.Contains != "" {
						cond = append(cond, fmt.Sprintf("grep -qF -- %s %s", shellQuote(fc.Contains), p))
					}
					if fc.Matches != "" {
						cond = append(cond, fmt.Sprintf("grep -qE -- %s %s", shellQuote(fc.Matches), p))
					}
				}
				fmt.Fprintf(&b, "if %s; then OK=$((OK + 1)); echo \"ok   \"%s; else echo \"FAIL \"%s; fi\n", strings.Join(cond, " && "), p, p)
			}
			fmt.Fprintf(&b, "score %s %s \"$(awk -v ok=$OK 'BEGIN { print ok / %d }')\"\n", name, w, len(sc.Files))
		default:
			fmt.Fprintf(&b, "if (cd \"$W\" && limit %s sh -c %s); then score %s %s 1; else score %s %s 0; fi\n", secs, shellQuote(sc.Command), name, w, name, w)
		}
	}
	b.WriteString(`
awk -v a="$SUM" -v w="$WEIGHTS" 'BEGIN { if (w > 0) print a / w; else print 0 }' > ` + harborRewardDir + `/reward.txt
echo "reward: $(cat ` + harborRewardDir + `/reward.txt)"
`)
	return []byte(b.String()), extra, nil
}

// path2 is the directory, under tests/, of scorer i's test files.
func path2(kind string, i int, base string) string {
	return fmt.Sprintf("%s-%d/%s", kind, i+1, base)
}

// harborTestFiles copies the tests scorers' files under tests/.
func harborTestFiles(s *Scenario, files map[string][]byte, modes map[string]os.FileMode) error {
	for i, sc := range s.Scorers {
		if sc.Tests == nil {
			continue
		}
		src := s.HostPath(sc.Tests.Files)
		base := "tests/" + path2("files", i, filepath.Base(sc.Tests.Files))
		err := filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			name := base + "/" + filepath.ToSlash(rel)
			if rel == "." { // a single file
				name = base + "/" + filepath.Base(p)
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			files[name] = data
			if st, err := e.Info(); err == nil && st.Mode()&0o111 != 0 {
				modes[name] = 0o755
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("scorers[%d].tests.files: %w", i, err)
		}
	}
	return nil
}

// harborSolution is solution/solve.sh: the reference patch (copied
// beside it) and commands, in the reference's directory.
func harborSolution(s *Scenario) ([]byte, []byte, error) {
	ref := s.Reference
	dir := cmpStr(cmpStr(ref.Dir, s.Environment.Workdir), "/")
	var b strings.Builder
	b.WriteString("#!/bin/sh\n# Exported by corral eval export --harbor: the scenario's reference solution.\nset -e\nS=$(cd \"$(dirname \"$0\")\" && pwd)\n")
	fmt.Fprintf(&b, "mkdir -p %s\ncd %s\n", shellQuote(dir), shellQuote(dir))
	var patch []byte
	if ref.Patch != "" {
		var err error
		if patch, err = os.ReadFile(s.HostPath(ref.Patch)); err != nil {
			return nil, nil, fmt.Errorf("reference.patch: %w", err)
		}
		b.WriteString("if command -v git >/dev/null 2>&1; then git apply \"$S\"/reference.patch; else patch -p1 < \"$S\"/reference.patch; fi\n")
	}
	for _, c := range ref.Commands {
		fmt.Fprintf(&b, "sh -c %s\n", shellQuote(c))
	}
	return []byte(b.String()), patch, nil
}
