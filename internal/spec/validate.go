package spec

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/units"
)

// Limits of resources. The minimums are the daemon's too
// (sandbox.MinMemoryBytes, MinDiskBytes and MinPids, which
// TestDocumentedMinimums checks are equal), so that a spec that validates
// never asks for a sandbox the daemon refuses; the
// documentation (docs/spec.md, docs/corral.schema.json) quotes them and
// TestDocumentedMinimums keeps it honest.
const (
	MaxCPUs   = 1024
	MinMemory = 8 << 20
	MinDisk   = 16 << 20
	MinPids   = 8
)

// Validate checks a spec made in code (Parse validates what it parses):
// the same rules, reported without line numbers.
func (s *Spec) Validate() error {
	d := &decoder{file: "corral.yaml", pos: map[string]int{}, set: map[string]bool{}, bad: map[string]bool{}}
	(&checker{d: d, s: s}).check()
	return d.err()
}

var (
	// packageRe is a Debian package name, an optional :arch and an optional
	// =version (no shell metacharacters, no leading '-').
	packageRe = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+(?::[a-z0-9][a-z0-9-]*)?(?:=[A-Za-z0-9][A-Za-z0-9.+~:-]*)?$`)
	envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userRe    = regexp.MustCompile(`^[a-z_][a-z0-9_-]*\$?$`)
	modeRe    = regexp.MustCompile(`^0?[0-7]{3}$`)
	labelRe   = regexp.MustCompile(`^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$`)
)

// checker applies the rules to a decoded spec.
type checker struct {
	d *decoder
	s *Spec
}

// errorf records a problem at path unless the field (or one around it)
// already failed to decode. The line is that of path's value, or of the
// nearest enclosing field.
func (c *checker) errorf(field, format string, args ...any) {
	for p := field; ; p = parent(p) {
		if c.d.bad[p] {
			return
		}
		if p == "" {
			break
		}
	}
	line := 0
	for p := field; ; p = parent(p) {
		if l, ok := c.d.pos[p]; ok {
			line = l
			break
		}
		if p == "" {
			break
		}
	}
	c.d.errs = append(c.d.errs, &FieldError{File: c.d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// given reports whether a numeric field was written (a zero written is
// checked) or is non-zero.
func (c *checker) given(field string, nonZero bool) bool { return nonZero || c.d.set[field] }

func (c *checker) check() {
	s := c.s
	if s.Name != "" {
		if msg := identifiers.ImageNameProblem(s.Name); msg != "" {
			c.errorf("name", "%q is not an image name: %s", s.Name, msg)
		}
	}
	switch {
	case strings.TrimSpace(s.From) == "":
		c.errorf("from", "the base image is required (a local image, debian:<suite>, HOST/PATH:TAG, docker://REF, oci-layout:DIR or archive:FILE)")
	case strings.ContainsFunc(s.From, isSpaceOrControl):
		c.errorf("from", "%q contains spaces or control characters", s.From)
	}
	c.packages("packages", s.Packages)
	for i, r := range s.Run {
		c.run(fmt.Sprintf("run[%d]", i), r)
	}
	for i, cp := range s.Copy {
		c.copy(fmt.Sprintf("copy[%d]", i), cp)
	}
	if len(s.Steps) > 0 {
		topLevel := map[string]bool{KindPackages: len(s.Packages) > 0, KindRun: len(s.Run) > 0, KindCopy: len(s.Copy) > 0}
		for _, k := range []string{KindPackages, KindRun, KindCopy} {
			if topLevel[k] || c.d.set[k] {
				c.errorf(k, "cannot be used together with steps: (move it into steps:)")
			}
		}
	}
	for i, st := range s.Steps {
		p := fmt.Sprintf("steps[%d]", i)
		kind := st.Kind
		if kind == "" {
			if boolCount(len(st.Packages) > 0, st.Run != "", st.Copy != nil) != 1 {
				c.errorf(p, "a step has exactly one of run:, packages: or copy:")
				continue
			}
			kind = st.inferKind()
		}
		switch kind {
		case KindPackages:
			if len(st.Packages) == 0 {
				c.errorf(p+".packages", "lists no packages")
			}
			c.packages(p+".packages", st.Packages)
		case KindRun:
			c.run(p+".run", st.Run)
		case KindCopy:
			if st.Copy == nil {
				c.errorf(p+".copy", "want {src: .., dst: ..}")
				continue
			}
			c.copy(p+".copy", *st.Copy)
		default:
			c.errorf(p, "unknown step kind %q", kind)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		p := "env." + k
		if !envNameRe.MatchString(k) {
			c.errorf(p, "%q is not a variable name (letters, digits and '_', not starting with a digit)", k)
		}
		if strings.ContainsRune(s.Env[k], 0) {
			c.errorf(p, "the value contains a NUL byte")
		}
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || strings.ContainsRune(s.Workdir, 0)) {
		c.errorf("workdir", "%q is not an absolute path", s.Workdir)
	}
	if s.User != "" {
		if msg := userProblem(s.User); msg != "" {
			c.errorf("user", "%q %s", s.User, msg)
		}
	}
	switch s.Tier {
	case "", "container", "gvisor":
	default:
		c.errorf("tier", "%q must be container or gvisor", s.Tier)
	}
	c.resources()
	c.network()
	seen := map[string]bool{}
	for i, name := range s.Secrets {
		p := fmt.Sprintf("secrets[%d]", i)
		switch _, inEnv := s.Env[name]; {
		case !envNameRe.MatchString(name):
			c.errorf(p, "%q is not a variable name (letters, digits and '_', not starting with a digit)", name)
		case seen[name]:
			c.errorf(p, "%s is listed twice", name)
		case inEnv:
			c.errorf(p, "%s is also set in env: a secret's value must not be part of the image", name)
		}
		seen[name] = true
	}
	ports := map[int]bool{}
	for i, port := range s.Ports {
		p := fmt.Sprintf("ports[%d]", i)
		switch {
		case port < 1 || port > 65535:
			c.errorf(p, "%d is not a port (1-65535)", port)
		case ports[port]:
			c.errorf(p, "%d is listed twice", port)
		}
		ports[port] = true
	}
	targets := map[string]bool{}
	for i, v := range s.Volumes {
		p := fmt.Sprintf("volumes[%d]", i)
		m, err := ParseVolume(v)
		switch {
		case err != nil:
			c.errorf(p, "%v", err)
		case targets[m.Target]:
			c.errorf(p, "%s is mounted on twice", m.Target)
		}
		targets[m.Target] = true
	}
	if m := s.Build.Network; m != "" && m != "host" && m != "none" {
		c.errorf("build.network", "%q is not a build network (host or none)", m)
	}
}

func (c *checker) packages(field string, pkgs []string) {
	for i, p := range pkgs {
		if !packageRe.MatchString(p) {
			c.errorf(fmt.Sprintf("%s[%d]", field, i), "%q is not a Debian package name (want name, name:arch or name=version)", p)
		}
	}
}

func (c *checker) run(field, cmd string) {
	switch {
	case strings.TrimSpace(cmd) == "":
		c.errorf(field, "the command is empty")
	case strings.ContainsRune(cmd, 0):
		c.errorf(field, "the command contains a NUL byte")
	}
}

func (c *checker) copy(field string, cp Copy) {
	switch src := cp.Src; {
	case src == "":
		c.errorf(field+".src", "required (a path relative to the spec's directory)")
	case strings.ContainsRune(src, 0):
		c.errorf(field+".src", "contains a NUL byte")
	case path.IsAbs(src):
		c.errorf(field+".src", "%q is absolute; sources are relative to the spec's directory", src)
	case path.Clean(src) == ".." || strings.HasPrefix(path.Clean(src), "../"):
		c.errorf(field+".src", "%q is outside the spec's directory", src)
	}
	switch dst := cp.Dst; {
	case dst == "":
		c.errorf(field+".dst", "required (an absolute path in the image)")
	case !path.IsAbs(dst) || strings.ContainsRune(dst, 0):
		c.errorf(field+".dst", "%q is not an absolute path", dst)
	}
	if cp.Mode != "" && !modeRe.MatchString(cp.Mode) {
		c.errorf(field+".mode", "%q is not an octal mode like \"0755\" (permission bits only)", cp.Mode)
	}
	if cp.Owner != "" {
		u, g, hasGroup := strings.Cut(cp.Owner, ":")
		if userProblem(u) != "" || hasGroup && userProblem(g) != "" {
			c.errorf(field+".owner", "%q is not an owner (want user, uid, user:group or uid:gid)", cp.Owner)
		}
	}
}

// userProblem returns why u is neither a user name nor a numeric id, or "".
func userProblem(u string) string {
	if n, err := strconv.ParseUint(u, 10, 32); err == nil {
		if n == 1<<32-1 {
			return "is not a valid uid"
		}
		return ""
	}
	if len(u) > 32 || !userRe.MatchString(u) {
		return "is not a user name (lowercase letters, digits, '_' and '-', at most 32) or a numeric uid"
	}
	return ""
}

func (c *checker) resources() {
	r := c.s.Resources
	if c.given("resources.cpus", r.CPUs != 0) && !(r.CPUs > 0 && r.CPUs <= MaxCPUs) {
		c.errorf("resources.cpus", "%v is out of range (more than 0, at most %d)", r.CPUs, MaxCPUs)
	}
	if c.given("resources.memory", r.Memory != 0) && r.Memory < MinMemory {
		c.errorf("resources.memory", "%s is less than the minimum %s", units.FormatBytes(r.Memory), units.FormatBytes(MinMemory))
	}
	if c.given("resources.disk", r.Disk != 0) && r.Disk < MinDisk {
		c.errorf("resources.disk", "%s is less than the minimum %s", units.FormatBytes(r.Disk), units.FormatBytes(MinDisk))
	}
	if c.given("resources.pids", r.Pids != 0) && r.Pids < MinPids {
		c.errorf("resources.pids", "%d is less than the minimum %d", r.Pids, MinPids)
	}
}

func (c *checker) network() {
	n := c.s.Network
	switch n.Mode {
	case "", "none", "full", "open":
		if len(n.Allow) > 0 {
			c.errorf("network.allow", "only used with mode: allowlist")
		}
	case "allowlist":
		if len(n.Allow) == 0 {
			c.errorf("network.allow", "mode allowlist needs at least one host")
		}
	default:
		c.errorf("network.mode", "%q is not a network mode (none, allowlist or full)", n.Mode)
	}
	for i, h := range n.Allow {
		if r, err := netpolicy.ParseRule(h); err == nil && (r.Port != 0 || r.Host == "") && !strings.Contains(h, "/") {
			continue // host:port, an address or [v6]:port
		} else if err == nil && r.Host == "" {
			continue // a CIDR prefix
		}
		if msg := hostProblem(h); msg != "" {
			c.errorf(fmt.Sprintf("network.allow[%d]", i), "%q %s", h, msg)
		}
	}
}

// hostProblem returns why h is not an allowlist entry, or "". Entries are
// lowercase DNS names ("api.example.org") or "*." and a domain of at least
// two labels ("*.example.org": its subdomains, not the domain itself).
// Schemes and paths are refused: the egress proxy matches the names in TLS
// SNI and HTTP Host. Ports, addresses and CIDR prefixes are checked by
// netpolicy.ParseRule before this.
func hostProblem(h string) string {
	name, wild := strings.CutPrefix(h, "*.")
	switch {
	case h == "":
		return "is empty"
	case h == "*":
		return "matches every host: use mode: full"
	case strings.Contains(h, "://"):
		return "has a scheme: write the host name only"
	case strings.Contains(h, "/"):
		return "has a path: write the host name only"
	case strings.Contains(h, ":"):
		return "has a bad port (write host:port with 1-65535)"
	case strings.Contains(name, "*"):
		return "has a '*' other than a leading \"*.\""
	case strings.ToLower(h) != h:
		return "must be lowercase"
	case len(name) > 253:
		return "is longer than 253 characters"
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !labelRe.MatchString(l) {
			return "is not a host name (labels of letters, digits and '-', joined by '.')"
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return "is not a host name (the last label is numeric)"
	}
	if wild && len(labels) < 2 {
		return "is too wide: a wildcard needs a domain of two labels or more, like \"*.example.org\""
	}
	return ""
}

func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

func boolCount(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
