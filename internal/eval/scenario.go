// Package eval runs agent evaluations on Corral: scenarios (a box in a
// known state, a problem statement and weighted scorers) are prepared
// once, each attempt starts from the prepared snapshot, an agent command
// on the host works on the box, and the scorers look at what it left. See
// docs/evals.md.
package eval

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"gopkg.in/yaml.v3"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/spec"
	"github.com/corral-sandbox/corral/internal/units"
)

// Defaults of a scenario's timeouts.
const (
	DefaultAgentTimeout  = 10 * time.Minute
	DefaultScorerTimeout = 2 * time.Minute
	maxScenarioSize      = 1 << 20
)

// Duration is a time span written as Go writes one: "90s", "5m", "1h30m".
type Duration time.Duration

// Scenario is one evaluation case (docs/eval.schema.json).
type Scenario struct {
	// Name identifies the scenario in results (default: the file's base
	// name without .yaml).
	Name        string      `yaml:"name"`
	Description string      `yaml:"description"`
	Environment Environment `yaml:"environment"`
	// Problem is the statement the agent gets on stdin and in
	// CORRAL_EVAL_PROBLEM.
	Problem string `yaml:"problem"`
	// Setup are shell commands run in the box before it is snapshotted.
	Setup []string `yaml:"setup"`
	// Agent is how the agent under test is wired to the box.
	Agent     AgentWiring `yaml:"agent"`
	Timeouts  Timeouts    `yaml:"timeouts"`
	Scorers   []Scorer    `yaml:"scorers"`
	Reference *Reference  `yaml:"reference"`
	// Counterexamples are known failed attempts (corral eval capture
	// records the captured box's); validate checks that none scores 1.
	Counterexamples []Counterexample `yaml:"counterexamples"`

	// File is the scenario's path and Dir its directory (test files and
	// patches are relative to it); set by Load.
	File string `yaml:"-"`
	Dir  string `yaml:"-"`
}

// Environment is the box a scenario starts from.
type Environment struct {
	// Exactly one of Image, Spec (a corral.yaml, built first) and
	// Snapshot; none means the daemon's default image.
	Image    string `yaml:"image"`
	Spec     string `yaml:"spec"`
	Snapshot string `yaml:"snapshot"`
	Tier     string `yaml:"tier"`
	// Workdir is the box's working directory; the diff of an attempt is
	// taken under it (default: the whole file system).
	Workdir string            `yaml:"workdir"`
	Env     map[string]string `yaml:"env"`
	Limits  Limits            `yaml:"limits"`
	// Network is the egress policy of setup and the agent phase (default
	// none); ScoringNetwork that of the scorers (default none).
	Network        *Network `yaml:"network"`
	ScoringNetwork *Network `yaml:"scoring_network"`
}

// Wirings of the agent under test.
const (
	// WiringHost runs the agent command on the host; it drives the box
	// through the CLI, the SDK or MCP.
	WiringHost = "host"
	// WiringBox runs the agent command inside the box (exec).
	WiringBox = "box"
)

// AgentWiring says where the agent command runs and what it gets.
type AgentWiring struct {
	// Wiring is host (default) or box.
	Wiring string `yaml:"wiring"`
	// Install are shell commands run in the box after setup, before the
	// prepared state is snapshotted (the agent's install, once per
	// scenario).
	Install []string `yaml:"install"`
	// Secrets are stored secrets (corral secret set) bound to each
	// attempt's box: NAME, or NAME=HOST,... to name the hosts that may
	// receive the value. The box gets a placeholder under NAME, which the
	// egress proxy replaces on requests to those hosts.
	Secrets []string `yaml:"secrets"`
}

// InBox reports whether the agent runs inside the box.
func (s *Scenario) InBox() bool { return s.Agent.Wiring == WiringBox }

// secretBindings parses the agent's secrets.
func (a *AgentWiring) secretBindings() []client.SecretBinding {
	var out []client.SecretBinding
	for _, v := range a.Secrets {
		name, hosts, ok := strings.Cut(v, "=")
		b := client.SecretBinding{Name: name}
		if ok {
			b.Hosts = strings.Split(hosts, ",")
		}
		out = append(out, b)
	}
	return out
}

var secretNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Limits are the box's resource limits; zero means the daemon's default.
type Limits struct {
	CPUs   float64 `yaml:"cpus"`
	Memory string  `yaml:"memory"`
	Disk   string  `yaml:"disk"`
	Pids   int64   `yaml:"pids"`
}

