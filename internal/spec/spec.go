// Package spec parses and validates corral.yaml, the file that describes an
// agent's environment the way a Dockerfile describes an image: a base
// image, build steps (packages, run, copy) and the settings a sandbox of
// the image runs with (env, workdir, user, resources, network, secrets,
// ports). It only reads and checks the file; internal/build executes it.
// The format is documented in docs/spec.md and docs/corral.schema.json.
package spec

import (
	"slices"
	"strconv"
	"strings"
)

// Spec is a parsed corral.yaml. Parse fills defaults (network.mode "none",
// build.network "host"); zero resources mean the daemon's defaults.
type Spec struct {
	// Name is the image name the build records (corral build -t overrides it).
	Name string `yaml:"name,omitempty"`
	// From is the base image: a local image name, "debian:<suite>"
	// (bootstrapped), "docker://REF" or "HOST/PATH[:TAG]" (pulled),
	// "oci-layout:DIR[@REF]" or "archive:FILE[@REF]".
	From string `yaml:"from"`
	// Packages are Debian packages installed with apt in one step.
	Packages []string `yaml:"packages,omitempty"`
	// Run are shell commands, one build step each.
	Run []string `yaml:"run,omitempty"`
	// Copy are files copied from the spec's directory, one step each.
	Copy []Copy `yaml:"copy,omitempty"`
	// Steps interleave packages, run and copy steps; it excludes the
	// top-level Packages, Run and Copy.
	Steps []Step `yaml:"steps,omitempty"`
	// Env is the environment of build steps and of the image's sandboxes.
	Env map[string]string `yaml:"env,omitempty"`
	// Workdir is the absolute working directory (created by the build).
	Workdir string `yaml:"workdir,omitempty"`
	// User runs commands by default: a user name (created by the build if
	// missing) or a numeric uid.
	User string `yaml:"user,omitempty"`
	// Tier is the isolation tier of sandboxes from the image: container
	// or gvisor; empty means the daemon's default. A request's own tier or
	// runtime replaces it.
	Tier      string    `yaml:"tier,omitempty"`
	Resources Resources `yaml:"resources,omitempty"`
	Network   Network   `yaml:"network,omitempty"`
	// Secrets are names of environment variables whose values are given
	// when a sandbox is created; values are never part of the image.
	Secrets []string `yaml:"secrets,omitempty"`
	// Ports are TCP ports the agent serves on inside the sandbox.
	Ports []int `yaml:"ports,omitempty"`
	// Volumes are named volumes ("NAME:/PATH" or "NAME:/PATH:ro") the
	// image's sandboxes mount unless a request names its own; build steps
	// never mount them.
	Volumes []string `yaml:"volumes,omitempty"`
	// AllowPrivilegeEscalation lets set-user-ID programs (sudo, su, ping)
	// gain privileges in the image's sandboxes: their processes run
	// without the no_new_privs flag that every other sandbox has. The name
	// and meaning are Kubernetes' securityContext field's.
	AllowPrivilegeEscalation bool         `yaml:"allow_privilege_escalation,omitempty"`
	Build                    BuildOptions `yaml:"build,omitempty"`

	// Dir is the directory copy sources are relative to: Load sets it to
	// the spec file's directory (absolute).
	Dir string `yaml:"-"`

	// order is the order of the top-level packages, run and copy keys.
	order []string
}

// Copy copies Src (relative to the spec's directory) to Dst in the image.
type Copy struct {
	// Src is a file or directory relative to Spec.Dir, inside it.
	Src string `yaml:"src"`
	// Dst is absolute; a trailing "/" copies a file into that directory.
	Dst string `yaml:"dst"`
	// Mode is optional octal permission bits for the copied regular files,
	// like "0755" or "644" (no setuid, setgid or sticky bit).
	Mode string `yaml:"mode,omitempty"`
	// Owner is an optional "user", "uid", "user:group" or "uid:gid".
	Owner string `yaml:"owner,omitempty"`
}

// Resources are the default limits of the image's sandboxes; zero fields
// mean the daemon's defaults.
type Resources struct {
	CPUs float64 `yaml:"cpus,omitempty"`
	// Memory and Disk are bytes, written as "2g", "512m", "1.5GiB" or a
	// plain number of bytes.
	Memory int64 `yaml:"memory,omitempty"`
	Disk   int64 `yaml:"disk,omitempty"`
	Pids   int64 `yaml:"pids,omitempty"`
}

