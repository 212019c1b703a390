package spec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// issueExample is the spec from the feature request.
const issueExample = `name: py-agent
from: debian:bookworm
packages: [python3, python3-pip, git]
run:
  - pip install --break-system-packages pytest==8.3.3
copy:
  - {src: ./tools, dst: /opt/tools}
env: {PYTHONDONTWRITEBYTECODE: "1"}
workdir: /workspace
user: agent
resources: {cpus: 2, memory: 2g, disk: 5g, pids: 512}
network: {mode: allowlist, allow: [pypi.example.org, "*.github.com"]}
secrets: [OPENAI_API_KEY]
ports: [8000]
`

func TestParseExample(t *testing.T) {
	s, err := Parse([]byte(issueExample), "corral.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &Spec{
		Name: "py-agent", From: "debian:bookworm",
		Packages: []string{"python3", "python3-pip", "git"},
		Run:      []string{"pip install --break-system-packages pytest==8.3.3"},
		Copy:     []Copy{{Src: "./tools", Dst: "/opt/tools"}},
		Env:      map[string]string{"PYTHONDONTWRITEBYTECODE": "1"},
		Workdir:  "/workspace", User: "agent",
		Resources: Resources{CPUs: 2, Memory: 2 << 30, Disk: 5 << 30, Pids: 512},
		Network:   Network{Mode: "allowlist", Allow: []string{"pypi.example.org", "*.github.com"}},
		Secrets:   []string{"OPENAI_API_KEY"},
		Ports:     []int{8000},
		Build:     BuildOptions{Network: "host"},
		order:     []string{KindPackages, KindRun, KindCopy},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Parse = %+v\nwant    %+v", s, want)
	}
}

func TestParseDefaults(t *testing.T) {
	s, err := Parse([]byte("from: busybox\n"), "")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if s.Network.Mode != "none" || s.Build.Network != "host" || s.Resources != (Resources{}) || len(s.BuildSteps()) != 0 || s.AllowPrivilegeEscalation {
		t.Errorf("Parse(minimal) = %+v; want network none, build network host, no resources, no steps, no privilege escalation", s)
	}
}

func TestParseAllowPrivilegeEscalation(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want bool
	}{
		{"from: x\nallow_privilege_escalation: true\n", true},
		{"from: x\nallow_privilege_escalation: True\n", true},
		{"from: x\nallow_privilege_escalation: false\n", false},
		{"from: x\nallow_privilege_escalation:\n", false},
	} {
		s, err := Parse([]byte(tc.src), "")
		if err != nil || s.AllowPrivilegeEscalation != tc.want {
			t.Errorf("Parse(%q).AllowPrivilegeEscalation = %v, %v; want %v", tc.src, s != nil && s.AllowPrivilegeEscalation, err, tc.want)
		}
	}
}

func TestParseVolumes(t *testing.T) {
	s, err := Parse([]byte("from: x\nvolumes: [\"data:/data\", \"cache:/var/cache/x:ro\"]\n"), "")
	if err != nil || !slices.Equal(s.Volumes, []string{"data:/data", "cache:/var/cache/x:ro"}) {
		t.Fatalf("Parse(volumes) = %+v, %v; want both volumes", s, err)
	}
	m, err := ParseVolume(s.Volumes[1])
	if err != nil || m != (VolumeMount{Name: "cache", Target: "/var/cache/x", Readonly: true}) {
		t.Errorf("ParseVolume(%q) = %+v, %v; want cache at /var/cache/x, read-only", s.Volumes[1], m, err)
	}
}

// TestParseScalars checks the YAML forms users write for scalars.
func TestParseScalars(t *testing.T) {
	src := `from: busybox
env: {N: 1, B: true, F: 1.50, E: ""}
copy:
  - {src: a, dst: /a, mode: 0755}
  - {src: b, dst: /b, mode: "644"}
resources: {cpus: 0.5, memory: 1073741824, disk: 1.5GiB}
`
	s, err := Parse([]byte(src), "")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if want := map[string]string{"N": "1", "B": "true", "F": "1.50", "E": ""}; !reflect.DeepEqual(s.Env, want) {
		t.Errorf("env = %v; want %v", s.Env, want)
	}
	if s.Copy[0].Mode != "0755" || s.Copy[1].Mode != "644" {
		t.Errorf("modes = %q, %q; want \"0755\", \"644\"", s.Copy[0].Mode, s.Copy[1].Mode)
	}
	if r := s.Resources; r.CPUs != 0.5 || r.Memory != 1<<30 || r.Disk != 3<<29 {
		t.Errorf("resources = %+v; want cpus 0.5, memory 1 GiB, disk 1.5 GiB", r)
	}
}

