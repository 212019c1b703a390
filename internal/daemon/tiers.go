package daemon

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/runtime/oci"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// RuntimeTables are the [runtime.<tier>] tables of the configuration: one
// per isolation tier, each checked by its Validate at start.
//
// To add a tier: add its table here with a toml tag, its defaults in
// DefaultConfig, its Validate, its runtimes in Config.tiers and its
// opening in openRuntimes; docs/operations.md shows every key.
type RuntimeTables struct {
	// Container is the container tier: crun or runc on the host's kernel.
	Container ContainerTier `toml:"container"`
	// GVisor is the gvisor tier: runsc, gVisor's kernel in user space.
	GVisor GVisorTier `toml:"gvisor"`
}

// ContainerTier is [runtime.container].
type ContainerTier struct {
	// Runtimes are the OCI runtimes to offer ("crun", "runc"); each one is
	// available only if its binary is found and its version has no known
	// vulnerability (see Config.AllowUnsafeRuntimes). A request for one
	// that is not available fails: it never falls back.
	Runtimes []string `toml:"runtimes"`
	// Default is the runtime of requests that name neither a runtime nor
	// another tier; the daemon does not start without it.
	Default string `toml:"default"`
}

// Validate checks the table.
func (t ContainerTier) Validate() error {
	if len(t.Runtimes) == 0 {
		return fmt.Errorf("runtime.container.runtimes must name at least one runtime: %w", errdefs.ErrInvalidArgument)
	}
	for _, r := range t.Runtimes {
		if err := identifiers.Validate("runtime.container.runtimes", r); err != nil {
			return err
		}
		if r == RunscName {
			return fmt.Errorf("runtime.container.runtimes: %s is the gvisor tier's runtime; configure it in [runtime.gvisor]: %w", r, errdefs.ErrInvalidArgument)
		}
	}
	if !slices.Contains(t.Runtimes, t.Default) {
		return fmt.Errorf("runtime.container.default (or its deprecated alias default_runtime) %q is not in runtime.container.runtimes %v: %w", t.Default, t.Runtimes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// RunscName is the gvisor tier's runtime.
const RunscName = "runsc"

// GVisorTier is [runtime.gvisor].
type GVisorTier struct {
	// Enabled offers the tier when runsc is found and recent enough;
	// false never offers it.
	Enabled bool `toml:"enabled"`
	// Path is the runsc binary; empty means runsc in the daemon's PATH.
	Path string `toml:"path"`
	// Platform is how gVisor intercepts the box's system calls: "systrap"
	// (the default: seccomp traps, works in a VM without nested
	// virtualisation), "ptrace" or "kvm" (needs /dev/kvm).
	Platform string `toml:"platform"`
	// Flags are extra global runsc flags ("--debug", "--strace"), put
	// before Corral's own; for debugging.
	Flags []string `toml:"flags"`
}

// Validate checks the table.
func (t GVisorTier) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case t.Path != "" && !strings.HasPrefix(t.Path, "/"):
		return bad("runtime.gvisor.path %q must be an absolute path", t.Path)
	case !slices.Contains(oci.RunscPlatforms, t.Platform):
		return bad("runtime.gvisor.platform %q must be one of %s", t.Platform, strings.Join(oci.RunscPlatforms, ", "))
	}
	for _, f := range t.Flags {
		if !strings.HasPrefix(f, "-") {
			return bad("runtime.gvisor.flags: %q is not a flag (write \"--name=value\")", f)
		}
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if slices.Contains(oci.RunscOwnFlags, name) {
			return bad("runtime.gvisor.flags: --%s is set by corral (see docs/isolation.md, \"gVisor tier\")", name)
		}
	}
	return nil
}

// normalize moves the deprecated top-level runtimes and default_runtime
// into [runtime.container] and clears them; both places set differently is
// an error.
func (c Config) normalize() (Config, error) {
	d := DefaultConfig().Runtime.Container
	ct := &c.Runtime.Container
	if len(c.Runtimes) > 0 {
		if !slices.Equal(ct.Runtimes, d.Runtimes) && !slices.Equal(ct.Runtimes, c.Runtimes) {
			return c, fmt.Errorf("runtimes %v and runtime.container.runtimes %v are both set: keep runtime.container.runtimes (runtimes is its deprecated alias): %w", c.Runtimes, ct.Runtimes, errdefs.ErrInvalidArgument)
		}
		ct.Runtimes = slices.Clone(c.Runtimes)
	}
	if c.DefaultRuntime != "" {
		if ct.Default != d.Default && ct.Default != c.DefaultRuntime {
			return c, fmt.Errorf("default_runtime %q and runtime.container.default %q are both set: keep runtime.container.default (default_runtime is its deprecated alias): %w", c.DefaultRuntime, ct.Default, errdefs.ErrInvalidArgument)
		}
		ct.Default = c.DefaultRuntime
	}
	c.Runtimes, c.DefaultRuntime = nil, ""
	return c, nil
}

// defaultTier is DefaultTier with its default.
func (c Config) defaultTier() string { return cmp.Or(c.DefaultTier, sandbox.TierContainer) }

// validateDefaultTier checks default_tier: a tier this build knows, and
// one the configuration offers.
func (c Config) validateDefaultTier() error {
	switch t := c.defaultTier(); {
	case !slices.Contains(sandbox.KnownTiers, t):
		return fmt.Errorf("default_tier %q is not one of %s: %w", c.DefaultTier, strings.Join(sandbox.KnownTiers, ", "), errdefs.ErrInvalidArgument)
	case t == sandbox.TierGVisor && !c.Runtime.GVisor.Enabled:
		return fmt.Errorf("default_tier %q needs runtime.gvisor.enabled = true (or set default_tier = %q): %w", t, sandbox.TierContainer, errdefs.ErrInvalidArgument)
	}
	return nil
}

// defaultRuntime is the runtime of requests that name nothing: the
// default tier's default runtime.
func (c Config) defaultRuntime() string {
	if c.defaultTier() == sandbox.TierGVisor {
		return RunscName
	}
	n, err := c.normalize()
	if err != nil {
		return c.Runtime.Container.Default
	}
	return n.Runtime.Container.Default
}

// runscConfig is the runsc dialect of runtime name: set for runsc only.
func (c Config) runscConfig(name string) *oci.RunscConfig {
	if name != RunscName {
		return nil
	}
	g := c.Runtime.GVisor
	return &oci.RunscConfig{Platform: cmp.Or(g.Platform, oci.DefaultRunscPlatform), Flags: slices.Clone(g.Flags)}
}

// runscPackage says how to install runsc, for errors and corral info.
const runscPackage = "install the runsc package (Debian 13 trixie and later ship one with the systrap platform: apt-get install runsc; scripts/deps.sh does it), or set runtime.gvisor.path to a runsc binary"

// assessRunsc decides on runsc from its `--version` output: a release
// older than oci.MinRunscRelease has no systrap and is refused, unless
// allow_unsafe_runtimes names runsc.
func assessRunsc(cfg Config, ri rest.RuntimeInfo, out string) rest.RuntimeInfo {
	_, refused := oci.AssessRunsc(out)
	switch {
	case refused == "":
		ri.Status = rest.RuntimeOK
	case slices.Contains(cfg.AllowUnsafeRuntimes, RunscName):
		ri.Status, ri.Reason = rest.RuntimeUnsafe, refused
	default:
		ri.Status, ri.Reason = rest.RuntimeRefused, refused
	}
	return ri
}

// runscHint says what to do about a runsc that is not offered.
func runscHint(ri rest.RuntimeInfo) string {
	if ri.Status == rest.RuntimeNotFound {
		return runscPackage
	}
	return "install a newer runsc (Debian 13 trixie's or later), or set runtime.gvisor.path to one"
}

// tiers describes the isolation tiers to the Manager from what openRuntimes
// decided about each runtime (infos): a tier none of whose runtimes is
// available says what is missing.
func (c Config) tiers(infos []rest.RuntimeInfo) map[string]sandbox.TierConfig {
	byName := map[string]rest.RuntimeInfo{}
	for _, ri := range infos {
		byName[ri.Name] = ri
	}
	missing := func(names []string) string {
		var why []string
		for _, n := range names {
			ri, ok := byName[n]
			if !ok {
				continue
			}
			if ri.Available {
				return ""
			}
			why = append(why, fmt.Sprintf("%s: %s; %s", n, ri.Reason, refusedHint(ri)))
		}
		return strings.Join(why, "; ")
	}
	ct := c.Runtime.Container
	out := map[string]sandbox.TierConfig{
		sandbox.TierContainer: {Runtimes: slices.Clone(ct.Runtimes), Default: ct.Default, Missing: missing(ct.Runtimes)},
	}
	gv := sandbox.TierConfig{Runtimes: []string{RunscName}, Default: RunscName}
	if c.Runtime.GVisor.Enabled {
		gv.Missing = missing(gv.Runtimes)
	} else {
		gv.Missing = "disabled in the daemon's configuration (runtime.gvisor.enabled = false)"
	}
	out[sandbox.TierGVisor] = gv
	return out
}
