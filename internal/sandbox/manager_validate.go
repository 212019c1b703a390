package sandbox

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/agent/execcheck"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/units"
)

// Upper bounds that keep a request sane.
const (
	maxMemoryBytes = 1 << 42 // 4 TiB
	maxDiskBytes   = 1 << 44 // 16 TiB
	maxPids        = 1 << 22 // the kernel's pid_max limit
	maxEnv         = 4096
	maxEnvBytes    = 1 << 20
	// pid1Reserve is what the environment leaves free for PID 1's
	// command line (corral-init and the agent's flags) and the variables
	// the agent adds to each command (HOME, USER, LOGNAME, TERM).
	pid1Reserve = 8 << 10
	// pid1Path stands for the program PID 1 runs (oci.InitPath).
	pid1Path      = "/.corral/init"
	maxLabels     = 64
	maxLabelKey   = 128
	maxLabelValue = 4096
	maxUser       = 256
)

var (
	idRe       = regexp.MustCompile(`^[0-9a-f]{12}$`)
	labelKeyRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
	userRe     = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*(:[A-Za-z0-9_][A-Za-z0-9._-]*)?$`)
)

// plan is a validated request: the record to write (without ID, state and
// times) and the spec to hand to the runtime (without Rootfs).
type plan struct {
	rec   Record
	image Image
	spec  Spec
}

// prepare returns the layer store options of the plan's writable layer.
func (p plan) prepare(rec Record) PrepareOpts {
	o := PrepareOpts{DiskBytes: rec.Resources.DiskBytes, FromDisk: p.image.Disk}
	if o.FromDisk != "" {
		o.DiskBytes = 0 // the saved disk's size
	}
	return o
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// validate checks every field of req before anything is made, naming the
// field in the error, and resolves the defaults.
func (m *Manager) validate(ctx context.Context, req CreateRequest) (plan, error) {
	var p plan
	// Cheap checks first, the image store last.
	res, err := m.resources(req.Resources)
	if err != nil {
		return p, err
	}
	if err := validateEnv(req.Env); err != nil {
		return p, err
	}
	if w := req.Workdir; w != "" {
		if strings.ContainsRune(w, 0) || !path.IsAbs(w) || path.Clean(w) != w {
			return p, invalid("workdir %q must be an absolute, clean path", w)
		}
	}
	if u := req.User; u != "" && (len(u) > maxUser || !userRe.MatchString(u)) {
		return p, invalid("user %q must be a user name or uid, optionally :group", u)
	}
	if n := req.Name; n != "" {
		if err := identifiers.Validate("name", n); err != nil {
			return p, err
		}
		if idRe.MatchString(n) {
			return p, invalid("name %q looks like a sandbox id (12 hex digits)", n)
		}
	}
	if err := validateLabels(req.Labels); err != nil {
		return p, err
	}
	if err := validateVolumes(req.Volumes); err != nil {
		return p, err
	}
	if req.Timeout < 0 || req.Timeout > MaxTimeout {
		return p, invalid("timeout %s must be between 0 (none) and %s", req.Timeout, MaxTimeout)
	}
	if req.IdleTimeout < 0 || req.IdleTimeout > MaxTimeout {
		return p, invalid("idle_timeout %s must be between 0 (none) and %s", req.IdleTimeout, MaxTimeout)
	}
	idleAction := req.IdleAction
	switch idleAction {
	case "":
		if req.IdleTimeout > 0 {
			idleAction = IdleSuspend
		}
	case IdleSuspend, IdleRemove:
	default:
		return p, invalid("idle_action %q must be %q or %q", idleAction, IdleSuspend, IdleRemove)
	}
	switch req.TimeoutAction {
	case "", TimeoutRemove, TimeoutPause:
	default:
		return p, invalid("timeout_action %q must be %q or %q", req.TimeoutAction, TimeoutRemove, TimeoutPause)
	}
	if req.Snapshot != "" && req.Image != "" {
		return p, invalid("image %q and snapshot %q: give one of them", req.Image, req.Snapshot)
	}
	imgName := cmp.Or(req.Snapshot, req.Image, m.cfg.DefaultImage)
	var img Image
	if req.Base != nil {
		img = *req.Base
	} else if err := identifiers.ValidateImageName(imgName); err != nil {
		return p, err
	} else if img, err = m.cfg.Images.Get(ctx, imgName); err != nil {
		return p, m.errNotFoundImage(ctx, imgName, err)
	}
	tier, rtName, err := m.resolveTier(req.Tier, req.Runtime, img.Tier)
	if err != nil {
		return p, err
	}
	if _, ok := m.cfg.Runtimes[rtName]; !ok {
		if _, known := m.cfg.Unavailable[rtName]; known {
			// Configured, but its binary is missing or refused.
			_, err := m.runtime(rtName)
			return p, err
		}
		return p, invalid("runtime %q is not available (available: %s)", rtName, strings.Join(m.Runtimes(), ", "))
	}
	if len(req.Volumes) == 0 && req.Base == nil && len(img.Volumes) > 0 {
		// The image's spec's volumes; build steps (Base) mount none.
		if err := validateVolumes(img.Volumes); err != nil {
			return p, fmt.Errorf("image %s: %w", imgName, err)
		}
		req.Volumes = img.Volumes
	}
	if len(req.Volumes) > 0 {
		if m.cfg.Volumes == nil {
			return p, fmt.Errorf("volumes: this daemon has no volume store: %w", errdefs.ErrNotImplemented)
		}
		for i, v := range req.Volumes {
			if _, err := m.cfg.Volumes.Path(v.Name); err != nil {
				return p, fmt.Errorf("volumes[%d].name: %w", i, err)
			}
		}
	}
	if req.Snapshot != "" && img.Disk == "" {
		return p, invalid("%s is an image, not a snapshot: use --image %s (\"image\" in the API)", imgName, imgName)
	}
	// The image's own defaults (from its spec) fill what req leaves zero.
	res, err = m.resources(mergeResources(req.Resources, img.Resources))
	if err != nil {
		return p, err
	}
	if img.Disk != "" {
		if d := req.Resources.DiskBytes; d != 0 && d != img.DiskBytes {
			return p, invalid("resources.disk_bytes %s: sandboxes from snapshot %q keep its disk size, %s", sizeOf(d), imgName, units.FormatBytes(img.DiskBytes))
		}
		res.DiskBytes = img.DiskBytes
	}
	if n := req.Name; n != "" {
		m.mu.Lock()
		taken := m.byNameLocked(n) != nil
		m.mu.Unlock()
		if taken {
			return p, fmt.Errorf("name %q is already used: %w", n, errdefs.ErrAlreadyExists)
		}
	}

	p.image = img
	p.rec = Record{
		Name:      req.Name,
		Image:     imgName,
		Runtime:   rtName,
		Tier:      tier,
		Resources: res,
		Env:       cloneMap(req.Env),
		Workdir:   req.Workdir,
		User:      req.User,
		Labels:    cloneMap(req.Labels),
		Ephemeral: req.Ephemeral,
		Volumes:   slices.Clone(req.Volumes),

		Timeout:     req.Timeout,
		IdleTimeout: req.IdleTimeout,
		IdleAction:  idleAction,
		Layer:       img.TopLayer,

		TimeoutAction: req.TimeoutAction,
		E2B:           req.E2B.Clone(),
	}
	if img.Disk != "" {
		p.rec.Origin = imgName
	}
	fromImage := false
	if req.Network == nil && req.Base == nil {
		req.Network, fromImage = img.Network, true
	}
	if req.Network != nil {
		set := req.Network.Clone()
		if set.Mode == "" && len(set.Allow) == 0 && req.Base == nil && img.Network != nil {
			// Only secrets (or limits) asked for: the image's policy stays.
			set.Mode, set.Allow, fromImage = img.Network.Mode, slices.Clone(img.Network.Allow), true
		}
		if mode, _ := netpolicy.ParseMode(string(set.Mode)); fromImage && mode != netpolicy.ModeAllowlist {
			// Images saved before allow entries needed mode allowlist
			// may hold some that were never used.
			set.Allow = nil
		}
		p.rec.Network = set
		if p.rec.Env == nil {
			p.rec.Env = map[string]string{}
		}
		if err := m.validateNetwork(p.rec.Network, p.rec.Env); err != nil {
			return p, err
		}
		req.Env = p.rec.Env
	}
	env := map[string]string{}
	for _, kv := range img.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	for k, v := range req.Env {
		env[k] = v
	}
	keys := slices.Sorted(maps.Keys(env))
	spec := Spec{
		Binds: slices.Clone(img.Binds),
		// An empty Workdir lets each command start in its user's home.
		Workdir:       cmp.Or(req.Workdir, img.Workdir),
		User:          cmp.Or(req.User, img.User, "root"),
		Resources:     res,
		AgentBinary:   m.cfg.AgentBinary,
		InitBinary:    m.cfg.InitBinary,
		AgentIdleExit: m.cfg.AgentIdleExit,
		OutputBuffer:  m.cfg.OutputBuffer,
		HostNetwork:   req.HostNetwork,

		AllowPrivilegeEscalation: img.AllowPrivilegeEscalation,
	}
	for _, k := range keys {
		spec.Env = append(spec.Env, k+"="+env[k])
	}
	// With the image's variables: PID 1 and every command get them all,
	// and a box whose PID 1 the kernel refuses to start is no box.
	if err := execcheck.Check(pid1Path, nil, spec.Env, execcheck.Limit(), pid1Reserve); err != nil {
		return p, invalid("env: %v", err)
	}
	if !req.HostNetwork && m.cfg.ResolvConf != "" {
		spec.Binds = append(spec.Binds, Bind{Source: m.cfg.ResolvConf, Target: "/etc/resolv.conf", Readonly: true})
	}
	if req.HostNetwork {
		// Name resolution as the host does it, read-only.
		if fi, err := os.Stat("/etc/resolv.conf"); err == nil && fi.Mode().IsRegular() {
			spec.Binds = append(spec.Binds, Bind{Source: "/etc/resolv.conf", Target: "/etc/resolv.conf", Readonly: true})
		}
	}
	p.spec = spec
	return p, nil
}

// mergeResources fills the zero fields of r from d.
func mergeResources(r, d Resources) Resources {
	r.CPUs = cmp.Or(r.CPUs, d.CPUs)
	r.MemoryBytes = cmp.Or(r.MemoryBytes, d.MemoryBytes)
	r.DiskBytes = cmp.Or(r.DiskBytes, d.DiskBytes)
	r.Pids = cmp.Or(r.Pids, d.Pids)
	return r
}

func (m *Manager) resources(r Resources) (Resources, error) {
	d := m.cfg.DefaultResources
	switch {
	case math.IsNaN(r.CPUs) || r.CPUs < 0 || r.CPUs > m.cfg.MaxCPUs:
		return r, invalid("resources.cpus %v must be more than 0 and at most %v", r.CPUs, m.cfg.MaxCPUs)
	case r.MemoryBytes < 0 || (r.MemoryBytes > 0 && r.MemoryBytes < MinMemoryBytes) || r.MemoryBytes > maxMemoryBytes:
		return r, invalid("resources.memory_bytes %s must be between %s and %s", sizeOf(r.MemoryBytes), units.FormatBytes(MinMemoryBytes), units.FormatBytes(maxMemoryBytes))
	case r.DiskBytes < 0 || (r.DiskBytes > 0 && r.DiskBytes < MinDiskBytes) || r.DiskBytes > maxDiskBytes:
		return r, invalid("resources.disk_bytes %s must be between %s and %s", sizeOf(r.DiskBytes), units.FormatBytes(MinDiskBytes), units.FormatBytes(maxDiskBytes))
	case r.Pids < 0 || (r.Pids > 0 && r.Pids < MinPids) || r.Pids > maxPids:
		return r, invalid("resources.pids %d must be between %d and %d", r.Pids, MinPids, maxPids)
	}
	r.CPUs = cmp.Or(r.CPUs, d.CPUs)
	r.MemoryBytes = cmp.Or(r.MemoryBytes, d.MemoryBytes)
	r.DiskBytes = cmp.Or(r.DiskBytes, d.DiskBytes)
	r.Pids = cmp.Or(r.Pids, d.Pids)
	return r, nil
}

func validateEnv(env map[string]string) error {
	if len(env) > maxEnv {
		return invalid("env has %d variables, more than %d", len(env), maxEnv)
	}
	size := 0
	for k, v := range env {
		if err := execcheck.ValidName(k); err != nil {
			return invalid("env: %v", err)
		}
		if strings.ContainsRune(v, 0) {
			// Never echo values: they may be secrets.
			return invalid("env: value of %q must not contain NUL", k)
		}
		if n := len(k) + len(v) + 2; n > execcheck.MaxArgStrlen {
			return invalid("env: %v", &execcheck.Error{What: "variable " + k, Size: n, Limit: execcheck.MaxArgStrlen})
		}
		size += len(k) + len(v) + 1
	}
	if size > maxEnvBytes {
		return invalid("env is %s, more than %s", units.FormatBytes(int64(size)), units.FormatBytes(maxEnvBytes))
	}
	return nil
}

func validateLabels(labels map[string]string) error {
	if len(labels) > maxLabels {
		return invalid("labels has %d entries, more than %d", len(labels), maxLabels)
	}
	for k, v := range labels {
		switch {
		case len(k) > maxLabelKey || !labelKeyRe.MatchString(k):
			return invalid("label key %q must be at most %d letters, digits or '._/-', starting with a letter or digit", k, maxLabelKey)
		case len(v) > maxLabelValue || strings.ContainsRune(v, 0):
			return invalid("label value of %q must be at most %d bytes without NUL", k, maxLabelValue)
		}
	}
	return nil
}

// sizeOf formats a size from a request: the bytes as given, and in a
// binary unit when that reads differently ("1024 (1 KiB)").
func sizeOf(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 1024 {
		return s
	}
	return s + " (" + units.FormatBytes(n) + ")"
}

func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// joinOr joins s with ", ", or says "none".
func joinOr(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