func TestParseAnchors(t *testing.T) {
	src := `from: busybox
env: &e {A: "1"}
copy:
  - &c {src: a, dst: /a}
steps: []
run: [*c]
`
	_, err := Parse([]byte(src), "")
	if err == nil || !strings.Contains(err.Error(), `corral.yaml:4: run[0]: want a string, got a mapping`) {
		t.Errorf("Parse(alias of the wrong type) error = %v; want it reported at the anchor's line", err)
	}
}

func TestBuildStepsOrder(t *testing.T) {
	pkgs := Step{Kind: KindPackages, Packages: []string{"git"}}
	run1 := Step{Kind: KindRun, Run: "make"}
	run2 := Step{Kind: KindRun, Run: "make install"}
	cp := Step{Kind: KindCopy, Copy: &Copy{Src: "src", Dst: "/src"}}
	tests := []struct {
		name, src string
		want      []Step
	}{
		{"packages run copy", "from: x\npackages: [git]\nrun: [make, make install]\ncopy: [{src: src, dst: /src}]\n", []Step{pkgs, run1, run2, cp}},
		{"copy first", "from: x\ncopy: [{src: src, dst: /src}]\nrun: [make, make install]\npackages: [git]\n", []Step{cp, run1, run2, pkgs}},
		{"run copy packages", "from: x\nrun: [make, make install]\nenv: {A: b}\ncopy: [{src: src, dst: /src}]\npackages: [git]\n", []Step{run1, run2, cp, pkgs}},
		{"empty lists make no steps", "from: x\npackages: []\nrun: [make]\ncopy: []\n", []Step{run1}},
		{"steps interleave", "from: x\nsteps:\n  - run: make\n  - copy: {src: src, dst: /src}\n  - packages: [git]\n  - run: make install\n", []Step{run1, cp, pkgs, run2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse([]byte(tc.src), "")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := s.BuildSteps(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("BuildSteps() = %+v; want %+v", got, tc.want)
			}
		})
	}
}

// TestBuildStepsInCode checks specs not made by Parse: the default order
// and steps without a Kind.
func TestBuildStepsInCode(t *testing.T) {
	s := &Spec{From: "x", Copy: []Copy{{Src: "a", Dst: "/a"}}, Run: []string{"true"}, Packages: []string{"git"}}
	var kinds []string
	for _, st := range s.BuildSteps() {
		kinds = append(kinds, st.Kind)
	}
	if want := []string{"packages", "run", "copy"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("BuildSteps() kinds = %v; want %v", kinds, want)
	}
	s = &Spec{From: "x", Steps: []Step{{Run: "true"}, {Copy: &Copy{Src: "a", Dst: "/a"}}, {Packages: []string{"git"}}}}
	kinds = nil
	for _, st := range s.BuildSteps() {
		kinds = append(kinds, st.Kind)
	}
	if want := []string{"run", "copy", "packages"}; !reflect.DeepEqual(kinds, want) {
		t.Errorf("BuildSteps() kinds = %v; want %v", kinds, want)
	}
	if s.Steps[0].Kind != "" {
		t.Errorf("BuildSteps changed the spec's steps")
	}
}

func TestStepName(t *testing.T) {
	tests := []struct {
		step Step
		want string
	}{
		{Step{Kind: KindRun, Run: "pip  install\n  -r req.txt"}, "run pip install -r req.txt"},
		{Step{Packages: []string{"python3", "git"}}, "packages python3 git"},
		{Step{Kind: KindCopy, Copy: &Copy{Src: "app", Dst: "/app"}}, "copy app /app"},
		{Step{Kind: KindRun, Run: strings.Repeat("x", 100)}, "run " + strings.Repeat("x", 73) + "..."},
	}
	for _, tc := range tests {
		if got := tc.step.Name(); got != tc.want {
			t.Errorf("%+v.Name() = %q; want %q", tc.step, got, tc.want)
		}
	}
}

