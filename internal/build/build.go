// Package build turns an environment spec (corral.yaml) into an image. Each
// step runs in a build sandbox with the same isolation as any box (the
// network aside: build steps may reach the network through the host's
// namespace, for apt) and is committed as a content-addressed layer.
// Steps are cached by (parent layer, step, inputs): a re-build with no
// change makes no sandbox at all, and a changed step rebuilds it and what
// follows it only.
package build

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/image"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/spec"
)

// Sandboxes is what a build needs from the sandbox manager.
type Sandboxes interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Record, error)
	// Commit removes the sandbox, calling commit with its writable layer
	// once its root is unmounted.
	Commit(ctx context.Context, id string, commit func(ctx context.Context, layerKey string) error) error
	Delete(ctx context.Context, id string, force bool) error
}

// Builder runs builds. It is safe for concurrent use.
type Builder struct {
	images    *image.Store
	sandboxes Sandboxes
	// StepTimeout bounds one run step (default one hour).
	StepTimeout time.Duration
}

// New returns a Builder storing into images and running steps in
// sandboxes.
func New(images *image.Store, sandboxes Sandboxes) *Builder {
	return &Builder{images: images, sandboxes: sandboxes, StepTimeout: time.Hour}
}

// Event is one line of a build's live log.
type Event struct {
	// Type is "step" (a step starts or is taken from the cache), "log"
	// (output of a step), "progress" (a pull or load) or "image" (done).
	Type   string `json:"type"`
	Step   int    `json:"step,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Name   string `json:"name,omitempty"`
	Cached bool   `json:"cached,omitempty"`
	// Stream is "stdout" or "stderr" for a log event.
	Stream   string          `json:"stream,omitempty"`
	Data     string          `json:"data,omitempty"`
	Progress *image.Progress `json:"progress,omitempty"`
	Layer    string          `json:"layer,omitempty"`
}

// Options describe one build.
type Options struct {
	Spec *spec.Spec
	// Tag names the image (default: the spec's name).
	Tag string
	// SpecFile names the spec in the image's record.
	SpecFile string
	// NoCache runs every step again (the results still refresh the cache).
	NoCache bool
	// Events receives the live log; it must not block for long.
	Events func(Event)
}

// StepError is a step that failed: its command exited non-zero (or was
// killed), or it could not run.
type StepError struct {
	Step     int
	Name     string
	ExitCode int
	Reason   string // "oom", "timeout", "signal: killed", ... or ""
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("step %d (%s) failed with exit code %d", e.Step, e.Name, e.ExitCode)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	return msg
}

// Unwrap classifies a failed step as a failed precondition of the image.
func (e *StepError) Unwrap() error { return errdefs.ErrFailedPrecondition }

// Build runs the build o describes and records the image. Nothing is
// recorded under the name unless every step succeeded; layers of steps that
// did succeed stay in the cache for the next attempt.
func (b *Builder) Build(ctx context.Context, o Options) (sandbox.Image, error) {
	sp := o.Spec
	if sp == nil {
		return sandbox.Image{}, fmt.Errorf("build: no spec: %w", errdefs.ErrInvalidArgument)
	}
	name := cmp.Or(o.Tag, sp.Name)
	if name == "" {
		return sandbox.Image{}, fmt.Errorf("build: the image needs a name: set name: in the spec or pass -t NAME: %w", errdefs.ErrInvalidArgument)
	}
	if err := image.ValidateName(name); err != nil {
		return sandbox.Image{}, err
	}
	emit := o.Events
	if emit == nil {
		emit = func(Event) {}
	}
	start := time.Now()
	release := b.images.Hold()
	defer release()

	base, err := b.images.Resolve(ctx, sp.From, func(p image.Progress) {
		emit(Event{Type: "progress", Progress: &p})
	}, &eventWriter{emit: emit, stream: "stdout"})
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("from %s: %w", sp.From, err)
	}
	env := envMap(base.Env)
	maps.Copy(env, sp.Env)
	envList := envSlice(env)

	steps := plan(sp)
	st := &state{b: b, o: o, sp: sp, base: base, env: envList, emit: emit, parent: base.TopLayer}
	for i, step := range steps {
		if err := st.step(ctx, i+1, len(steps), step.name, step.Step); err != nil {
			return sandbox.Image{}, err
		}
	}
	var vols []sandbox.VolumeMount
	for i, v := range sp.Volumes {
		m, err := spec.ParseVolume(v)
		if err != nil {
			return sandbox.Image{}, fmt.Errorf("volumes[%d]: %v: %w", i, err, errdefs.ErrInvalidArgument)
		}
		vols = append(vols, sandbox.VolumeMount{Name: m.Name, Target: m.Target, Readonly: m.Readonly})
	}
	img, err := b.images.RegisterBuilt(ctx, image.Built{
		Name: name, TopLayer: st.parent, Env: envList,
		Workdir: cmp.Or(sp.Workdir, base.Workdir), User: cmp.Or(sp.User, base.User),
		SpecFile: cmp.Or(o.SpecFile, "corral.yaml"),
		Resources: sandbox.Resources{
			CPUs: sp.Resources.CPUs, MemoryBytes: sp.Resources.Memory,
			DiskBytes: sp.Resources.Disk, Pids: sp.Resources.Pids,
		},
		Runtime: &image.RuntimeSpec{
			NetworkMode: sp.Network.Mode, Allow: sp.Network.Allow,
			Secrets: sp.Secrets, Ports: sp.Ports, Tier: sp.Tier, Volumes: vols,
		},
		// Like resources and network, not inherited from the base image:
		// each spec that wants it says so.
		AllowPrivilegeEscalation: sp.AllowPrivilegeEscalation,
	})
	if err != nil {
		return sandbox.Image{}, err
	}
	log.G(ctx).Info("image built", "image", name, "steps", len(steps), "cached", st.cached, "duration", time.Since(start).Round(time.Millisecond))
	emit(Event{Type: "image", Name: name, Layer: st.parent})
	return img, nil
}

// plannedStep is a step of a build with the name it is shown under.
type plannedStep struct {
	spec.Step
	name string
}

// plan returns the steps of sp's build. The user and workdir come first,
// so that later steps (a copy with owner: USER, a run that writes to the
// workdir) can use them; that step is shown as the spec writes it ("user
// agent, workdir /workspace"), not as the script that makes them.
func plan(sp *spec.Spec) []plannedStep {
	var steps []plannedStep
	if setup := setupScript(sp); setup != "" {
		var what []string
		if u := sp.User; u != "" && strings.Trim(u, "0123456789") != "" {
			what = append(what, "user "+u)
		}
		if w := sp.Workdir; w != "" && w != "/" {
			what = append(what, "workdir "+w)
		}
		steps = append(steps, plannedStep{Step: spec.Step{Kind: spec.KindRun, Run: setup}, name: strings.Join(what, ", ")})
	}
	for _, s := range sp.BuildSteps() {
		steps = append(steps, plannedStep{Step: s, name: s.Name()})
	}
	return steps
}

// state is one build in progress.
type state struct {
	b      *Builder
	o      Options
	sp     *spec.Spec
	base   sandbox.Image
	env    []string
	emit   func(Event)
	parent string
	cached int
}

func (st *state) step(ctx context.Context, i, n int, name string, step spec.Step) error {
	inputs := ""
	if step.Kind == "copy" {
		h, err := hashCopyInput(st.sp.Dir, *step.Copy)
		if err != nil {
			return &StepError{Step: i, Name: name, ExitCode: -1, Reason: err.Error()}
		}
		inputs = h
	}
	canon := step.Canonical()
	if st.sp.AllowPrivilegeEscalation && step.Kind != spec.KindCopy {
		// Such steps run without no_new_privs (sudo works in them), so
		// their results are not those of the same step without it.
		canon += " allow_privilege_escalation"
	}
	key := cacheKey(st.parent, canon, inputs, st.env)
	if !st.o.NoCache {
		if layer, ok := st.b.images.CacheGet(key); ok {
			st.cached++
			st.emit(Event{Type: "step", Step: i, Steps: n, Name: name, Cached: true, Layer: layer})
			st.parent = layer
			return nil
		}
	}
	st.emit(Event{Type: "step", Step: i, Steps: n, Name: name})
	var layer string
	var err error
	switch step.Kind {
	case "copy":
		layer, err = st.copy(ctx, *step.Copy)
		if err != nil {
			err = &StepError{Step: i, Name: name, ExitCode: -1, Reason: err.Error()}
		}
	case "packages":
		layer, err = st.run(ctx, i, name, packagesScript(step.Packages), "", "")
	case "run":
		layer, err = st.run(ctx, i, name, step.Run, step.User, step.Workdir)
	default:
		err = fmt.Errorf("step %d: unknown kind %q: %w", i, step.Kind, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return err
	}
	if err := st.b.images.CachePut(key, layer, step.Canonical()); err != nil {
		return fmt.Errorf("step %d: record cache: %w", i, err)
	}
	st.parent = layer
	return nil
}

// cacheKey names a step's result: the layer it runs on, the step itself,
// its inputs (the digest of copied files) and the environment it runs with.
func cacheKey(parent, step, inputs string, env []string) string {
	h := sha256.New()
	// v2: steps' layers keep setuid bits (image.Store.CommitLayer), which
	// those cached by v1 lack.
	fmt.Fprintf(h, "corral-build-v2\x00%s\x00%s\x00%s\x00", parent, step, inputs)
	for _, e := range env {
		fmt.Fprintf(h, "%s\x00", e)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// packagesScript installs Debian packages with apt and leaves no lists or
// downloaded archives behind.
func packagesScript(pkgs []string) string {
	return `set -e
if ! command -v apt-get >/dev/null 2>&1; then echo "corral: packages: this image has no apt-get (use a Debian-based image)" >&2; exit 127; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends ` + strings.Join(pkgs, " ") + `
apt-get clean
rm -rf /var/lib/apt/lists/*`
}

// setupScript creates the spec's user when missing and its workdir.
func setupScript(sp *spec.Spec) string {
	var b strings.Builder
	if u := sp.User; u != "" && strings.Trim(u, "0123456789") != "" {
		b.WriteString(UserScript(u))
	}
	if w := sp.Workdir; w != "" && w != "/" {
		fmt.Fprintf(&b, "mkdir -p %s\n", shellQuote(w))
		if u := sp.User; u != "" {
			fmt.Fprintf(&b, "chown %s %s\n", shellQuote(u), shellQuote(w))
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "set -e\n" + b.String()
}

// UserScript is a shell script that makes the user u (a name) unless it
// exists: with useradd, else adduser (busybox, Alpine), else by adding it
// to /etc/passwd and /etc/group itself (an image with neither, such as
// Debian's busybox), with the first free uid from 1000 and the home
// /home/u. The tools live in sbin, which a spec's own PATH (the steps run
// with the spec's env) may leave out.
func UserScript(u string) string {
	return fmt.Sprintf(`PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
if ! id -u %[1]s >/dev/null 2>&1; then
  if command -v useradd >/dev/null 2>&1; then useradd -m -s /bin/sh %[1]s
  elif command -v adduser >/dev/null 2>&1; then adduser -D %[1]s
  else
    uid=1000
    while cut -d: -f3 /etc/passwd | grep -qx "$uid"; do uid=$((uid+1)); done
    echo %[1]s":x:$uid:$uid::/home/"%[1]s":/bin/sh" >> /etc/passwd
    grep -q "^"%[1]s":" /etc/group 2>/dev/null || echo %[1]s":x:$uid:" >> /etc/group
    mkdir -p /home/%[1]s && chown "$uid:$uid" /home/%[1]s
  fi
fi
`, shellQuote(u))
}

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

func envSlice(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// eventWriter turns output into log events.
type eventWriter struct {
	emit   func(Event)
	stream string
	step   int
}

func (w *eventWriter) Write(p []byte) (int, error) {
	w.emit(Event{Type: "log", Step: w.step, Stream: w.stream, Data: string(p)})
	return len(p), nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
