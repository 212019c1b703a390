package eval

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/log"
)

// LabelRun is the label every box and snapshot of a run carries.
const LabelRun = "corral.eval.run"

// cleanupTimeout bounds the removal of a run's boxes after it ended.
const cleanupTimeout = time.Minute

// Options configure a Runner.
type Options struct {
	// Agent is the agent's command line, run with sh -c on the host.
	Agent string
	// Attempts per scenario (default 1) and Concurrency, the attempts
	// run at once (default 1).
	Attempts, Concurrency int
	// Host is the daemon's address, given to the agent as CORRAL_HOST.
	Host string
	// Dir is the run's directory (results.json, patches, agent logs).
	Dir string
	// Suite names the suite in the results.
	Suite string
	// Progress, when set, gets a line per finished attempt.
	Progress io.Writer
	// NoPool never keeps a warm pool of a scenario's prepared state: every
	// attempt's box is made when the attempt starts.
	NoPool bool
}

// Runner runs scenarios against a daemon.
type Runner struct {
	c    *client.Client
	opts Options
	id   string

	// afterAgent, when set, is called after each agent ends (tests).
	afterAgent func()

	mu        sync.Mutex
	boxes     map[string]bool // made and not yet removed
	snapshots map[string]bool
	pools     map[string]bool // keys of the warm pools made
}

// NewRunID returns a new run ID: the time and a random suffix.
func NewRunID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// NewRunner returns a runner of the run id.
func NewRunner(c *client.Client, id string, opts Options) *Runner {
	opts.Attempts = max(opts.Attempts, 1)
	opts.Concurrency = max(opts.Concurrency, 1)
	return &Runner{c: c, opts: opts, id: id, boxes: map[string]bool{}, snapshots: map[string]bool{}, pools: map[string]bool{}}
}

// CheckAgent checks that the agent command line's program exists, so that
// a typo fails the run before any box is made.
func CheckAgent(agent string) error {
	f := strings.Fields(agent)
	if len(f) == 0 {
		return fmt.Errorf("--agent: the agent's command is required: %w", errdefs.ErrInvalidArgument)
	}
	prog := f[0]
	if strings.ContainsAny(prog, "=$`\"'();|&<>") {
		return nil // a shell construct: the shell is the judge
	}
	if _, err := exec.LookPath(prog); err != nil {
		return fmt.Errorf("--agent: command %q not found (give a path or a program in PATH): %w", prog, errdefs.ErrNotFound)
	}
	return nil
}