func TestCanonical(t *testing.T) {
	tests := []struct {
		step Step
		want string
	}{
		{Step{Kind: KindRun, Run: "echo \"hi\"\nls"}, `run "echo \"hi\"\nls"`},
		{Step{Run: "make"}, `run "make"`},
		{Step{Run: "make", User: "user", Workdir: "/src"}, `run "make" user="user" workdir="/src"`},
		{Step{Kind: KindPackages, Packages: []string{"git", "curl=7.88"}}, `packages "git" "curl=7.88"`},
		{Step{Kind: KindCopy, Copy: &Copy{Src: "a b", Dst: "/c", Mode: "0755", Owner: "1:2"}}, `copy src="a b" dst="/c" mode="0755" owner="1:2"`},
	}
	for _, tc := range tests {
		if got := tc.step.Canonical(); got != tc.want {
			t.Errorf("%+v.Canonical() = %q; want %q", tc.step, got, tc.want)
		}
	}
	// Different steps never share a form, however their fields are split.
	distinct := []Step{
		{Kind: KindPackages, Packages: []string{"a b"}},
		{Kind: KindPackages, Packages: []string{"a", "b"}},
		{Kind: KindRun, Run: `packages "a" "b"`},
		{Kind: KindCopy, Copy: &Copy{Src: `a" dst="/b`, Dst: "/c"}},
		{Kind: KindCopy, Copy: &Copy{Src: "a", Dst: `/b" dst="/c`}},
		{Kind: KindCopy, Copy: &Copy{Src: "a", Dst: "/b", Mode: "0644"}},
		{Kind: KindCopy, Copy: &Copy{Src: "a", Dst: "/b", Owner: "0644"}},
	}
	seen := map[string]int{}
	for i, st := range distinct {
		c := st.Canonical()
		if j, ok := seen[c]; ok {
			t.Errorf("steps %d and %d have the same canonical form %q", j, i, c)
		}
		seen[c] = i
	}
}

