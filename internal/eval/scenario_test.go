package eval

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/spec"
)

const good = `name: t1
problem: do it
scorers:
  - command: "true"
`

func TestParseDefaults(t *testing.T) {
	s, err := Parse([]byte(`problem: do it
scorers:
  - command: "true"
  - weight: 0
    tests: {files: t, command: sh t/run.sh}
  - script: {run: echo score=1}
`), "dir/my-case.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "my-case" {
		t.Errorf("Name = %q; want my-case (from the file name)", s.Name)
	}
	wantW := []float64{1, 0, 1}
	wantN := []string{"command-1", "tests-2", "script-3"}
	for i, sc := range s.Scorers {
		if sc.Weight != wantW[i] || sc.Name != wantN[i] {
			t.Errorf("scorer %d = %q weight %v; want %q weight %v", i, sc.Name, sc.Weight, wantN[i], wantW[i])
		}
	}
	if s.Scorers[1].Tests.Dest != "/corral-eval/tests" {
		t.Errorf("tests.dest = %q; want /corral-eval/tests", s.Scorers[1].Tests.Dest)
	}
	if s.AgentTimeout() != DefaultAgentTimeout || s.ScorerTimeout(0) != DefaultScorerTimeout {
		t.Errorf("timeouts = %v, %v; want the defaults", s.AgentTimeout(), s.ScorerTimeout(0))
	}
}

func TestParseTimeouts(t *testing.T) {
	s, err := Parse([]byte(good+"    timeout: 5s\ntimeouts: {agent: 1m, scorer: 20s}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.AgentTimeout() != time.Minute || s.ScorerTimeout(0) != 5*time.Second {
		t.Errorf("timeouts = %v, %v; want 1m, 5s", s.AgentTimeout(), s.ScorerTimeout(0))
	}
}

// TestParseErrors checks that every problem names the file, the line and
// the field.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown field", good + "enviroment: {}\n", "t.yaml:5: enviroment: unknown field"},
		{"nested unknown", good + "environment:\n  imag: busybox\n", "t.yaml:6: environment.imag: unknown field"},
		{"bad type", "problem: x\nscorers: nope\n", "t.yaml:2: scorers: want a list"},
		{"missing problem", "scorers:\n  - command: \"true\"\n", "t.yaml: problem: is required"},
		{"no scorers", "problem: x\n", "scorers: at least one scorer is required"},
		{"two kinds", "problem: x\nscorers:\n  - command: a\n    script: {run: b}\n", "t.yaml:3: scorers[0]: a scorer has exactly one of"},
		{"bad weight", "problem: x\nscorers:\n  - command: a\n    weight: heavy\n", `t.yaml:4: scorers[0].weight: want a number, got "heavy"`},
		{"negative weight", "problem: x\nscorers:\n  - command: a\n    weight: -1\n", "t.yaml:4: scorers[0].weight: must not be negative"},
		{"bad duration", good + "timeouts:\n  agent: soon\n", `t.yaml:6: timeouts.agent: want a positive duration`},
		{"bad regex", "problem: x\nscorers:\n  - files:\n      - path: /a\n        matches: '('\n", "t.yaml:5: scorers[0].files[0].matches: error parsing regexp"},
		{"relative path", "problem: x\nscorers:\n  - files:\n      - path: a\n", `t.yaml:4: scorers[0].files[0].path: "a" is not an absolute path`},
		{"two images", good + "environment:\n  image: a\n  snapshot: b\n", "t.yaml:6: environment: give at most one of image, spec and snapshot"},
		{"bad tier", good + "environment:\n  tier: vm\n", `t.yaml:6: environment.tier: "vm" is not a tier`},
		{"bad memory", good + "environment:\n  limits: {memory: lots}\n", `t.yaml:6: environment.limits.memory: "lots" is not a size`},
		{"bad network", good + "environment:\n  scoring_network: {mode: some}\n", `t.yaml:6: environment.scoring_network.mode: "some" is not a mode`},
		{"allowlist empty", good + "environment:\n  network: {mode: allowlist}\n", "environment.network.allow: mode allowlist needs at least one destination"},
		{"tests without command", "problem: x\nscorers:\n  - tests: {files: t}\n", "t.yaml:3: scorers[0].tests.command: is required"},
		{"script lang", "problem: x\nscorers:\n  - script: {lang: ruby, run: x}\n", `t.yaml:3: scorers[0].script.lang: "ruby" is not a language`},
		{"empty reference", good + "reference: {}\n", "t.yaml:5: reference: give a patch:, commands: or both"},
		{"bad name", "name: a b\n" + strings.TrimPrefix(good, "name: t1\n"), `t.yaml:1: name: "a b" is not a valid name`},
		{"repeated", good + "problem: y\n", "t.yaml:5: problem: repeated (first at line 2)"},
		{"yaml syntax", "problem: [x\n", "t.yaml:1: did not find expected"},
		{"not a mapping", "- a\n", "t.yaml:1: want a mapping of fields"},
		{"bad wiring", good + "agent: {wiring: cloud}\n", `t.yaml:5: agent.wiring: "cloud" is not a wiring`},
		{"bad secret", good + "agent:\n  secrets: [API-KEY]\n", `t.yaml:6: agent.secrets[0]: "API-KEY": want NAME or NAME=HOST`},
		{"empty secret host", good + "agent:\n  secrets: [\"KEY=a,\"]\n", `t.yaml:6: agent.secrets[0]: "KEY=a,": an empty host`},
		{"counterexample without patch", good + "counterexamples: [{note: x}]\n", "t.yaml:5: counterexamples[0].patch: is required"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), "t.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v; want an error containing %q", tc.yaml, err, tc.want)
			}
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("Parse(%q) = %v; want invalid argument", tc.yaml, err)
			}
			var fe *spec.FieldError
			if !errors.As(err, &fe) {
				t.Errorf("Parse(%q) = %T; want a *spec.FieldError", tc.yaml, err)
			}
		})
	}
}

