package cli

// Checks that the documentation says what the code does, where that can be
// checked mechanically: the flags that README.md and docs/*.md (and the
// examples of every --help) pass to corral verbs, the daemon's configuration
// keys and defaults that the docs quote, and the Go version README asks for.
// They walk the cobra tree and the Config struct, so new verbs, flags and
// keys are covered without touching this file; a failure names the file, the
// line and what is missing.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/corral-sandbox/corral/internal/daemon"
)

// repoRoot is the repository, from this package's directory.
const repoRoot = "../.."

// docFile is one Markdown file of the repository.
type docFile struct {
	name  string // as shown in failures: README.md, docs/cli.md
	lines []string
}

func readDocs(t *testing.T) []docFile {
	t.Helper()
	names := []string{"README.md"}
	md, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range md {
		names = append(names, filepath.Join("docs", filepath.Base(p)))
	}
	if len(names) < 5 {
		t.Fatalf("found only %v: is the test running in internal/cli?", names)
	}
	var docs []docFile
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(repoRoot, n))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, docFile{name: n, lines: strings.Split(string(b), "\n")})
	}
	return docs
}

// codeLine is one line of code in a doc: a line of a fenced block, or
// one inline code span.
type codeLine struct {
	line  int // 1-based
	text  string
	fence string // the fence's info string ("sh", "toml"); "`" for an inline span
}

var inlineCode = regexp.MustCompile("`([^`]+)`")

// codeLines returns the code of doc: every line of its fenced blocks and
// every inline code span of its other lines.
func codeLines(doc docFile) []codeLine {
	var out []codeLine
	fence, in := "", false
	for i, l := range doc.lines {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "```") {
			in = !in
			fence = strings.TrimSpace(strings.TrimPrefix(t, "```"))
			continue
		}
		if in {
			out = append(out, codeLine{i + 1, l, fence})
			continue
		}
		for _, m := range inlineCode.FindAllStringSubmatch(l, -1) {
			// A table cell escapes its pipes: `a \| b`.
			out = append(out, codeLine{i + 1, strings.ReplaceAll(m[1], `\|`, "|"), "`"})
		}
	}
	return out
}

// testRoot is the cobra tree of the corral binary.
func testRoot() *cobra.Command {
	var out bytes.Buffer
	root := (&app{streams: Streams{In: strings.NewReader(""), Out: &out, Err: &out}}).rootCmd()
	root.InitDefaultVersionFlag() // cobra adds --version when it runs
	return root
}

// flagsBeforeArgs reports whether cmd stops parsing its flags at its first
// argument (exec, run: the rest is the command's), probed the way pflag
// behaves, since it has no getter: an unknown flag after an argument is
// an error only where flags and arguments may mix.
func flagsBeforeArgs(cmd *cobra.Command) bool {
	return cmd.Flags().Parse([]string{"arg", "--no-such-flag-probe"}) == nil
}

// invocation is one `corral ...` command line found in a text.
type invocation struct {
	args []string // after "corral", up to the end of the command
}

// invocations finds the corral commands in a line of shell: every word
// "corral" (also "$(corral", "/usr/local/bin/corral") starts one, which
// ends at a pipe, a list operator, a redirection, a comment or a closing
// parenthesis. A command substitution in its arguments ("$(corral ls -q)")
// is one argument of it, and a command of its own.
func invocations(text string) []invocation {
	words := strings.Fields(text)
	var out []invocation
	for i, w := range words {
		if j := strings.LastIndex(w, "("); j >= 0 {
			w = w[j+1:]
		}
		w = strings.TrimLeft(w, "\"'")
		if w != "corral" && !strings.HasSuffix(w, "bin/corral") {
			continue
		}
		var args []string
		depth := 0
	args:
		for _, a := range words[i+1:] {
			if depth > 0 || strings.Contains(a, "$(") {
				depth += strings.Count(a, "$(") - strings.Count(a, ")")
				if depth < 0 {
					break // it closed the substitution this command is in
				}
				args = append(args, "SUBSTITUTION")
				continue
			}
			switch {
			case a == "|" || a == "||" || a == "&&" || a == ";" || a == "&" || strings.HasPrefix(a, "#"),
				strings.HasPrefix(a, ">") || strings.HasPrefix(a, "<") || strings.HasPrefix(a, "2>"):
				break args
			}
			end := strings.HasSuffix(a, ";") || strings.HasSuffix(a, ")") || strings.HasSuffix(a, "|")
			a = strings.TrimRight(a, ";)|")
			if a != "" {
				args = append(args, a)
			}
			if end {
				break
			}
		}
		out = append(out, invocation{args})
	}
	return out
}