// TestErrors checks every rule; want lists the expected error lines in
// order, each as a prefix of the reported line.
func TestErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"empty file", "", []string{`corral.yaml: the spec is empty (from: is required)`}},
		{"comments only", "# nothing\n", []string{`corral.yaml: the spec is empty`}},
		{"not a mapping", "- from: x\n", []string{`corral.yaml:1: want a mapping of fields (name:, from:, ...), got a list`}},
		{"yaml syntax", "from: x\nfoo: : bar\n", []string{`corral.yaml:2: mapping values are not allowed in this context`}},
		{"yaml tab", "from: x\nenv:\n\tA: b\n", []string{`corral.yaml:3: found character that cannot start any token`}},
		{"two documents", "from: x\n---\nfrom: y\n", []string{`corral.yaml:2: only one YAML document is allowed`}},
		{"from missing", "name: x\nuser: agent\n", []string{`corral.yaml:1: from: the base image is required`}},
		{"from null", "name: x\nfrom:\n", []string{`corral.yaml:2: from: the base image is required`}},
		{"from blank", "from: \" \"\n", []string{`corral.yaml:1: from: the base image is required`}},
		{"from space", "from: \"debian bookworm\"\n", []string{`corral.yaml:1: from: "debian bookworm" contains spaces`}},
		{"from list", "from: [a]\n", []string{`corral.yaml:1: from: want a string, got a list`}},
		{"unknown field", "from: x\n\nimage: y\n", []string{`corral.yaml:3: image: unknown field (did you mean from?)`}},
		{"typo", "from: x\npakages: [git]\n", []string{`corral.yaml:2: pakages: unknown field (did you mean packages?)`}},
		{"nested field at top", "from: x\nmemory: 1g\n", []string{`corral.yaml:2: memory: unknown field (did you mean resources.memory?)`}},
		{"unknown nested", "from: x\nresources:\n  cpu: 2\n", []string{`corral.yaml:3: resources.cpu: unknown field (did you mean cpus?)`}},
		{"unknown no hint", "from: x\nzzzzzz: 1\n", []string{`corral.yaml:2: zzzzzz: unknown field`}},
		{"setuid alias", "from: x\nsetuid: true\n", []string{`corral.yaml:2: setuid: unknown field (did you mean allow_privilege_escalation?)`}},
		{"docker's name", "from: x\nno_new_privileges: false\n", []string{`corral.yaml:2: no_new_privileges: unknown field (did you mean allow_privilege_escalation?)`}},
		{"escalation not a bool", "from: x\nallow_privilege_escalation: \"true\"\n", []string{`corral.yaml:2: allow_privilege_escalation: want true or false, got "true"`}},
		{"escalation yes", "from: x\nallow_privilege_escalation: yes\n", []string{`corral.yaml:2: allow_privilege_escalation: want true or false, got "yes"`}},
		{"escalation list", "from: x\nallow_privilege_escalation: [true]\n", []string{`corral.yaml:2: allow_privilege_escalation: want true or false, got a list`}},
		{"volumes", "from: x\nvolumes:\n  - data\n  - /srv:/data\n  - data:/a:rx\n  - data:/a\n  - cache:/a\n", []string{
			`corral.yaml:3: volumes[0]: "data": want NAME:/PATH or NAME:/PATH:ro`,
			`corral.yaml:4: volumes[1]: "/srv:/data": "/srv" is a host path`,
			`corral.yaml:5: volumes[2]: "data:/a:rx": the mode "rx" must be ro or rw`,
			`corral.yaml:7: volumes[4]: /a is mounted on twice`,
		}},
		{"repeated key", "from: x\nuser: a\nuser: b\n", []string{`corral.yaml:3: user: repeated (first at line 2)`}},
		{"repeated env", "from: x\nenv:\n  A: 1\n  A: 2\n", []string{`corral.yaml:4: env.A: repeated (first at line 3)`}},
		{"name", "name: Py_Agent\nfrom: x\n", []string{`corral.yaml:1: name: "Py_Agent" is not an image name`}},
		{"name too long", "name: " + strings.Repeat("a", 256) + "\nfrom: x\n", []string{`corral.yaml:1: name: "aaa`}},
		{"package", "from: x\npackages:\n  - git\n  - \"git; rm -rf /\"\n  - -y\n  - curl=7.88.1-10+deb12u5\n  - libc6:amd64\n  - X\n", []string{
			`corral.yaml:4: packages[1]: "git; rm -rf /" is not a Debian package name`,
			`corral.yaml:5: packages[2]: "-y" is not a Debian package name`,
			`corral.yaml:8: packages[5]: "X" is not a Debian package name`,
		}},
		{"packages scalar", "from: x\npackages: git\n", []string{`corral.yaml:2: packages: want a list, got "git"`}},
		{"run empty", "from: x\nrun:\n  - make\n  - \"  \"\n", []string{`corral.yaml:4: run[1]: the command is empty`}},
		{"run null item", "from: x\nrun:\n  -\n", []string{`corral.yaml:3: run[0]: the command is empty`}},
		{"copy", "from: x\ncopy:\n  - {src: /etc/passwd, dst: /x}\n  - {src: ../up, dst: /x}\n  - {src: a/../../up, dst: /x}\n  - {src: a, dst: rel}\n  - {dst: /x}\n  - {src: a}\n  - {src: a, dst: /x, mode: 4755}\n  - {src: a, dst: /x, mode: rwx}\n  - {src: a, dst: /x, owner: \"root:Bad\"}\n  - {src: a, dst: /x, mod: 1}\n", []string{
			`corral.yaml:3: copy[0].src: "/etc/passwd" is absolute`,
			`corral.yaml:4: copy[1].src: "../up" is outside the spec's directory`,
			`corral.yaml:5: copy[2].src: "a/../../up" is outside the spec's directory`,
			`corral.yaml:6: copy[3].dst: "rel" is not an absolute path`,
			`corral.yaml:7: copy[4].src: required`,
			`corral.yaml:8: copy[5].dst: required`,
			`corral.yaml:9: copy[6].mode: "4755" is not an octal mode`,
			`corral.yaml:10: copy[7].mode: "rwx" is not an octal mode`,
			`corral.yaml:11: copy[8].owner: "root:Bad" is not an owner`,
			`corral.yaml:12: copy[9].mod: unknown field (did you mean mode?)`,
		}},
		{"copy ok forms", "from: x\ncopy:\n  - {src: ., dst: /}\n  - {src: a/../b, dst: /x/, owner: \"1000:1000\", mode: \"600\"}\n  - {src: ..a, dst: /x, owner: agent}\n", nil},
		{"steps with top-level", "from: x\npackages: [git]\nsteps:\n  - run: make\ncopy: []\nrun: [a]\n", []string{
			`corral.yaml:2: packages: cannot be used together with steps:`,
			`corral.yaml:5: copy: cannot be used together with steps:`,
			`corral.yaml:6: run: cannot be used together with steps:`,
		}},
		{"steps items", "from: x\nsteps:\n  - run: make\n  - echo hi\n  - {}\n  - {run: a, packages: [b]}\n  - cmd: make\n  - packages: []\n  - run: \"\"\n  - copy: {src: /abs, dst: /x}\n  - packages: [\"a b\"]\n", []string{
			`corral.yaml:4: steps[1]: want one of run:, packages: or copy: (like "- run: make"), got "echo hi"`,
			`corral.yaml:5: steps[2]: a step has exactly one of run:, packages: or copy:`,
			`corral.yaml:6: steps[3]: a step has exactly one of run:, packages: or copy:`,
			`corral.yaml:7: steps[4].cmd: unknown field (did you mean run?)`,
			`corral.yaml:8: steps[5].packages: lists no packages`,
			`corral.yaml:9: steps[6].run: the command is empty`,
			`corral.yaml:10: steps[7].copy.src: "/abs" is absolute`,
			`corral.yaml:11: steps[8].packages[0]: "a b" is not a Debian package name`,
		}},
		{"env", "from: x\nenv:\n  OK_1: a\n  1BAD: b\n  A=B: c\n  NUL: \"a\\0b\"\n  L: [a]\n", []string{
			`corral.yaml:4: env.1BAD: "1BAD" is not a variable name`,
			`corral.yaml:5: env.A=B: "A=B" is not a variable name`,
			`corral.yaml:6: env.NUL: the value contains a NUL byte`,
			`corral.yaml:7: env.L: want a string, got a list`,
		}},
		{"workdir", "from: x\nworkdir: workspace\n", []string{`corral.yaml:2: workdir: "workspace" is not an absolute path`}},
		{"user", "from: x\nuser: Agent\n", []string{`corral.yaml:2: user: "Agent" is not a user name`}},
		{"user long", "from: x\nuser: " + strings.Repeat("a", 33) + "\n", []string{`corral.yaml:2: user: "aaa`}},
		{"user uid", "from: x\nuser: \"4294967295\"\n", []string{`corral.yaml:2: user: "4294967295" is not a valid uid`}},
		{"user ok forms", "from: x\nuser: 1000\ncopy: [{src: a, dst: /a, owner: \"_svc$:www-data\"}]\n", nil},
		{"resources", "from: x\nresources:\n  cpus: 0\n  memory: 1m\n  disk: 8m\n  pids: 4\n", []string{
			`corral.yaml:3: resources.cpus: 0 is out of range (more than 0, at most 1024)`,
			`corral.yaml:4: resources.memory: 1 MiB is less than the minimum 8 MiB`,
			`corral.yaml:5: resources.disk: 8 MiB is less than the minimum 16 MiB`,
			`corral.yaml:6: resources.pids: 4 is less than the minimum 8`,
		}},
		{"resources types", "from: x\nresources:\n  cpus: two\n  memory: 2x\n  disk: [1]\n  pids: 1.5\n", []string{
			`corral.yaml:3: resources.cpus: want a number, got "two"`,
			`corral.yaml:4: resources.memory: "2x" is not a size (use 512m, 2g, 1.5GiB or bytes)`,
			`corral.yaml:5: resources.disk: want a number, got a list`,
			`corral.yaml:6: resources.pids: "1.5" is not an integer`,
		}},
		// The daemon refuses less than 8 MiB: a spec asking for it must
		// fail at the build, not at every create.
		{"memory below the daemon's minimum", "from: x\nresources: {memory: 6m}\n", []string{`corral.yaml:2: resources.memory: 6 MiB is less than the minimum 8 MiB`}},
		{"cpus too many", "from: x\nresources: {cpus: 1025}\n", []string{`corral.yaml:2: resources.cpus: 1025 is out of range`}},
		{"cpus nan", "from: x\nresources: {cpus: .nan}\n", []string{`corral.yaml:2: resources.cpus: NaN is out of range`}},
		{"resources null is unset", "from: x\nresources:\n  cpus:\n", nil},
		{"network mode", "from: x\nnetwork: {mode: closed}\n", []string{`corral.yaml:2: network.mode: "closed" is not a network mode (none, allowlist or full)`}},
		{"allow without allowlist", "from: x\nnetwork:\n  mode: open\n  allow: [a.example.org]\n", []string{`corral.yaml:4: network.allow: only used with mode: allowlist`}},
		{"allow default mode", "from: x\nnetwork:\n  allow: [a.example.org]\n", []string{`corral.yaml:3: network.allow: only used with mode: allowlist`}},
		{"allowlist empty", "from: x\nnetwork:\n  mode: allowlist\n", []string{`corral.yaml:3: network.allow: mode allowlist needs at least one host`}},
		{"allow entries", "from: x\nnetwork:\n  mode: allowlist\n  allow:\n    - a.example.org\n    - \"*.example.org\"\n    - localhost\n    - https://a.example.org\n    - a.example.org/path\n    - a.example.org:443\n    - 10.0.0.1\n    - \"[::1]\"\n    - \"*\"\n    - \"*.org\"\n    - a.*.example.org\n    - A.example.org\n    - a_b.example.org\n    - -a.example.org\n    - a.example.123\n    - \"\"\n", []string{
			`corral.yaml:8: network.allow[3]: "https://a.example.org" has a scheme`,
			`corral.yaml:9: network.allow[4]: "a.example.org/path" has a path`,
			`corral.yaml:13: network.allow[8]: "*" matches every host: use mode: full`,
			`corral.yaml:14: network.allow[9]: "*.org" is too wide`,
			`corral.yaml:15: network.allow[10]: "a.*.example.org" has a '*' other than a leading "*."`,
			`corral.yaml:16: network.allow[11]: "A.example.org" must be lowercase`,
			`corral.yaml:17: network.allow[12]: "a_b.example.org" is not a host name`,
			`corral.yaml:18: network.allow[13]: "-a.example.org" is not a host name`,
			`corral.yaml:19: network.allow[14]: "a.example.123" is not a host name (the last label is numeric)`,
			`corral.yaml:20: network.allow[15]: "" is empty`,
		}},
		{"secrets", "from: x\nenv: {TOKEN: x}\nsecrets:\n  - API_KEY\n  - API_KEY\n  - bad-name\n  - TOKEN\n", []string{
			`corral.yaml:5: secrets[1]: API_KEY is listed twice`,
			`corral.yaml:6: secrets[2]: "bad-name" is not a variable name`,
			`corral.yaml:7: secrets[3]: TOKEN is also set in env`,
		}},
		{"ports", "from: x\nports:\n  - 8000\n  - 0\n  - 65536\n  - 8000\n  - \"80\"\n", []string{
			`corral.yaml:4: ports[1]: 0 is not a port (1-65535)`,
			`corral.yaml:5: ports[2]: 65536 is not a port (1-65535)`,
			`corral.yaml:6: ports[3]: 8000 is listed twice`,
			`corral.yaml:7: ports[4]: "80" is not an integer`,
		}},
		{"build network", "from: x\nbuild:\n  network: bridge\n", []string{`corral.yaml:3: build.network: "bridge" is not a build network (host or none)`}},
		{"errors sorted by line", "user: Bad\nfrom: x\nzz: 1\nworkdir: w\n", []string{
			`corral.yaml:1: user:`, `corral.yaml:3: zz: unknown field`, `corral.yaml:4: workdir:`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "")
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Parse() error = %v; want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse() = nil error; want %q", tc.want)
			}
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("Parse() error %v is not an invalid argument", err)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tc.want) {
				t.Fatalf("Parse() errors:\n%s\nwant %d:\n%s", err, len(tc.want), strings.Join(tc.want, "\n"))
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Errorf("error %d = %q; want prefix %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestFieldError(t *testing.T) {
	_, err := Parse([]byte("from: x\nresources: {memory: 2x}\nports: [0]\n"), "dir/corral.yaml")
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("Parse() error %v is not a *FieldError", err)
	}
	want := &FieldError{File: "dir/corral.yaml", Line: 2, Field: "resources.memory", Msg: `"2x" is not a size (use 512m, 2g, 1.5GiB or bytes)`}
	if *fe != *want {
		t.Errorf("first error = %+v; want %+v", fe, want)
	}
	if got := fe.Error(); got != `dir/corral.yaml:2: resources.memory: "2x" is not a size (use 512m, 2g, 1.5GiB or bytes)` {
		t.Errorf("Error() = %q", got)
	}
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 2 {
		t.Errorf("Parse() joined %d errors; want 2", n)
	}
}