// CheckAgentFor checks the agent command line for the scenarios: it must
// not be empty, and its program must exist on this host when a scenario
// runs it here (host wiring); inside a box, its shell is the judge.
func CheckAgentFor(agent string, scenarios []*Scenario) error {
	for _, s := range scenarios {
		if !s.InBox() {
			return CheckAgent(agent)
		}
	}
	if strings.TrimSpace(agent) == "" {
		return fmt.Errorf("--agent: the agent's command is required: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// Run runs every scenario's attempts and returns the results; the
// results so far are saved in the run's directory after every attempt.
// Every box and snapshot the run made is removed before Run returns, also
// when ctx is cancelled (then Interrupted is set).
func (r *Runner) Run(ctx context.Context, scenarios []*Scenario) (*Run, error) {
	if err := CheckAgentFor(r.opts.Agent, scenarios); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("run directory: %w", err)
	}
	defer r.cleanup(ctx)
	run := &Run{ID: r.id, Suite: r.opts.Suite, Agent: r.opts.Agent, Attempts: r.opts.Attempts, Started: time.Now().UTC()}
	run.Scenarios = make([]ScenarioResult, len(scenarios))
	var saveMu sync.Mutex
	save := func() {
		saveMu.Lock()
		defer saveMu.Unlock()
		if err := run.Save(r.opts.Dir); err != nil {
			log.G(ctx).Warn("save results", "run", r.id, "error", err)
		}
	}
	sem := make(chan struct{}, r.opts.Concurrency)
	var wg sync.WaitGroup
	for i, s := range scenarios {
		res := &run.Scenarios[i]
		res.Name, res.File = s.Name, s.File
		res.Attempts = make([]Attempt, r.opts.Attempts)
		for n := range res.Attempts {
			res.Attempts[n] = Attempt{N: n + 1, Error: "not run"}
		}
	}
	for i, s := range scenarios {
		res := &run.Scenarios[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			snap, err := r.Prepare(ctx, s)
			<-sem
			if err != nil {
				saveMu.Lock()
				res.Error = err.Error()
				res.Attempts = nil
				saveMu.Unlock()
				save()
				return
			}
			defer r.removeSnapshot(snap)
			pool := r.newPool(s, snap)
			defer pool.remove() // before the snapshot it holds boxes of
			var awg sync.WaitGroup
			for n := range r.opts.Attempts {
				awg.Add(1)
				go func() {
					defer awg.Done()
					sem <- struct{}{}
					defer func() { <-sem }()
					a := r.attempt(ctx, s, snap, n+1, pool.started)
					saveMu.Lock()
					res.Attempts[n] = a
					if r.opts.Progress != nil && ctx.Err() == nil {
						fmt.Fprintf(r.opts.Progress, "%s #%d: score %.2f (%s)\n", s.Name, a.N, a.Score, cmpStr(attemptNote(a), "ok"))
					}
					saveMu.Unlock()
					save()
				}()
			}
			awg.Wait()
		}()
	}
	wg.Wait()
	run.Finished = time.Now().UTC()
	run.Interrupted = ctx.Err() != nil
	save()
	return run, nil
}

func cmpStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Prepare makes the scenario's prepared state: a box from its
// environment, its setup run, snapshotted. It returns the snapshot's name;
// the box is removed.
func (r *Runner) Prepare(ctx context.Context, s *Scenario) (string, error) {
	opts, err := r.createOptions(ctx, s)
	if err != nil {
		return "", err
	}
	box, err := r.create(ctx, opts)
	if err != nil {
		return "", fmt.Errorf("prepare: %w", err)
	}
	defer r.remove(box)
	sb := r.c.Sandbox(box)
	steps := []struct {
		field string
		cmds  []string
	}{{"setup", s.Setup}, {"agent.install", s.Agent.Install}}
	for _, st := range steps {
		for i, cmd := range st.cmds {
			var out tailBuffer
			res, err := sb.Exec(ctx, client.ExecOptions{Cmd: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &out})
			if err != nil {
				return "", fmt.Errorf("%s[%d]: %w", st.field, i, err)
			}
			if res.ExitCode != 0 {
				return "", fmt.Errorf("%s[%d] %q exited %d: %s", st.field, i, cmd, res.ExitCode, strings.TrimSpace(out.String()))
			}
		}
	}
	name := snapshotName(r.id, s.Name)
	r.mu.Lock()
	r.snapshots[name] = true
	r.mu.Unlock()
	if _, err := r.c.Snapshot(ctx, box, name); err != nil {
		r.removeSnapshot(name)
		return "", fmt.Errorf("prepare: snapshot: %w", err)
	}
	return name, nil
}

var nonAlnum = regexp.MustCompile(`[^a-z0-9]+`)

// snapshotName is the name of a scenario's prepared snapshot in a run: a
// valid image name (lowercase) that stays unique for scenario names that
// differ only in case or punctuation.
func snapshotName(runID, scenario string) string {
	slug := strings.Trim(nonAlnum.ReplaceAllString(strings.ToLower(scenario), "-"), "-")
	if len(slug) > 32 {
		slug = strings.Trim(slug[:32], "-")
	}
	sum := sha256.Sum256([]byte(scenario))
	return "eval-" + strings.ToLower(runID) + "-" + slug + "-" + hex.EncodeToString(sum[:3])
}

// createOptions are the options of the scenario's first box: its image
// (a spec is built first), limits, tier and agent-phase network.
func (r *Runner) createOptions(ctx context.Context, s *Scenario) (client.CreateOptions, error) {
	e := s.Environment
	o := client.CreateOptions{
		Image: e.Image, Snapshot: e.Snapshot, Tier: e.Tier, Workdir: e.Workdir, Env: e.Env,
		Labels:  map[string]string{LabelRun: r.id, "corral.eval.scenario": s.Name},
		Network: toNetwork(e.Network),
		NoPool:  true,
	}
	o.Resources.CPUs, o.Resources.Pids = e.Limits.CPUs, e.Limits.Pids
	o.Resources.MemoryBytes, _ = client.ParseBytes(cmpStr(e.Limits.Memory, "0"))
	o.Resources.DiskBytes, _ = client.ParseBytes(cmpStr(e.Limits.Disk, "0"))
	if e.Spec != "" {
		img, err := buildSpec(ctx, r.c, s.HostPath(e.Spec))
		if err != nil {
			return o, fmt.Errorf("environment.spec: %w", err)
		}
		o.Image = img
	}
	return o, nil
}

// buildSpec builds the corral.yaml at file and returns its image's name.
func buildSpec(ctx context.Context, c *client.Client, file string) (string, error) {
	sp, err := loadSpecSources(file)
	if err != nil {
		return "", err
	}
	bc, err := client.BuildContext(file, sp)
	if err != nil {
		return "", err
	}
	defer bc.Close()
	img, err := c.Build(ctx, bc, rest.BuildOptions{File: filepath.Base(file), Tag: specTag(file)}, func(rest.Event) {})
	if err != nil {
		return "", err
	}
	return img.Name, nil
}

func toNetwork(n *Network) *client.Network {
	if n == nil {
		return &client.Network{Mode: "none"}
	}
	return &client.Network{Mode: cmpStr(n.Mode, "none"), Allow: n.Allow}
}

// create makes a box and remembers it for the cleanup.
func (r *Runner) create(ctx context.Context, o client.CreateOptions) (string, error) {
	info, err := r.c.CreateSandbox(ctx, o)
	if err != nil {
		return "", err
	}
	r.mu.Lock()
	r.boxes[info.ID] = true
	r.mu.Unlock()
	return info.ID, nil
}

// remove removes a box of the run, also after ctx ended.
func (r *Runner) remove(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := r.c.RemoveSandbox(ctx, id, client.RemoveOptions{Force: true})
	if err == nil || errdefs.IsNotFound(err) {
		r.mu.Lock()
		delete(r.boxes, id)
		r.mu.Unlock()
	}
}

func (r *Runner) removeSnapshot(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := r.c.RemoveSnapshot(ctx, name)
	if err == nil || errdefs.IsNotFound(err) {
		r.mu.Lock()
		delete(r.snapshots, name)
		r.mu.Unlock()
	}
}

// warmPool is the warm pool of one scenario's prepared state during a
// run. It is made when the scenario's first attempt got its box (so that
// only scenarios whose attempts run have one, not every prepared one),
// and its size is what the attempts still to start after the first wave
// (Concurrency of them, which start at once) can use, at most
// Concurrency: it shrinks as attempts start and is gone when none is left
// to start, so the pool makes few boxes no one takes.
type warmPool struct {
	r    *Runner
	spec client.PoolSpec
	key  string // set while the pool exists

	mu     sync.Mutex
	starts int
}

// poolSize is the pool's size after starts attempts got their box.
func (r *Runner) poolSize(starts int) int {
	if r.opts.NoPool {
		return 0
	}
	left := r.opts.Attempts - max(starts, r.opts.Concurrency)
	return max(0, min(left, r.opts.Concurrency, 64))
}

// newPool returns the warm pool of the prepared snapshot snap, with the
// attempts' tier and limits, which hands an attempt its box ready
// instead of made while the attempt waits. When the daemon refuses it,
// the attempts are made as usual.
func (r *Runner) newPool(s *Scenario, snap string) *warmPool {
	o, _ := r.createOptionsFromSnapshot(s, snap, 0)
	return &warmPool{r: r, spec: client.PoolSpec{Image: snap, Tier: o.Tier, Resources: o.Resources}}
}

// started counts an attempt whose box was made (or handed out) and sets
// the pool to what the attempts still to start can use: made at the
// first, then shrunk, then removed.
func (wp *warmPool) started(ctx context.Context) {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	wp.starts++
	size := wp.r.poolSize(wp.starts)
	switch {
	case size == wp.spec.Size:
		return
	case size == 0:
		wp.removeLocked()
		return
	case wp.key == "" && wp.starts > 1:
		return // refused before, or removed
	}
	wp.spec.Size = size
	p, err := wp.r.c.SetPool(ctx, wp.spec)
	if err != nil {
		log.G(ctx).Debug("eval warm pool", "snapshot", wp.spec.Image, "error", err)
		return
	}
	if wp.key == "" {
		wp.key = p.Key
		wp.r.mu.Lock()
		wp.r.pools[p.Key] = true
		wp.r.mu.Unlock()
	}
}

// remove removes the pool and its ready boxes.
func (wp *warmPool) remove() {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	wp.removeLocked()
}

func (wp *warmPool) removeLocked() {
	wp.spec.Size = 0
	if wp.key != "" {
		wp.r.removePool(wp.key)
		wp.key = ""
	}
}

func (r *Runner) removePool(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := r.c.RemovePool(ctx, key)
	if err == nil || errdefs.IsNotFound(err) {
		r.mu.Lock()
		delete(r.pools, key)
		r.mu.Unlock()
	}
}

// cleanup removes whatever boxes and snapshots are left, also those of a
// create that ended with the context (found by the run's label).
func (r *Runner) cleanup(ctx context.Context) {
	r.mu.Lock()
	var boxes, snaps, pools []string
	for id := range r.boxes {
		boxes = append(boxes, id)
	}
	for s := range r.snapshots {
		snaps = append(snaps, s)
	}
	for k := range r.pools {
		pools = append(pools, k)
	}
	r.mu.Unlock()
	for _, k := range pools {
		r.removePool(k)
	}
	for _, id := range boxes {
		r.remove(id)
	}
	lctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if l, err := r.c.ListSandboxes(lctx); err == nil {
		for _, sb := range l {
			if sb.Labels[LabelRun] == r.id {
				r.remove(sb.ID)
			}
		}
	}
	for _, s := range snaps {
		r.removeSnapshot(s)
	}
	r.mu.Lock()
	left := len(r.boxes) + len(r.snapshots) + len(r.pools)
	r.mu.Unlock()
	if left > 0 {
		log.G(ctx).Warn("eval run left boxes or snapshots behind", "run", r.id, "count", left)
	}
}

// Attempt runs one attempt at s from the snapshot snap: a box from it,
// the agent, the diff, the scoring network and the scorers. The box is
// removed before it returns.
func (r *Runner) Attempt(ctx context.Context, s *Scenario, snap string, n int) Attempt {
	return r.attempt(ctx, s, snap, n, func(context.Context) {})
}

// attempt is Attempt, calling created once the box was made (or its
// create failed).
func (r *Runner) attempt(ctx context.Context, s *Scenario, snap string, n int, created func(context.Context)) (a Attempt) {
	a.N = n
	start := time.Now()
	defer func() {
		a.Duration = time.Since(start)
		a.Overhead = a.Duration - a.Agent.Duration
		for _, sr := range a.Scorers {
			a.Overhead -= sr.Duration
		}
		a.Overhead = max(a.Overhead, 0)
	}()
	if ctx.Err() != nil {
		created(ctx)
		a.Error = "interrupted"
		return a
	}
	o, _ := r.createOptionsFromSnapshot(s, snap, n)
	box, err := r.create(ctx, o)
	created(ctx)
	if err != nil {
		a.Error = fmt.Sprintf("create box: %v", err)
		if ctx.Err() != nil {
			a.Error = "interrupted" // the create ended with the run
		}
		return a
	}
	defer r.remove(box)
	a.Sandbox = box
	a.Agent = r.runAgent(ctx, s, box, n)
	if r.afterAgent != nil {
		r.afterAgent()
	}
	if ctx.Err() != nil {
		a.Error = "interrupted"
		return a
	}
	if info, err := r.c.GetSandbox(ctx, box); err == nil {
		if info.State != "running" {
			a.Agent.Reason = "box_" + info.State
		}
		if u := info.Usage; u != nil {
			a.Resources = &Resources{CPU: time.Duration(u.CPUNanos), MemoryPeakBytes: u.MemoryPeakBytes, DiskBytes: u.DiskBytes, OOMKills: u.OOMKills}
		}
	}
	a.Diff, a.Patch = r.diff(ctx, s, box, n)
	var denied int
	var trail bool
	a.Trajectory, a.Events, a.Pooled, denied, trail = r.trajectory(ctx, s, box, n)
	if !trail {
		denied = r.egressDenied(ctx, s, box)
	}
	if a.Resources != nil {
		a.Resources.EgressDenied = denied
	} else if denied > 0 {
		a.Resources = &Resources{EgressDenied: denied}
	}
	sb := r.c.Sandbox(box)
	if _, err := r.c.SetNetwork(ctx, box, *toNetwork(s.Environment.ScoringNetwork)); err != nil {
		a.Error = fmt.Sprintf("scoring network: %v", err)
		return a
	}
	for i := range s.Scorers {
		a.Scorers = append(a.Scorers, Score(ctx, sb, s, i))
	}
	if ctx.Err() != nil {
		a.Error = "interrupted"
		return a
	}
	a.Score = Total(a.Scorers)
	return a
}

func (r *Runner) createOptionsFromSnapshot(s *Scenario, snap string, n int) (client.CreateOptions, error) {
	e := s.Environment
	o := client.CreateOptions{
		Snapshot: snap, Tier: e.Tier, Workdir: e.Workdir, Env: e.Env,
		Labels:  map[string]string{LabelRun: r.id, "corral.eval.scenario": s.Name, "corral.eval.attempt": strconv.Itoa(n)},
		Network: toNetwork(e.Network),
		Secrets: s.Agent.secretBindings(),
	}
	o.Resources.CPUs, o.Resources.Pids = e.Limits.CPUs, e.Limits.Pids
	o.Resources.MemoryBytes, _ = client.ParseBytes(cmpStr(e.Limits.Memory, "0"))
	o.Resources.DiskBytes, _ = client.ParseBytes(cmpStr(e.Limits.Disk, "0"))
	return o, nil
}

// agentEnv is the environment the agent gets besides its host's or box's.
func (r *Runner) agentEnv(s *Scenario, box string, n int) map[string]string {
	env := map[string]string{
		"CORRAL_SANDBOX_ID":    box,
		"CORRAL_EVAL_RUN":      r.id,
		"CORRAL_EVAL_SCENARIO": s.Name,
		"CORRAL_EVAL_ATTEMPT":  strconv.Itoa(n),
		"CORRAL_EVAL_WORKDIR":  s.Environment.Workdir,
		"CORRAL_EVAL_PROBLEM":  s.Problem,
	}
	if !s.InBox() {
		env["CORRAL_HOST"] = r.opts.Host
	}
	return env
}

// problemInput is the agent's stdin: the problem, ending in a newline for
// an agent that reads a line.
func problemInput(s *Scenario) string {
	if !strings.HasSuffix(s.Problem, "\n") {
		return s.Problem + "\n"
	}
	return s.Problem
}

// runAgentInBox runs the agent command inside the box (agent-in-the-box
// wiring): sh -c in the workdir, the problem on its stdin, killed at the
// scenario's agent timeout. Its secrets are the box's placeholders.
func (r *Runner) runAgentInBox(ctx context.Context, s *Scenario, box string, n int) (res AgentResult) {
	res.ExitCode = -1
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()
	logf, err := os.Create(filepath.Join(r.opts.Dir, fmt.Sprintf("%s.%d.agent.log", s.Name, n)))
	if err != nil {
		res.Reason, res.Output = "error", err.Error()
		return res
	}
	defer logf.Close()
	var out tailBuffer
	w := io.MultiWriter(&out, logf)
	er, err := r.c.Sandbox(box).Exec(ctx, client.ExecOptions{
		Cmd: []string{"sh", "-c", r.opts.Agent}, Env: r.agentEnv(s, box, n), Cwd: s.Environment.Workdir,
		Stdin: strings.NewReader(problemInput(s)), Stdout: w, Stderr: w, Timeout: s.AgentTimeout(),
	})
	res.Output = out.String()
	switch {
	case ctx.Err() != nil:
		res.Reason = "interrupted"
	case err != nil:
		res.Reason, res.Output = "error", err.Error()
	case er.TimedOut:
		res.Reason = "timeout"
	case er.OOMKilled:
		res.ExitCode, res.Reason = er.ExitCode, "oom"
	default:
		res.ExitCode, res.Reason = er.ExitCode, "exit"
		if res.ExitCode == 127 {
			res.Reason = "not_found"
		}
	}
	return res
}

// runAgent runs the agent command on the host with the box's ID, the
// daemon's address and the problem in its environment and the problem on
// its stdin, killing its process group at the scenario's agent timeout.
func (r *Runner) runAgent(ctx context.Context, s *Scenario, box string, n int) (res AgentResult) {
	if s.InBox() {
		return r.runAgentInBox(ctx, s, box, n)
	}
	res.ExitCode = -1
	start := time.Now()
	defer func() { res.Duration = time.Since(start) }()
	actx, cancel := context.WithTimeout(ctx, s.AgentTimeout())
	defer cancel()
	cmd := exec.CommandContext(actx, "sh", "-c", r.opts.Agent)
	cmd.Env = os.Environ()
	for k, v := range r.agentEnv(s, box, n) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(problemInput(s))
	var out tailBuffer
	logf, err := os.Create(filepath.Join(r.opts.Dir, fmt.Sprintf("%s.%d.agent.log", s.Name, n)))
	if err != nil {
		res.Reason, res.Output = "error", err.Error()
		return res
	}
	defer logf.Close()
	w := io.MultiWriter(&out, logf)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	res.Output = out.String()
	var ee *exec.ExitError
	switch {
	case actx.Err() != nil && ctx.Err() != nil:
		res.Reason = "interrupted"
	case actx.Err() != nil:
		res.Reason = "timeout"
	case errors.As(err, &ee):
		res.ExitCode, res.Reason = ee.ExitCode(), "exit"
		if res.ExitCode == 127 {
			res.Reason = "not_found"
		}
	case err != nil:
		res.Reason, res.Output = "error", err.Error()
	default:
		res.ExitCode, res.Reason = 0, "exit"
	}
	return res
}

// diff records what the agent changed under the workdir: a stat in the
// results and the patch in a file of the run's directory, both from one
// request (one pass over the box's files); a daemon that does not send
// the patch's stat is asked for it apart.
func (r *Runner) diff(ctx context.Context, s *Scenario, box string, n int) (*client.DiffStat, string) {
	o := client.DiffOptions{Dir: s.Environment.Workdir, MaxBytes: 16 << 20}
	var buf bytes.Buffer
	res, err := r.c.PatchWithStat(ctx, box, o, &buf)
	if err != nil {
		log.G(ctx).Debug("eval diff", "sandbox", box, "error", err)
		return nil, ""
	}
	st := res.Stat
	if st == nil {
		if st, err = r.c.DiffStat(ctx, box, o); err != nil {
			log.G(ctx).Debug("eval diff", "sandbox", box, "error", err)
			return nil, ""
		}
	}
	if st.FilesChanged == 0 {
		return st, ""
	}
	name := fmt.Sprintf("%s.%d.patch", s.Name, n)
	if err := os.WriteFile(filepath.Join(r.opts.Dir, name), buf.Bytes(), 0o644); err != nil {
		return st, ""
	}
	return st, name
}

// trajectory saves the box's audit trail so far (the agent phase: the
// scorers have not run yet) as JSON lines in a file of the run's
// directory, and returns the file's name, its number of events, whether
// the box was handed out of a warm pool and how many of its connections
// and DNS queries the network policy denied. A daemon that records no
// trail (audit off) leaves all of them empty and ok false.
func (r *Runner) trajectory(ctx context.Context, s *Scenario, box string, n int) (name string, events int, pooled bool, denied int, ok bool) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	err := r.c.Trajectory(ctx, box, func(ev client.AuditEvent) error {
		events++
		if ev.Lifecycle != nil && ev.Lifecycle.Change == "handed_out" {
			pooled = true
		}
		if ev.Network != nil && ev.Network.Verdict == "deny" {
			denied++
		}
		return enc.Encode(ev)
	})
	if err != nil {
		log.G(ctx).Debug("eval trajectory", "sandbox", box, "error", err)
		return "", 0, false, 0, false
	}
	if events == 0 {
		return "", 0, false, 0, true
	}
	name = fmt.Sprintf("%s.%d.trajectory.jsonl", s.Name, n)
	if err := os.WriteFile(filepath.Join(r.opts.Dir, name), buf.Bytes(), 0o644); err != nil {
		log.G(ctx).Warn("eval trajectory", "sandbox", box, "error", err)
		return "", 0, pooled, denied, true
	}
	return name, events, pooled, denied, true
}

// egressDenied counts the egress denials in the box's egress log, for a
// daemon that keeps no audit trail; a box without network has none.
func (r *Runner) egressDenied(ctx context.Context, s *Scenario, box string) (denied int) {
	if n := s.Environment.Network; n == nil || cmpStr(n.Mode, "none") == "none" {
		return 0
	}
	err := r.c.NetworkLog(ctx, box, client.NetworkLogOptions{}, func(ev client.NetworkEvent) error {
		if ev.Verdict == "deny" {
			denied++
		}
		return nil
	})
	if err != nil {
		log.G(ctx).Debug("eval egress log", "sandbox", box, "error", err)
	}
	return denied
}