// benchOutput is how the report of `corral bench` begins: a fenced block
// that starts with it is output, whose "corral ..." lines are measurements.
const benchOutput = "corral bench, "

var (
	verbLike   = regexp.MustCompile(`^[a-z][a-z-]*$`)
	longFlag   = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	shortFlags = regexp.MustCompile(`^-[A-Za-z]+$`)
)

// checkInvocation walks args down the cobra tree from root and returns what
// does not exist: unknown verbs and flags.
func checkInvocation(root *cobra.Command, args []string) []string {
	var problems []string
	cmd := root
	positional := false
	for i := 0; i < len(args); i++ {
		a := strings.Trim(args[i], `[]{}"'`)
		switch {
		case a == "--":
			return problems // the command's own arguments follow
		case strings.HasPrefix(a, "--"):
			name, _, hasValue := strings.Cut(a[2:], "=")
			if !longFlag.MatchString(name) {
				continue // "--", "--FLAG" placeholders and the like
			}
			f := lookupFlag(cmd, name)
			if f == nil {
				problems = append(problems, fmt.Sprintf("%q has no flag --%s", cmd.CommandPath(), name))
				continue
			}
			if !hasValue && f.NoOptDefVal == "" {
				i++ // the flag's value
			}
		case shortFlags.MatchString(a):
			// -q, -it, -t NAME
			for j, c := range a[1:] {
				f := lookupShort(cmd, string(c))
				if f == nil {
					problems = append(problems, fmt.Sprintf("%q has no flag -%c", cmd.CommandPath(), c))
					break
				}
				if f.NoOptDefVal == "" {
					if j == len(a)-2 {
						i++ // the flag's value is the next word
					}
					break // or the rest of this one
				}
			}
		case !positional && cmd.HasSubCommands():
			if sub := findSub(cmd, a); sub != nil {
				cmd = sub
				continue
			}
			if verbLike.MatchString(a) && !cmd.Runnable() {
				// A group (corral, corral image) takes a verb, not arguments.
				problems = append(problems, fmt.Sprintf("%q has no command %q", cmd.CommandPath(), a))
				return problems
			}
			positional = true
		default:
			positional = true
		}
		if positional && flagsBeforeArgs(cmd) {
			return problems // the command's own arguments follow
		}
	}
	return problems
}

func findSub(cmd *cobra.Command, name string) *cobra.Command {
	for _, c := range cmd.Commands() {
		if c.Name() == name || slices.Contains(c.Aliases, name) {
			return c
		}
	}
	return nil
}

// lookupFlag finds a flag of cmd, its own or inherited, or --help.
func lookupFlag(cmd *cobra.Command, name string) *pflag.Flag {
	if name == "help" {
		return &pflag.Flag{Name: "help", NoOptDefVal: "true"}
	}
	for c := cmd; c != nil; c = c.Parent() {
		fs := c.PersistentFlags()
		if c == cmd {
			fs = c.Flags()
			if f := c.PersistentFlags().Lookup(name); f != nil {
				return f
			}
		}
		if f := fs.Lookup(name); f != nil {
			return f
		}
	}
	return nil
}

func lookupShort(cmd *cobra.Command, short string) *pflag.Flag {
	if short == "h" {
		return &pflag.Flag{Name: "help", Shorthand: "h", NoOptDefVal: "true"}
	}
	for c := cmd; c != nil; c = c.Parent() {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			if c != cmd && fs == c.Flags() {
				continue
			}
			if f := fs.ShorthandLookup(short); f != nil {
				return f
			}
		}
	}
	return nil
}