func TestParseTooLarge(t *testing.T) {
	data := []byte("from: x\n# " + strings.Repeat("x", MaxSize) + "\n")
	if _, err := Parse(data, ""); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "larger than 1 MiB") {
		t.Errorf("Parse(2 MiB) error = %v; want too large", err)
	}
}

// TestParseAliasBomb checks that nested aliases cannot make Parse expand a
// small file into a huge spec.
func TestParseAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("from: x\nenv: {P: &p [")
	b.WriteString(strings.Repeat("git, ", 2000))
	b.WriteString("git]}\nsteps: [")
	b.WriteString(strings.Repeat("{packages: *p}, ", 2000))
	b.WriteString("{run: a}]\n")
	_, err := Parse([]byte(b.String()), "")
	if err == nil || !strings.Contains(err.Error(), "more than 100000 values") || strings.Count(err.Error(), "\n") > 1 {
		t.Errorf("Parse(alias bomb) error = %v; want too many values", err)
	}
}

func TestValidateInCode(t *testing.T) {
	s := &Spec{From: "x", Workdir: "rel", Steps: []Step{{}, {Kind: "make"}}, Network: Network{Allow: []string{"a.example.org"}}}
	err := s.Validate()
	want := "corral.yaml: workdir: \"rel\" is not an absolute path\n" +
		"corral.yaml: network.allow: only used with mode: allowlist\n" +
		"corral.yaml: steps[0]: a step has exactly one of run:, packages: or copy:\n" +
		"corral.yaml: steps[1]: unknown step kind \"make\""
	if err == nil || !errdefs.IsInvalidArgument(err) || !sameLines(err.Error(), want) {
		t.Errorf("Validate() = %v; want\n%s", err, want)
	}
	if err := (&Spec{From: "x", Resources: Resources{CPUs: 1}}).Validate(); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

func sameLines(a, b string) bool {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	if len(la) != len(lb) {
		return false
	}
	seen := map[string]int{}
	for _, l := range la {
		seen[l]++
	}
	for _, l := range lb {
		seen[l]--
	}
	for _, n := range seen {
		if n != 0 {
			return false
		}
	}
	return true
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "corral.yaml")
	if err := os.WriteFile(p, []byte(issueExample), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	s, err := Load("corral.yaml")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if s.Dir != dir || s.Name != "py-agent" {
		t.Errorf("Load() Dir = %q, Name = %q; want %q, py-agent", s.Dir, s.Name, dir)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errdefs.IsNotFound(err) {
		t.Errorf("Load(missing) error = %v; want not found", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("from: x\nuser: Bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.HasPrefix(err.Error(), bad+":2: user: ") {
		t.Errorf("Load(bad) error = %v; want it to name %s:2", err, bad)
	}
}

// TestExamples loads every example spec in the docs.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../../docs/examples/*/corral.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v, %v; want 3 or more", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(filepath.Dir(f)), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(s.BuildSteps()) == 0 {
				t.Errorf("%s has no build steps", f)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(issueExample))
	f.Add([]byte("from: x\nsteps:\n  - run: a\n  - copy: {src: a, dst: /a}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data, "")
		if err != nil {
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("Parse error %v is not an invalid argument", err)
			}
			return
		}
		if s.From == "" {
			t.Errorf("Parse accepted a spec without from: %q", data)
		}
		for _, st := range s.BuildSteps() {
			_ = st.Canonical()
		}
		if err := s.Validate(); err != nil {
			t.Errorf("Validate() of a parsed spec = %v", err)
		}
	})
}
