package spec

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"gopkg.in/yaml.v3"

	"github.com/corral-sandbox/corral/internal/units"
)

// MaxSize bounds a spec file.
const MaxSize = 1 << 20

// maxValues bounds the values a spec decodes to, aliases expanded, so that
// a small file of nested aliases cannot make Parse do unbounded work.
const maxValues = 100_000

// FieldError is one problem in a spec: the file, the line (0 when not
// known, for a spec made in code) and the field path ("resources.memory",
// "copy[1].src"; empty for the file as a whole). It wraps
// errdefs.ErrInvalidArgument.
type FieldError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

// Error formats the problem as "corral.yaml:12: resources.memory: ...".
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap classifies every spec problem as invalid input.
func (e *FieldError) Unwrap() error { return errdefs.ErrInvalidArgument }

// ReadFile reads the file at path, a kind ("spec", "scenario") that names
// it in errors, up to one byte more than max so that the parser can say it
// is too large. A missing file is errdefs.ErrNotFound.
func ReadFile(path, kind string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s %s does not exist: %w", kind, path, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("read %s: %w", kind, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", kind, err)
	}
	return data, nil
}

// Load reads and parses the spec at path and sets Dir to its directory.
func Load(path string) (*Spec, error) {
	data, err := ReadFile(path, "spec", MaxSize)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	if s.Dir, err = filepath.Abs(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("spec directory: %w", err)
	}
	return s, nil
}

// Parse parses and validates a spec; filename (default "corral.yaml") names
// it in errors. Every problem is reported, one *FieldError per line,
// joined with errors.Join, sorted by line; all wrap
// errdefs.ErrInvalidArgument. Unknown fields are errors.
func Parse(data []byte, filename string) (*Spec, error) {
	if filename == "" {
		filename = "corral.yaml"
	}
	d := &decoder{file: filename, pos: map[string]int{}, set: map[string]bool{}, bad: map[string]bool{}}
	s := &Spec{}
	if len(data) > MaxSize {
		d.errorf("", 0, "the spec is larger than %s", units.FormatBytes(MaxSize))
		return nil, d.err()
	}
	root, ok := d.document(data)
	if !ok {
		return nil, d.err()
	}
	d.pos[""] = root.Line
	d.decode(root, reflect.ValueOf(s).Elem(), "")
	if d.n > maxValues {
		return nil, d.err()
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if k := root.Content[i].Value; k == KindPackages || k == KindRun || k == KindCopy {
			s.order = append(s.order, k)
		}
	}
	(&checker{d: d, s: s}).check()
	if err := d.err(); err != nil {
		return nil, err
	}
	if s.Network.Mode == "" {
		s.Network.Mode = "none"
	}
	if s.Build.Network == "" {
		s.Build.Network = "host"
	}
	return s, nil
}

// decoder turns a YAML node tree into a Spec strictly, remembering the line
// of every field for the checks that follow.
type decoder struct {
	file string
	errs []*FieldError
	pos  map[string]int  // field path -> line of its value
	set  map[string]bool // field paths given a non-null value
	bad  map[string]bool // field paths that failed to decode
	n    int             // values decoded so far
}

var yamlLineRe = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document returns the root mapping of the single YAML document in data.
func (d *decoder) document(data []byte) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			d.errorf("", 0, "the spec is empty (from: is required)")
			return nil, false
		}
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := yamlLineRe.FindStringSubmatch(err.Error()); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		d.errorf("", line, "%s", msg)
		return nil, false
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		d.errorf("", next.Line, "only one YAML document is allowed")
		return nil, false
	}
	root := deref(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) > 0 {
		root = deref(root.Content[0])
	}
	if root.Kind != yaml.MappingNode {
		if isNull(root) {
			d.errorf("", 0, "the spec is empty (from: is required)")
		} else {
			d.errorf("", root.Line, "want a mapping of fields (name:, from:, ...), got %s", describe(root))
		}
		return nil, false
	}
	return root, true
}

// errorf records a problem with the field at path.
func (d *decoder) errorf(path string, line int, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf(format, args...)})
	d.bad[path] = true
}

func (d *decoder) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(d.errs, func(a, b *FieldError) int { return a.Line - b.Line })
	errs := make([]error, len(d.errs))
	for i, e := range d.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

var (
	stepType  = reflect.TypeFor[Step]()
	bytesType = map[string]bool{"resources.memory": true, "resources.disk": true}
)