func TestLoadSuiteExample(t *testing.T) {
	ss, err := LoadSuite("../../docs/examples/eval")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 || ss[0].Name != "answer" || len(ss[0].Scorers) != 4 || ss[0].Reference == nil {
		t.Fatalf("LoadSuite(example) = %+v; want the answer scenario with 4 scorers and a reference", ss)
	}
}

func TestLoadMissingTests(t *testing.T) {
	dir := t.TempDir()
	f := dir + "/s.yaml"
	writeFile(t, f, "problem: x\nscorers:\n  - tests: {files: nope, command: run}\n")
	_, err := Load(f)
	if err == nil || !strings.Contains(err.Error(), "scorers[0].tests.files: nope") {
		t.Fatalf("Load = %v; want an error naming scorers[0].tests.files", err)
	}
}

func TestLoadSuiteDuplicateNames(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/a.yaml", good)
	writeFile(t, dir+"/b.yml", good)
	_, err := LoadSuite(dir)
	if err == nil || !strings.Contains(err.Error(), `scenario "t1" is also in`) {
		t.Fatalf("LoadSuite = %v; want a duplicate-name error", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(good))
	f.Add([]byte("problem: x\nscorers:\n  - files: [{path: /a, matches: b}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "f.yaml")
		if err == nil && (s.Problem == "" || len(s.Scorers) == 0) {
			t.Fatalf("Parse accepted a scenario without a problem or scorers: %q", data)
		}
	})
}

// TestCheckAgentFor checks that the agent's program is looked up on the
// host only when a scenario runs it there.
func TestCheckAgentFor(t *testing.T) {
	host := &Scenario{}
	box := &Scenario{Agent: AgentWiring{Wiring: WiringBox}}
	if err := CheckAgentFor("/opt/agent/run", []*Scenario{box}); err != nil {
		t.Errorf("in-box agent: %v; want no host lookup", err)
	}
	if err := CheckAgentFor("/opt/agent/run", []*Scenario{box, host}); !errdefs.IsNotFound(err) {
		t.Errorf("agent for a host scenario: %v; want not found", err)
	}
	if err := CheckAgentFor(" ", []*Scenario{box}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("empty agent: %v; want invalid argument", err)
	}
	bs := (&AgentWiring{Secrets: []string{"A", "B=x.example,y.example"}}).secretBindings()
	if len(bs) != 2 || bs[0].Name != "A" || bs[0].Hosts != nil || bs[1].Name != "B" || len(bs[1].Hosts) != 2 {
		t.Errorf("secretBindings = %+v", bs)
	}
}