// TestDocsFlagsExist checks every `corral VERB ... --flag` in README.md,
// docs/*.md and the examples of every command's --help: the verb exists and
// has the flag (its own or inherited).
func TestDocsFlagsExist(t *testing.T) {
	root := testRoot()
	n := 0
	for _, doc := range readDocs(t) {
		output := false
		code := codeLines(doc)
		for i, cl := range code {
			if cl.fence != "`" && (i == 0 || code[i-1].line != cl.line-1) {
				output = strings.HasPrefix(cl.text, benchOutput) // a block's first line
			}
			if output {
				continue
			}
			for _, inv := range invocations(cl.text) {
				n++
				for _, p := range checkInvocation(root, inv.args) {
					t.Errorf("%s:%d: %s (in %q)", doc.name, cl.line, p, strings.TrimSpace(cl.text))
				}
			}
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for i, l := range strings.Split(c.Example, "\n") {
			for _, inv := range invocations(l) {
				n++
				for _, p := range checkInvocation(root, inv.args) {
					t.Errorf("%q --help, example line %d: %s (in %q)", c.CommandPath(), i+1, p, strings.TrimSpace(l))
				}
			}
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	if n < 100 {
		t.Errorf("found %d corral commands in the docs and help texts; the scanner is broken", n)
	}
}

func TestCheckInvocation(t *testing.T) {
	root := testRoot()
	tests := []struct {
		line string
		want []string
	}{
		{"corral exec -it $id -- bash --nope", nil},
		{"id=$(corral create --memory 512m --cpus 1)", nil},
		{"corral image ls; corral image prune --build-cache", nil},
		{"printf %s \"$KEY\" | corral secret set API_KEY", nil},
		{"corral pool set busybox --size 8 --sise 2", []string{`"corral pool set" has no flag --sise`}},
		{"corral exec -x ID -- true", []string{`"corral exec" has no flag -x`}},
		{"corral frobnicate ID", []string{`"corral" has no command "frobnicate"`}},
		{"corral image frobnicate", []string{`"corral image" has no command "frobnicate"`}},
		{"corral --host unix:///x ls --json # comment --nope", nil},
		{"corral serve --config /etc/corral/config.toml >>/var/log/corral.log --nope", nil},
		{"corral rm -f $(corral ls -q --all)", []string{`"corral ls" has no flag --all`}},
		{"corral pause $(corral ls -q) --nope", []string{`"corral pause" has no flag --nope`}},
		{"tmpfs /run/corral tmpfs mode=0711 0 0", nil},
		{"/usr/local/bin/corral serve --nope", []string{`"corral serve" has no flag --nope`}},
		{"corral exec web ls -la", nil}, // exec's flags end at the ID
		{"corral run -l k=v ls -l", nil},
		{"corral --version", nil},
		{"corral exec -w /src -q web ls", []string{`"corral exec" has no flag -q`}},
	}
	for _, tc := range tests {
		var got []string
		for _, inv := range invocations(tc.line) {
			got = append(got, checkInvocation(root, inv.args)...)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("check(%q) = %q; want %q", tc.line, got, tc.want)
		}
	}
}

// configKeys returns the TOML keys of daemon.Config, as dotted paths
// ("root", "resources.cpus"), and which of them are arrays of tables
// ("pools").
func configKeys() (keys map[string]reflect.Type, arrays map[string]bool) {
	keys, arrays = map[string]reflect.Type{}, map[string]bool{}
	var walk func(typ reflect.Type, prefix string)
	walk = func(typ reflect.Type, prefix string) {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := prefix + name
			keys[p] = f.Type
			switch {
			case f.Type.Kind() == reflect.Struct:
				walk(f.Type, p+".")
			case f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct:
				arrays[p] = true
				walk(f.Type.Elem(), p+".")
			}
		}
	}
	walk(reflect.TypeFor[daemon.Config](), "")
	return keys, arrays
}

// configKey reports whether k is a key of the config: one of keys, or an
// entry of a table that is a map ("runtime_paths.runc").
func configKey(keys map[string]reflect.Type, k string) bool {
	if keys[k] != nil {
		return true
	}
	parent, _, ok := strings.Cut(k, ".")
	return ok && keys[parent] != nil && keys[parent].Kind() == reflect.Map && !strings.Contains(k[len(parent)+1:], ".")
}

// tomlBlock is a ```toml block of a doc.
type tomlBlock struct {
	doc   string
	start int // line of its first line
	lines []string
}

func tomlBlocks(docs []docFile) []tomlBlock {
	var out []tomlBlock
	for _, doc := range docs {
		var cur *tomlBlock
		for _, cl := range codeLines(doc) {
			if cl.fence != "toml" {
				cur = nil
				continue
			}
			if cur == nil || cl.line != cur.start+len(cur.lines) {
				out = append(out, tomlBlock{doc: doc.name, start: cl.line})
				cur = &out[len(out)-1]
			}
			cur.lines = append(cur.lines, cl.text)
		}
	}
	return out
}

var (
	tomlTable = regexp.MustCompile(`^\s*(#\s*)?\[\[?([a-z0-9_.]+)\]\]?\s*(#.*)?$`)
	tomlKey   = regexp.MustCompile(`^\s*(#\s*)?([a-z_]+)\s*=`)
)

// blockKeys returns the keys a block sets or shows commented out, each with
// its line in the doc, and the block with those comments removed.
func blockKeys(b tomlBlock) (lines map[string]int, uncommented string) {
	lines = map[string]int{}
	table := ""
	var sb strings.Builder
	for i, l := range b.lines {
		if m := tomlTable.FindStringSubmatch(l); m != nil {
			table = m[2] + "."
			lines[m[2]] = b.start + i
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		} else if m := tomlKey.FindStringSubmatch(l); m != nil {
			lines[table+m[2]] = b.start + i
			l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#"))
		}
		sb.WriteString(l + "\n")
	}
	return lines, sb.String()
}

// decodeFragment decodes a TOML fragment over the defaults, refusing
// unknown keys, and validates the result.
func decodeFragment(text string, doc string, start int) (daemon.Config, []string) {
	cfg := daemon.DefaultConfig()
	dec := toml.NewDecoder(strings.NewReader(text))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		var strict *toml.StrictMissingError
		var de *toml.DecodeError
		switch {
		case errors.As(err, &strict):
			var out []string
			for _, e := range strict.Errors {
				row, _ := e.Position()
				out = append(out, fmt.Sprintf("%s:%d: config key %q does not exist in daemon.Config", doc, start+row-1, strings.Join(e.Key(), ".")))
			}
			return cfg, out
		case errors.As(err, &de):
			row, _ := de.Position()
			return cfg, []string{fmt.Sprintf("%s:%d: %v", doc, start+row-1, err)}
		}
		return cfg, []string{fmt.Sprintf("%s:%d: %v", doc, start, err)}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, []string{fmt.Sprintf("%s:%d: the configuration in this block is invalid: %v", doc, start, err)}
	}
	return cfg, nil
}

// TestDocsConfig checks every ```toml block of the docs: its keys (also
// the commented-out ones) exist in daemon.Config and its values are valid;
// and every `key = value` or `[table] key` span names a key that exists.
func TestDocsConfig(t *testing.T) {
	keys, _ := configKeys()
	leaves := map[string]bool{}
	for k := range keys {
		leaves[k[strings.LastIndex(k, ".")+1:]] = true
	}
	docs := readDocs(t)
	blocks := tomlBlocks(docs)
	if len(blocks) < 2 {
		t.Fatalf("found %d toml blocks in the docs; want the sample of docs/operations.md and more", len(blocks))
	}
	for _, b := range blocks {
		text := strings.Join(b.lines, "\n")
		if _, problems := decodeFragment(text, b.doc, b.start); len(problems) > 0 {
			for _, p := range problems {
				t.Error(p)
			}
			continue
		}
		_, uncommented := blockKeys(b)
		if uncommented != text+"\n" {
			for _, p := range checkUncommented(uncommented, b) {
				t.Error(p)
			}
		}
	}
	span := regexp.MustCompile(`^(?:\[([a-z_.]+)\] ?)?([a-z_]+)(?: = .+)?$`)
	for _, doc := range docs {
		for _, cl := range codeLines(doc) {
			if cl.fence != "`" {
				continue
			}
			m := span.FindStringSubmatch(cl.text)
			if m == nil || (m[1] == "" && !strings.Contains(cl.text, " = ")) {
				continue // `word` alone is not necessarily a config key
			}
			switch {
			case m[1] != "" && !configKey(keys, m[1]+"."+m[2]):
				t.Errorf("%s:%d: `%s`: config key %s.%s does not exist in daemon.Config", doc.name, cl.line, cl.text, m[1], m[2])
			case m[1] == "" && !leaves[m[2]]:
				t.Errorf("%s:%d: `%s`: config key %q does not exist in daemon.Config", doc.name, cl.line, cl.text, m[2])
			}
		}
	}
}

// checkUncommented decodes a block with its commented-out keys enabled:
// the examples they show must be valid too.
func checkUncommented(text string, b tomlBlock) []string {
	_, problems := decodeFragment(text, b.doc, b.start)
	for i, p := range problems {
		problems[i] = p + " (with the commented-out keys enabled)"
	}
	return problems
}

// TestDocsConfigSample checks the configuration sample at the top of
// docs/operations.md against the daemon: the values it sets are the
// defaults (DefaultConfig), and it shows every key of daemon.Config (set
// or commented out).
func TestDocsConfigSample(t *testing.T) {
	var sample *tomlBlock
	for _, b := range tomlBlocks(readDocs(t)) {
		if b.doc == filepath.Join("docs", "operations.md") {
			sample = &b
			break
		}
	}
	if sample == nil {
		t.Fatal("docs/operations.md has no ```toml block: the configuration sample is missing")
	}
	lines, _ := blockKeys(*sample)
	keys, arrays := configKeys()

	// Every key of the sample exists (TestDocsConfig says so too), and
	// every key of Config is in the sample; an array of tables ([[pools]])
	// needs only its header.
	for k, l := range lines {
		if !configKey(keys, k) {
			t.Errorf("docs/operations.md:%d: config key %q does not exist in daemon.Config", l, k)
		}
	}
	for k, typ := range keys {
		parent := k[:max(strings.LastIndex(k, "."), 0)]
		if _, ok := lines[k]; ok || arrays[parent] || typ.Kind() == reflect.Struct {
			continue
		}
		t.Errorf("docs/operations.md:%d: config key %q is not in the configuration sample (add it, commented out if it has no default)", sample.start, k)
	}

	// The values it sets are the defaults.
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(strings.Join(sample.lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := daemon.LoadConfig(path)
	if err != nil {
		t.Fatalf("docs/operations.md:%d: the configuration sample does not load: %v", sample.start, err)
	}
	for _, d := range diffConfig(reflect.ValueOf(got), reflect.ValueOf(daemon.DefaultConfig()), "") {
		t.Errorf("docs/operations.md:%d: %s = %s in the sample; the default is %s", lines[d.key], d.key, tomlText(d.doc), tomlText(d.code))
	}
}

type configDiff struct {
	key       string
	doc, code any
}

// diffConfig compares two configurations field by field (an empty list
// equals none) and returns the keys that differ.
func diffConfig(doc, code reflect.Value, prefix string) []configDiff {
	var out []configDiff
	for i := range doc.NumField() {
		f := doc.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		a, b := doc.Field(i), code.Field(i)
		switch {
		case f.Type.Kind() == reflect.Struct:
			out = append(out, diffConfig(a, b, prefix+name+".")...)
		case f.Type.Kind() == reflect.Slice && a.Len() == 0 && b.Len() == 0:
		case !reflect.DeepEqual(a.Interface(), b.Interface()):
			out = append(out, configDiff{prefix + name, a.Interface(), b.Interface()})
		}
	}
	return out
}

// tomlText writes v as TOML would.
func tomlText(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprint(v)
}

// TestDocsGoVersion checks that README.md asks for the Go version go.mod
// needs.
func TestDocsGoVersion(t *testing.T) {
	mod, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(mod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	want := string(m[1])
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := regexp.MustCompile(`Go (?:≥|>=) ?(\d+\.\d+)`).FindAllSubmatch(readme, -1)
	if len(quoted) == 0 {
		t.Errorf("README.md does not say which Go it needs (\"Go ≥ %s\")", want)
	}
	for _, q := range quoted {
		if string(q[1]) != want {
			t.Errorf("README.md asks for Go ≥ %s; go.mod needs %s", q[1], want)
		}
	}
}
