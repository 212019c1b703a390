package eval

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"gopkg.in/yaml.v3"

	"github.com/corral-sandbox/corral/client"
)

// StartSnapshot is the name of the snapshot of box id's start state that
// corral create --keep-start takes and corral eval capture looks for.
func StartSnapshot(id string) string { return "start-" + id }

// Files of a captured scenario's directory.
const (
	CaptureCounterexample = "counterexample.patch"
	CaptureTrajectory     = "trajectory.jsonl"
	// captureStub names the scorer stub capture writes; the user replaces
	// it.
	captureStub = "edit-me"
)

// placeholderProblem is the problem statement of a capture without one.
const placeholderProblem = "EDIT ME: the problem statement the agent was given (corral eval capture could not know it; pass --problem or --problem-file)."

// CaptureOptions select what corral eval capture takes from a box.
type CaptureOptions struct {
	// Box is the box's ID or name.
	Box string
	// Out is the scenario's directory: it must not exist or be empty
	// (default: ./NAME).
	Out string
	// Name is the scenario's name (default: the box's name, else
	// capture-ID).
	Name string
	// Problem is the problem statement (default: a placeholder).
	Problem string
	// Start is the snapshot of the box's start state (default:
	// StartSnapshot of the box's ID).
	Start string
	// Dir is the directory of the box whose changes are recorded (default:
	// the box's working directory, else /).
	Dir string
}

// Captured is what Capture wrote.
type Captured struct {
	// Dir is the scenario's directory and File its scenario file.
	Dir  string `json:"dir"`
	File string `json:"file"`
	Name string `json:"name"`
	// Start is the snapshot the scenario starts from.
	Start string `json:"start"`
	// Diff is what the box changed since its start (the counter-example).
	Diff *client.DiffStat `json:"diff,omitempty"`
	// Events is the number of events of the saved trajectory (0: the
	// daemon recorded none).
	Events int `json:"trajectory_events"`
}

// Capture turns a box whose start state was kept (a snapshot) into a
// scenario directory: a scenario starting from that snapshot with the
// box's settings, its final diff as a counter-example (the attempt
// failed), its trajectory, and a scorer stub that fails until the user
// replaces it. Nothing is left behind when it fails.
func Capture(ctx context.Context, c *client.Client, o CaptureOptions) (*Captured, error) {
	info, err := c.GetSandbox(ctx, o.Box)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	start := cmpStr(o.Start, StartSnapshot(info.ID))
	if err := findSnapshot(ctx, c, start); err != nil {
		if o.Start == "" && errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("box %s has no start snapshot (%s): create the box with corral create --keep-start, or snapshot it before the agent starts and name that snapshot with --start: %w", o.Box, start, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("--start: %w", err)
	}
	name := o.Name
	if name == "" {
		name = info.Name
	}
	if name == "" {
		name = "capture-" + info.ID[:min(12, len(info.ID))]
	}
	if !nameRe.MatchString(name) || len(name) > 64 {
		return nil, fmt.Errorf("--name %q: want letters and digits joined by single . _ or -, at most 64 characters: %w", name, errdefs.ErrInvalidArgument)
	}
	out := cmpStr(o.Out, name)
	if err := checkEmptyDir(out); err != nil {
		return nil, err
	}
	dir := cmpStr(o.Dir, cmpStr(info.Workdir, "/"))
	if !strings.HasPrefix(dir, "/") {
		return nil, fmt.Errorf("--dir %q: want an absolute path in the box: %w", dir, errdefs.ErrInvalidArgument)
	}

	// What the agent changed since the start, and what it did.
	dopts := client.DiffOptions{From: start, Dir: dir, MaxBytes: 16 << 20}
	var patch bytes.Buffer
	pr, err := c.PatchWithStat(ctx, info.ID, dopts, &patch) // one pass for both
	if err != nil {
		return nil, fmt.Errorf("capture: patch: %w", err)
	}
	st := pr.Stat
	if st == nil { // a daemon that does not send the stat with the patch
		if st, err = c.DiffStat(ctx, info.ID, dopts); err != nil {
			return nil, fmt.Errorf("capture: diff: %w", err)
		}
	}
	if st.FilesChanged == 0 {
		patch.Reset() // notes only (a fifo git cannot hold): no counter-example
	}
	var traj bytes.Buffer
	events := 0
	enc := json.NewEncoder(&traj)
	if err := c.Trajectory(ctx, info.ID, func(ev client.AuditEvent) error { events++; return enc.Encode(ev) }); err != nil && !errdefs.IsNotFound(err) {
		return nil, fmt.Errorf("capture: trajectory: %w", err)
	}

	doc := captureDoc(info, name, start, dir, cmpStr(o.Problem, placeholderProblem), patch.Len() > 0, events > 0)
	if _, err := Parse(doc, name+".yaml"); err != nil {
		return nil, fmt.Errorf("capture: the scenario written does not parse (a bug): %w", err)
	}

	// Write into a sibling directory, renamed into place at the end, so
	// that a failure leaves nothing.
	parent := filepath.Dir(filepath.Clean(out))
	tmp, err := os.MkdirTemp(parent, ".capture-")
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	defer os.RemoveAll(tmp)
	files := map[string][]byte{name + ".yaml": doc}
	if patch.Len() > 0 {
		files[CaptureCounterexample] = patch.Bytes()
	}
	if events > 0 {
		files[CaptureTrajectory] = traj.Bytes()
	}
	for f, data := range files {
		if err := os.WriteFile(filepath.Join(tmp, f), data, 0o644); err != nil {
			return nil, fmt.Errorf("capture: %w", err)
		}
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	_ = os.Remove(out) // an empty directory
	if err := os.Rename(tmp, out); err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	return &Captured{Dir: out, File: filepath.Join(out, name+".yaml"), Name: name, Start: start, Diff: st, Events: events}, nil
}

// findSnapshot checks that the snapshot name exists.
func findSnapshot(ctx context.Context, c *client.Client, name string) error {
	snaps, err := c.Snapshots(ctx)
	if err != nil {
		return err
	}
	for _, s := range snaps {
		if s.Name == name {
			return nil
		}
	}
	return fmt.Errorf("snapshot %s not found (corral snapshot ls lists them): %w", name, errdefs.ErrNotFound)
}

// checkEmptyDir refuses an output directory with something in it.
func checkEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--out %s: %w", dir, err)
	case len(entries) > 0:
		return fmt.Errorf("--out %s exists and is not empty: name a new directory: %w", dir, errdefs.ErrAlreadyExists)
	}
	return nil
}