// decode stores n in v, the field at path.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	n = deref(n)
	if d.n++; d.n > maxValues {
		if d.n == maxValues+1 {
			d.errorf(path, n.Line, "the spec has more than %d values (with aliases expanded)", maxValues)
		}
		return
	}
	d.pos[path] = n.Line
	if isNull(n) {
		return
	}
	d.set[path] = true
	want := func(what string) {
		d.errorf(path, n.Line, "want %s, got %s", what, describe(n))
	}
	switch v.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if v.Type() == stepType {
				want("one of run:, packages: or copy: (like \"- run: make\")")
				return
			}
			want("a mapping")
			return
		}
		d.decodeStruct(n, v, path)
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
		seen := map[string]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := deref(n.Content[i]), n.Content[i+1]
			p := join(path, k.Value)
			if k.Kind != yaml.ScalarNode {
				d.errorf(path, k.Line, "keys must be strings, got %s", describe(k))
				continue
			}
			if l, dup := seen[k.Value]; dup {
				d.errorf(p, k.Line, "repeated (first at line %d)", l)
				continue
			}
			seen[k.Value] = k.Line
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, elem, p)
			v.SetMapIndex(reflect.ValueOf(k.Value), elem)
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			want("a string")
			return
		}
		v.SetString(n.Value)
	case reflect.Int, reflect.Int64:
		if n.Kind != yaml.ScalarNode {
			want("a number")
			return
		}
		if bytesType[path] {
			b, err := units.ParseBytes(n.Value)
			if err != nil {
				d.errorf(path, n.Line, "%q is not a size (use 512m, 2g, 1.5GiB or bytes)", n.Value)
				return
			}
			v.SetInt(b)
			return
		}
		var i int64
		if n.Tag != "!!int" || n.Decode(&i) != nil || v.OverflowInt(i) {
			d.errorf(path, n.Line, "%q is not an integer", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		var b bool
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" || n.Decode(&b) != nil {
			want("true or false")
			return
		}
		v.SetBool(b)
	case reflect.Float64:
		var f float64
		if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
			d.errorf(path, n.Line, "want a number, got %s", describe(n))
			return
		}
		v.SetFloat(f)
	default:
		panic("spec: no decoder for " + v.Type().String())
	}
}

// decodeStruct decodes a mapping into the struct v by yaml tags; unknown
// and repeated keys are errors.
func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	fields := yamlFields(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := deref(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(path, k.Line, "keys must be strings, got %s", describe(k))
			continue
		}
		p := join(path, k.Value)
		idx, ok := fields[k.Value]
		if !ok {
			d.errorf(p, k.Line, "unknown field%s", suggest(v.Type(), k.Value))
			continue
		}
		if l, dup := seen[k.Value]; dup {
			d.errorf(p, k.Line, "repeated (first at line %d)", l)
			continue
		}
		seen[k.Value] = k.Line
		d.decode(val, v.Field(idx), p)
	}
	if v.Type() == stepType {
		if len(seen) != 1 {
			if len(seen) > 1 || !hasBadChild(d.bad, path) {
				d.errorf(path, n.Line, "a step has exactly one of run:, packages: or copy:")
			}
			d.bad[path] = true
			return
		}
		for k := range seen {
			v.FieldByName("Kind").SetString(k)
		}
	}
}

// yamlFields maps the yaml names of t's fields to their indexes.
func yamlFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := range t.NumField() {
		if name := yamlName(t.Field(i)); name != "" {
			m[name] = i
		}
	}
	return m
}

// yamlName is the yaml name of a field, or "" when it has none.
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" || name == "" {
		return ""
	}
	return name
}

// aliases are names other formats use for spec fields.
var aliases = map[string]string{
	"image": "from", "base": "from", "environment": "env",
	"working_dir": "workdir", "cwd": "workdir", "expose": "ports",
	"cmd": "run", "command": "run", "commands": "run", "apt": "packages",
	"setuid": "allow_privilege_escalation", "sudo": "allow_privilege_escalation",
	"no_new_privileges": "allow_privilege_escalation", "no-new-privileges": "allow_privilege_escalation",
	"allowprivilegeescalation": "allow_privilege_escalation", "security_opt": "allow_privilege_escalation",
	"security": "allow_privilege_escalation",
}

// suggest returns a " (did you mean X?)" hint for an unknown key of t: a
// field of t within two edits, a field of one of t's nested structs, or a
// known alias.
func suggest(t reflect.Type, key string) string {
	hint := func(s string) string { return fmt.Sprintf(" (did you mean %s?)", s) }
	best, bestDist := "", 3
	for name := range yamlFields(t) {
		if dd := editDistance(strings.ToLower(key), name); dd < bestDist && dd < len(name) {
			best, bestDist = name, dd
		}
	}
	if best != "" {
		return hint(best)
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if name := yamlName(f); name != "" && f.Type.Kind() == reflect.Struct && f.Type != stepType {
			if _, ok := yamlFields(f.Type)[key]; ok {
				return hint(name + "." + key)
			}
		}
	}
	if a, ok := aliases[strings.ToLower(key)]; ok {
		if _, ok := yamlFields(t)[a]; ok {
			return hint(a)
		}
	}
	return ""
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// describe names what a node is, for "want X, got Y" messages.
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
		case "!!null":
			return "nothing"
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

// hasBadChild reports whether a field below path failed to decode.
func hasBadChild(bad map[string]bool, path string) bool {
	for p := range bad {
		if strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}