// Network is the egress policy of the image's sandboxes.
type Network struct {
	// Mode is "none" (the default), "allowlist" or "open".
	Mode string `yaml:"mode,omitempty"`
	// Allow lists host names ("api.example.org") and wildcards
	// ("*.example.org") reachable in allowlist mode.
	Allow []string `yaml:"allow,omitempty"`
}

// BuildOptions apply to build steps only.
type BuildOptions struct {
	// Network is "host" (the default: steps reach the network, apt needs
	// it) or "none".
	Network string `yaml:"network,omitempty"`
}

// Step kinds.
const (
	KindPackages = "packages"
	KindRun      = "run"
	KindCopy     = "copy"
)

// Step is one build step. In a steps: list it is written as a one-key map:
// "- run: CMD", "- packages: [..]" or "- copy: {src: .., dst: ..}".
type Step struct {
	// Kind is "packages", "run" or "copy": the one field that is set.
	Kind     string   `yaml:"-"`
	Packages []string `yaml:"packages,omitempty"`
	Run      string   `yaml:"run,omitempty"`
	Copy     *Copy    `yaml:"copy,omitempty"`
	// User and Workdir are the user a run step runs as (default root)
	// and its working directory (default /). corral.yaml has no syntax
	// for them: builds that come from E2B's template API (a RUN after
	// USER or WORKDIR) set them.
	User    string `yaml:"-"`
	Workdir string `yaml:"-"`
}

// BuildSteps returns the build steps in order: the steps: list, or else
// the top-level packages (one step), run (a step per command) and copy (a
// step per entry) in the order their keys appear in the file, so that an
// author can copy code last and keep earlier steps cached. Specs not made
// by Parse use the order packages, run, copy.
func (s *Spec) BuildSteps() []Step {
	if len(s.Steps) > 0 {
		out := make([]Step, len(s.Steps))
		for i, st := range s.Steps {
			if st.Kind == "" {
				st.Kind = st.inferKind()
			}
			out[i] = st
		}
		return out
	}
	order := slices.Clone(s.order)
	for _, k := range []string{KindPackages, KindRun, KindCopy} {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	var out []Step
	for _, k := range order {
		switch k {
		case KindPackages:
			if len(s.Packages) > 0 {
				out = append(out, Step{Kind: KindPackages, Packages: s.Packages})
			}
		case KindRun:
			for _, r := range s.Run {
				out = append(out, Step{Kind: KindRun, Run: r})
			}
		case KindCopy:
			for i := range s.Copy {
				out = append(out, Step{Kind: KindCopy, Copy: &s.Copy[i]})
			}
		}
	}
	return out
}

func (st Step) inferKind() string {
	switch {
	case st.Copy != nil:
		return KindCopy
	case len(st.Packages) > 0:
		return KindPackages
	default:
		return KindRun
	}
}

// Name is how builds show the step: "packages python3 git", "run pip
// install -r requirements.txt" (whitespace runs as one space), "copy app
// /app", cut to 80 characters.
func (st Step) Name() string {
	kind := st.Kind
	if kind == "" {
		kind = st.inferKind()
	}
	var n string
	switch kind {
	case KindCopy:
		n = "copy " + st.Copy.Src + " " + st.Copy.Dst
	case KindPackages:
		n = "packages " + strings.Join(st.Packages, " ")
	default:
		n = "run " + strings.Join(strings.Fields(st.Run), " ")
	}
	if len(n) > 80 {
		n = n[:77] + "..."
	}
	return n
}

// Canonical returns a stable, unambiguous text form of the step, for
// hashing into cache keys: the kind followed by its fields, each quoted
// with strconv.Quote. It covers the step as written, not its inputs (the
// content of copied files is the builder's to hash).
func (st Step) Canonical() string {
	kind := st.Kind
	if kind == "" {
		kind = st.inferKind()
	}
	var b strings.Builder
	b.WriteString(kind)
	switch kind {
	case KindPackages:
		for _, p := range st.Packages {
			b.WriteString(" " + strconv.Quote(p))
		}
	case KindRun:
		b.WriteString(" " + strconv.Quote(st.Run))
		// Only when set, so that the keys of corral.yaml's steps stay.
		if st.User != "" {
			b.WriteString(" user=" + strconv.Quote(st.User))
		}
		if st.Workdir != "" {
			b.WriteString(" workdir=" + strconv.Quote(st.Workdir))
		}
	case KindCopy:
		var c Copy
		if st.Copy != nil {
			c = *st.Copy
		}
		b.WriteString(" src=" + strconv.Quote(c.Src) + " dst=" + strconv.Quote(c.Dst) +
			" mode=" + strconv.Quote(c.Mode) + " owner=" + strconv.Quote(c.Owner))
	}
	return b.String()
}