// Network is an egress policy: mode none, allowlist or full.
type Network struct {
	Mode  string   `yaml:"mode"`
	Allow []string `yaml:"allow"`
}

// Timeouts bound the agent phase and each scorer.
type Timeouts struct {
	Agent  Duration `yaml:"agent"`
	Scorer Duration `yaml:"scorer"`
}

// Scorer is one weighted scoring function; exactly one of Command, Tests,
// Script and Files is set.
type Scorer struct {
	Name string `yaml:"name"`
	// Weight is the scorer's share of the attempt's score (default 1).
	Weight  float64     `yaml:"weight"`
	Timeout Duration    `yaml:"timeout"`
	Command string      `yaml:"command"`
	Tests   *Tests      `yaml:"tests"`
	Script  *Script     `yaml:"script"`
	Files   []FileCheck `yaml:"files"`
}

// Tests are test files uploaded after the agent finished and the command
// that runs them.
type Tests struct {
	// Files is a file or directory relative to the scenario's directory,
	// uploaded into Dest (default /corral-eval/tests).
	Files   string `yaml:"files"`
	Dest    string `yaml:"dest"`
	Command string `yaml:"command"`
}

// Script prints score=<0..1>; Lang is sh (default), bash or python.
type Script struct {
	Lang string `yaml:"lang"`
	Run  string `yaml:"run"`
}

// FileCheck is an expectation about one path.
type FileCheck struct {
	Path string `yaml:"path"`
	// Absent expects the path not to exist; otherwise it must exist and
	// Contains (a substring) and Matches (a regular expression) hold.
	Absent   bool   `yaml:"absent"`
	Contains string `yaml:"contains"`
	Matches  string `yaml:"matches"`
}

// Reference is a known solution: a patch (relative to the scenario's
// directory, applied in Dir) and/or commands.
type Reference struct {
	Patch    string   `yaml:"patch"`
	Dir      string   `yaml:"dir"`
	Commands []string `yaml:"commands"`
}

// Counterexample is a failed attempt: the patch of what it changed
// (relative to the scenario's directory, applied as a reference patch is)
// and, for people, its trajectory and a note.
type Counterexample struct {
	Patch      string `yaml:"patch"`
	Dir        string `yaml:"dir,omitempty"`
	Trajectory string `yaml:"trajectory,omitempty"`
	Note       string `yaml:"note,omitempty"`
}

// Kind names the scorer's kind: command, tests, script or files.
func (s *Scorer) Kind() string {
	switch {
	case s.Tests != nil:
		return "tests"
	case s.Script != nil:
		return "script"
	case s.Files != nil:
		return "files"
	}
	return "command"
}

// AgentTimeout is the agent phase's timeout.
func (s *Scenario) AgentTimeout() time.Duration {
	if s.Timeouts.Agent > 0 {
		return time.Duration(s.Timeouts.Agent)
	}
	return DefaultAgentTimeout
}

// ScorerTimeout is the timeout of scorer i.
func (s *Scenario) ScorerTimeout(i int) time.Duration {
	if t := s.Scorers[i].Timeout; t > 0 {
		return time.Duration(t)
	}
	if s.Timeouts.Scorer > 0 {
		return time.Duration(s.Timeouts.Scorer)
	}
	return DefaultScorerTimeout
}