// captured* are the parts of a scenario capture writes, in the order of
// the file, without the empty fields.
type capturedScenario struct {
	Name            string           `yaml:"name"`
	Description     string           `yaml:"description"`
	Environment     capturedEnv      `yaml:"environment"`
	Agent           *capturedAgent   `yaml:"agent,omitempty"`
	Problem         string           `yaml:"problem"`
	Scorers         []capturedScorer `yaml:"scorers"`
	Counterexamples []Counterexample `yaml:"counterexamples,omitempty"`
}

type capturedEnv struct {
	Snapshot string            `yaml:"snapshot"`
	Tier     string            `yaml:"tier,omitempty"`
	Workdir  string            `yaml:"workdir,omitempty"`
	Env      map[string]string `yaml:"env,omitempty"`
	Limits   *capturedLimits   `yaml:"limits,omitempty"`
	Network  *capturedNetwork  `yaml:"network,omitempty"`
}

type capturedLimits struct {
	CPUs   float64 `yaml:"cpus,omitempty"`
	Memory string  `yaml:"memory,omitempty"`
	Disk   string  `yaml:"disk,omitempty"`
	Pids   int64   `yaml:"pids,omitempty"`
}

type capturedNetwork struct {
	Mode  string   `yaml:"mode"`
	Allow []string `yaml:"allow,omitempty"`
}

type capturedAgent struct {
	Secrets []string `yaml:"secrets"`
}

type capturedScorer struct {
	Name    string `yaml:"name"`
	Command string `yaml:"command"`
}

// captureDoc is the scenario file of a capture.
func captureDoc(info *client.SandboxInfo, name, start, dir, problem string, patch, traj bool) []byte {
	secret := map[string]bool{}
	for _, s := range info.Secrets {
		secret[s.Name] = true
	}
	env := map[string]string{}
	for k, v := range info.Env {
		if !secret[k] { // a placeholder, not a value to keep
			env[k] = v
		}
	}
	cs := capturedScenario{
		Name:        name,
		Description: fmt.Sprintf("Captured by corral eval capture from box %s (image %s) on %s.", info.ID, info.Image, time.Now().UTC().Format(time.DateOnly)),
		Environment: capturedEnv{Snapshot: start, Tier: info.Tier, Workdir: info.Workdir, Env: env},
		Problem:     problem,
		Scorers: []capturedScorer{{
			Name:    captureStub,
			Command: "echo 'EDIT ME: replace the edit-me scorer of " + name + ".yaml with a check of a solved task' >&2; exit 1",
		}},
	}
	if len(info.Secrets) > 0 {
		cs.Agent = &capturedAgent{}
		for _, sb := range info.Secrets {
			v := sb.Name
			if len(sb.Hosts) > 0 {
				v += "=" + strings.Join(sb.Hosts, ",")
			}
			cs.Agent.Secrets = append(cs.Agent.Secrets, v)
		}
	}
	r := info.Resources
	if r.CPUs > 0 || r.MemoryBytes > 0 || r.DiskBytes > 0 || r.Pids > 0 {
		l := &capturedLimits{CPUs: r.CPUs, Pids: r.Pids}
		if r.MemoryBytes > 0 {
			l.Memory = strconv.FormatInt(r.MemoryBytes, 10)
		}
		if r.DiskBytes > 0 {
			l.Disk = strconv.FormatInt(r.DiskBytes, 10)
		}
		cs.Environment.Limits = l
	}
	if n := info.Network; n != nil && n.Mode != "" && n.Mode != "none" {
		cs.Environment.Network = &capturedNetwork{Mode: n.Mode, Allow: n.Allow}
	}
	if patch {
		ce := Counterexample{Patch: CaptureCounterexample, Note: "the captured box's changes under " + dir + ": the attempt failed"}
		if dir != info.Workdir {
			ce.Dir = dir
		}
		if traj {
			ce.Trajectory = CaptureTrajectory
		}
		cs.Counterexamples = []Counterexample{ce}
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	_ = enc.Encode(cs)
	_ = enc.Close()
	body := strings.Replace(buf.String(), "\nscorers:\n", `
# EDIT ME: corral eval capture wrote the scorer below as a stub: it fails
# every attempt. Replace it with scorers that tell a solved task from the
# counter-example (command, tests, script or files; see docs/evals.md),
# add a reference solution, then check with corral eval validate.
scorers:
`, 1)
	head := "# yaml-language-server: $schema=https://github.com/corral-sandbox/corral/blob/main/docs/eval.schema.json\n" +
		"# A scenario captured from box " + info.ID + ": it starts from the snapshot " + start + "\n" +
		"# (keep it: corral snapshot rm would break the scenario). counterexample.patch is\n" +
		"# what the box changed; trajectory.jsonl what happened in it (corral trajectory).\n"
	return []byte(head + body)
}