// LoadSuite loads the scenario file at path, or every *.yaml and *.yml
// file directly in the directory at path, sorted by name.
func LoadSuite(path string) ([]*Scenario, error) {
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("suite %s does not exist: %w", path, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("suite: %w", err)
	}
	files := []string{path}
	if st.IsDir() {
		files = nil
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("suite: %w", err)
		}
		for _, e := range entries {
			if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("suite %s has no scenario files (*.yaml): %w", path, errdefs.ErrInvalidArgument)
		}
	}
	var (
		out  []*Scenario
		errs []error
		seen = map[string]string{}
	)
	for _, f := range files {
		s, err := Load(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if prev, dup := seen[s.Name]; dup {
			errs = append(errs, &spec.FieldError{File: f, Field: "name", Msg: fmt.Sprintf("scenario %q is also in %s; names must be unique in a suite", s.Name, prev)})
			continue
		}
		seen[s.Name] = f
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// Load reads and parses the scenario file at path.
func Load(path string) (*Scenario, error) {
	data, err := spec.ReadFile(path, "scenario", maxScenarioSize)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	if s.Dir, err = filepath.Abs(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("scenario directory: %w", err)
	}
	s.File = path
	if err := s.checkFiles(); err != nil {
		return nil, err
	}
	return s, nil
}

// checkFiles checks that the host files the scenario names exist.
func (s *Scenario) checkFiles() error {
	var errs []error
	check := func(field, rel string) {
		if rel == "" {
			return
		}
		if _, err := os.Stat(s.HostPath(rel)); err != nil {
			errs = append(errs, &spec.FieldError{File: s.File, Field: field, Msg: fmt.Sprintf("%s: %v (paths are relative to the scenario's directory)", rel, errors.Unwrap(err))})
		}
	}
	check("environment.spec", s.Environment.Spec)
	for i, sc := range s.Scorers {
		if sc.Tests != nil {
			check(fmt.Sprintf("scorers[%d].tests.files", i), sc.Tests.Files)
		}
	}
	if s.Reference != nil {
		check("reference.patch", s.Reference.Patch)
	}
	for i, ce := range s.Counterexamples {
		check(fmt.Sprintf("counterexamples[%d].patch", i), ce.Patch)
		check(fmt.Sprintf("counterexamples[%d].trajectory", i), ce.Trajectory)
	}
	return errors.Join(errs...)
}

// HostPath resolves a path of the scenario file against its directory.
func (s *Scenario) HostPath(rel string) string {
	if filepath.IsAbs(rel) {
		return rel
	}
	return filepath.Join(s.Dir, rel)
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9]+([._-][A-Za-z0-9]+)*$`)

// Parse parses and checks a scenario; filename names it in errors, and
// its base name is the default Name. Every problem is a *spec.FieldError
// naming the line and the field, joined with errors.Join; all wrap
// errdefs.ErrInvalidArgument. Unknown fields are errors.
func Parse(data []byte, filename string) (*Scenario, error) {
	d := &decoder{file: filename, pos: map[string]int{}}
	s := &Scenario{}
	root, ok := d.document(data)
	if !ok {
		return nil, d.err()
	}
	d.decode(root, reflect.ValueOf(s).Elem(), "")
	if d.err() != nil {
		return nil, d.err()
	}
	if s.Name == "" {
		base := filepath.Base(filename)
		s.Name = strings.TrimSuffix(strings.TrimSuffix(base, ".yaml"), ".yml")
	}
	d.check(s)
	if err := d.err(); err != nil {
		return nil, err
	}
	for i := range s.Scorers {
		if s.Scorers[i].Weight == 0 && !d.set[fmt.Sprintf("scorers[%d].weight", i)] {
			s.Scorers[i].Weight = 1
		}
		if s.Scorers[i].Name == "" {
			s.Scorers[i].Name = fmt.Sprintf("%s-%d", s.Scorers[i].Kind(), i+1)
		}
		if t := s.Scorers[i].Tests; t != nil && t.Dest == "" {
			t.Dest = "/corral-eval/tests"
		}
	}
	return s, nil
}

// check validates the decoded scenario's values.
func (d *decoder) check(s *Scenario) {
	if !nameRe.MatchString(s.Name) || len(s.Name) > 64 {
		d.errorf("name", "%q is not a valid name: letters and digits joined by single . _ or -, at most 64 characters", s.Name)
	}
	e := s.Environment
	n := 0
	for _, v := range []string{e.Image, e.Spec, e.Snapshot} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		d.errorf("environment", "give at most one of image, spec and snapshot")
	}
	if e.Tier != "" && e.Tier != "container" && e.Tier != "gvisor" {
		d.errorf("environment.tier", "%q is not a tier: want container or gvisor", e.Tier)
	}
	if e.Workdir != "" && !strings.HasPrefix(e.Workdir, "/") {
		d.errorf("environment.workdir", "%q is not an absolute path", e.Workdir)
	}
	for _, f := range []struct {
		p string
		v string
	}{{"environment.limits.memory", e.Limits.Memory}, {"environment.limits.disk", e.Limits.Disk}} {
		if f.v != "" {
			if _, err := units.ParseBytes(f.v); err != nil {
				d.errorf(f.p, "%q is not a size (use 512m, 2g, 1.5GiB or bytes)", f.v)
			}
		}
	}
	if e.Limits.CPUs < 0 {
		d.errorf("environment.limits.cpus", "must not be negative")
	}
	for p, nw := range map[string]*Network{"environment.network": e.Network, "environment.scoring_network": e.ScoringNetwork} {
		if nw == nil {
			continue
		}
		switch nw.Mode {
		case "", "none", "full":
			if len(nw.Allow) > 0 {
				d.errorf(p+".allow", "only for mode allowlist")
			}
		case "allowlist":
			if len(nw.Allow) == 0 {
				d.errorf(p+".allow", "mode allowlist needs at least one destination")
			}
		default:
			d.errorf(p+".mode", "%q is not a mode: want none, allowlist or full", nw.Mode)
		}
	}
	switch s.Agent.Wiring {
	case "", WiringHost, WiringBox:
	default:
		d.errorf("agent.wiring", "%q is not a wiring: want host (the agent runs on this host) or box (inside the box)", s.Agent.Wiring)
	}
	for i, v := range s.Agent.Secrets {
		name, hosts, ok := strings.Cut(v, "=")
		if !secretNameRe.MatchString(name) {
			d.errorf(fmt.Sprintf("agent.secrets[%d]", i), "%q: want NAME or NAME=HOST,... with NAME a variable name (letters, digits, _)", v)
		} else if ok && (hosts == "" || slices.Contains(strings.Split(hosts, ","), "")) {
			d.errorf(fmt.Sprintf("agent.secrets[%d]", i), "%q: an empty host: want NAME=HOST,...", v)
		}
	}
	if strings.TrimSpace(s.Problem) == "" {
		d.errorf("problem", "is required: the statement the agent gets")
	}
	if len(s.Scorers) == 0 {
		d.errorf("scorers", "at least one scorer is required")
	}
	names := map[string]bool{}
	for i, sc := range s.Scorers {
		p := fmt.Sprintf("scorers[%d]", i)
		kinds := 0
		if sc.Command != "" {
			kinds++
		}
		if sc.Tests != nil {
			kinds++
		}
		if sc.Script != nil {
			kinds++
		}
		if sc.Files != nil {
			kinds++
		}
		if kinds != 1 {
			d.errorf(p, "a scorer has exactly one of command:, tests:, script: or files:")
		}
		if sc.Weight < 0 {
			d.errorf(p+".weight", "must not be negative")
		}
		if sc.Name != "" {
			if names[sc.Name] {
				d.errorf(p+".name", "%q is used by another scorer", sc.Name)
			}
			names[sc.Name] = true
		}
		if t := sc.Tests; t != nil {
			if t.Files == "" {
				d.errorf(p+".tests.files", "is required: the test files, relative to the scenario")
			}
			if t.Command == "" {
				d.errorf(p+".tests.command", "is required: the command that runs the tests")
			}
			if t.Dest != "" && !strings.HasPrefix(t.Dest, "/") {
				d.errorf(p+".tests.dest", "%q is not an absolute path", t.Dest)
			}
		}
		if sc.Script != nil {
			switch sc.Script.Lang {
			case "", "sh", "bash", "python", "python3":
			default:
				d.errorf(p+".script.lang", "%q is not a language: want sh, bash or python", sc.Script.Lang)
			}
			if strings.TrimSpace(sc.Script.Run) == "" {
				d.errorf(p+".script.run", "is required: the script, which prints score=<0..1>")
			}
		}
		if sc.Files != nil && len(sc.Files) == 0 {
			d.errorf(p+".files", "list at least one path")
		}
		for j, fc := range sc.Files {
			fp := fmt.Sprintf("%s.files[%d]", p, j)
			if !strings.HasPrefix(fc.Path, "/") {
				d.errorf(fp+".path", "%q is not an absolute path", fc.Path)
			}
			if fc.Absent && (fc.Contains != "" || fc.Matches != "") {
				d.errorf(fp+".absent", "an absent path has no contents to check")
			}
			if fc.Matches != "" {
				if _, err := regexp.Compile(fc.Matches); err != nil {
					d.errorf(fp+".matches", "%v", err)
				}
			}
		}
	}
	if r := s.Reference; r != nil {
		if r.Patch == "" && len(r.Commands) == 0 {
			d.errorf("reference", "give a patch:, commands: or both")
		}
		if r.Dir != "" && !strings.HasPrefix(r.Dir, "/") {
			d.errorf("reference.dir", "%q is not an absolute path", r.Dir)
		}
	}
	for i, ce := range s.Counterexamples {
		p := fmt.Sprintf("counterexamples[%d]", i)
		if ce.Patch == "" {
			d.errorf(p+".patch", "is required: the failed attempt's patch, relative to the scenario")
		}
		if ce.Dir != "" && !strings.HasPrefix(ce.Dir, "/") {
			d.errorf(p+".dir", "%q is not an absolute path", ce.Dir)
		}
	}
}

// decoder turns a YAML node tree into a Scenario strictly, remembering the
// line of every field for the checks that follow.
type decoder struct {
	file string
	errs []*spec.FieldError
	pos  map[string]int
	set  map[string]bool
	n    int
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func (d *decoder) document(data []byte) (*yaml.Node, bool) {
	d.set = map[string]bool{}
	if len(data) > maxScenarioSize {
		d.errorAt("", 0, "the scenario is larger than %s", units.FormatBytes(maxScenarioSize))
		return nil, false
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg, line := strings.TrimPrefix(err.Error(), "yaml: "), 0
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		d.errorAt("", line, "%s", msg)
		return nil, false
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		d.errorAt("", root.Line, "want a mapping of fields (name:, environment:, problem:, scorers:, ...)")
		return nil, false
	}
	return root, true
}

// errorf records a problem with the field at path, at its line.
func (d *decoder) errorf(path, format string, args ...any) {
	line, ok := d.pos[path]
	for p := path; !ok && p != ""; {
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
		line, ok = d.pos[p]
	}
	d.errorAt(path, line, format, args...)
}

func (d *decoder) errorAt(path string, line int, format string, args ...any) {
	d.errs = append(d.errs, &spec.FieldError{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
}

func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *spec.FieldError) int { return a.Line - b.Line })
	errs := make([]error, len(d.errs))
	for i, e := range d.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

var durationType = reflect.TypeFor[Duration]()

// decode stores n in v, the field at path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if d.n++; d.n > 100_000 {
		if d.n == 100_001 {
			d.errorAt(path, n.Line, "the scenario has too many values (with aliases expanded)")
		}
		return
	}
	d.pos[path] = n.Line
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return
	}
	d.set[path] = true
	want := func(what string) { d.errorAt(path, n.Line, "want %s, got %s", what, describe(n)) }
	if v.Type() == durationType {
		dur, err := time.ParseDuration(n.Value)
		if n.Kind != yaml.ScalarNode || err != nil || dur <= 0 {
			want("a positive duration (90s, 5m, 1h)")
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			want("a mapping")
			return
		}
		fields := map[string]int{}
		for i := range v.NumField() {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("yaml"), ",")
			if name != "" && name != "-" {
				fields[name] = i
			}
		}
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := join(path, k.Value)
			idx, ok := fields[k.Value]
			if !ok {
				var known []string
				for name := range fields {
					known = append(known, name)
				}
				slices.Sort(known)
				d.errorAt(p, k.Line, "unknown field (want one of %s)", strings.Join(known, ", "))
				continue
			}
			if l, dup := seen[k.Value]; dup {
				d.errorAt(p, k.Line, "repeated (first at line %d)", l)
				continue
			}
			seen[k.Value] = k.Line
			d.decode(n.Content[i+1], v.Field(idx), p)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		d.decode(n, v.Elem(), path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			want("a list")
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content)))
		for i, c := range n.Content {
			d.decode(c, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			want("a mapping")
			return
		}
		v.Set(reflect.MakeMap(v.Type()))
		for i := 0; i+1 < len(n.Content); i += 2 {
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(n.Content[i+1], elem, join(path, n.Content[i].Value))
			v.SetMapIndex(reflect.ValueOf(n.Content[i].Value), elem)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			want("a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
			want("true or false")
			return
		}
		v.SetBool(b)
	case reflect.Int64:
		var i int64
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&i) != nil {
			want("an integer")
			return
		}
		v.SetInt(i)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
			want("a number")
			return
		}
		v.SetFloat(f)
	default:
		panic("eval: no decoder for " + v.Type().String())
	}
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!int", "!!float":
			return "the number " + n.Value
		case "!!bool":
			return n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "something else"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
