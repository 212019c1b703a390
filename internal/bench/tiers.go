package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
)

// The tiers section measures what each isolation tier costs, every figure
// as a ratio against its peer measured in the same run:
//
//   - the gvisor tier's create -> first exec -> rm against a raw `runsc
//     run` of true on the same busybox root;
//   - the exec round trip in a gvisor box against the same in a container
//     box, the two in turns;
//   - the user namespace: the container tier's lifecycle and create+rm
//     throughput on two daemons the bench starts for the purpose, alike
//     but for `userns = "on"` and `userns = "off"` (the setting is the
//     daemon's, not a box's), measured in turns; then the host memory per
//     idle box (Config.TierDensity boxes) on each, one after the other
//     (host memory is one figure for the whole machine), measured as the
//     density section measures it.

// GroupTiers is the group of the tiers section's results.
const GroupTiers = "tiers"

// Result names of the tiers section.
const (
	NameGVisorLifecycle = "corral create+exec+rm, gvisor"
	NameExecContainer   = "corral exec round trip, container tier"
	NameExecGVisor      = "corral exec round trip, gvisor tier"
	NameUserNSOn        = "corral create+exec+rm, userns on"
	NameUserNSOff       = "corral create+exec+rm, userns off"
	NameUserNSOnTP      = "corral create+rm, userns on"
	NameUserNSOffTP     = "corral create+rm, userns off"
	NameUserNSOnIdle    = "corral, userns on"  // density series
	NameUserNSOffIdle   = "corral, userns off" // density series
)

// Goals of the tiers section (issue 23), as ratios.
const (
	GoalGVisorLifecycle = 1.2  // gvisor lifecycle / raw runsc run
	GoalGVisorExec      = 3.0  // gvisor exec round trip / container tier's
	GoalUserNS          = 1.10 // userns on / off: lifecycle time, throughput, memory per idle box
)

// TierRatio is one verdict of the tiers section: Of over Over, both
// measured in this run, against Goal.
type TierRatio struct {
	Name  string  `json:"name"`
	Of    string  `json:"of"`
	Over  string  `json:"over"`
	Ratio float64 `json:"ratio,omitempty"`
	Goal  float64 `json:"goal"`
	Err   string  `json:"error,omitempty"`
}

// Met reports whether the ratio was measured and is within its goal.
func (t TierRatio) Met() bool { return t.Err == "" && t.Ratio > 0 && t.Ratio <= t.Goal }

// tiers runs the tiers section.
func (r *run) tiers(ctx context.Context) {
	r.gvisorLifecycle(ctx)
	r.tierExec(ctx)
	r.userNSCost(ctx)
}

// tierRequest is createRequest in tier, on the tier's default runtime.
func (r *run) tierRequest(tier string) rest.CreateSandboxRequest {
	req := r.createRequest()
	req.Tier, req.Runtime = tier, ""
	return req
}

// addTierResult records a series of the tiers section.
func (r *run) addTierResult(name string, s []time.Duration, err error) Result {
	res := summarize(name, s, err)
	res.Group = GroupTiers
	r.rep.Results = append(r.rep.Results, res)
	return res
}

// addTierRatio records of/over as a verdict; a series that failed gives
// an error instead of a ratio.
func (r *run) addTierRatio(name string, of, over Result, goal float64) {
	t := TierRatio{Name: name, Of: of.Name, Over: over.Name, Goal: goal}
	switch {
	case of.Median <= 0:
		t.Err = cmp.Or(of.Err, "no samples") + " (" + of.Name + ")"
	case over.Median <= 0:
		t.Err = cmp.Or(over.Err, "no samples") + " (" + over.Name + ")"
	default:
		t.Ratio = float64(of.Median) / float64(over.Median)
	}
	r.rep.TierRatios = append(r.rep.TierRatios, t)
}

// gvisorLifecycle times the gvisor tier's lifecycle and raw runsc's.
func (r *run) gvisorLifecycle(ctx context.Context) {
	r.progress("%s x%d", NameGVisorLifecycle, r.cfg.Lifecycles)
	full, _, err := r.corralLifecycle(ctx, r.tierRequest("gvisor"))
	life := r.addTierResult(NameGVisorLifecycle, full, err)
	r.progress("%s x%d", PeerName("runsc"), r.cfg.Lifecycles)
	var s []time.Duration
	p, err := r.peer(ctx, "runsc")
	if err == nil {
		s, err = sequential(ctx, r.cfg.Lifecycles, 2, p.run)
	}
	raw := r.addTierResult(PeerName("runsc"), s, err)
	r.addTierRatio("gvisor lifecycle / raw runsc run", life, raw, GoalGVisorLifecycle)
}

// tierExec times the exec round trip in a container box and in a gvisor
// box, in turns: the load of the machine, which varies over a run, then
// weighs on both series alike, and their ratio is the tier's cost.
func (r *run) tierExec(ctx context.Context) {
	names := [2]string{NameExecContainer, NameExecGVisor}
	var errs [2]error
	var ops [2]func(context.Context) error
	for i, tier := range [2]string{"container", "gvisor"} {
		box, rm, err := r.execBox(ctx, r.tierRequest(tier))
		if err != nil {
			errs[i] = err
			continue
		}
		defer rm()
		ops[i] = func(ctx context.Context) error { return execTrue(ctx, box) }
	}
	r.progress("%s and %s in turns x%d", names[0], names[1], r.cfg.Execs)
	s, errs := inTurns(ctx, r.cfg.Execs, 10, ops, errs)
	var res [2]Result
	for i, name := range names {
		res[i] = r.addTierResult(name, s[i], errs[i])
	}
	r.addTierRatio("gvisor exec / container exec", res[1], res[0], GoalGVisorExec)
}

// inTurns runs ops[0], ops[1], ops[0]... n+warm times each and returns
// the durations of each op's runs after its first warm. An op whose errs
// entry is set does not run; one that fails stops, keeping its error, and
// the other goes on.
func inTurns(ctx context.Context, n, warm int, ops [2]func(context.Context) error, errs [2]error) ([2][]time.Duration, [2]error) {
	var s [2][]time.Duration
	for i := range n + warm {
		for j, op := range ops {
			if errs[j] != nil || op == nil {
				continue
			}
			start := time.Now()
			if errs[j] = op(ctx); errs[j] == nil && i >= warm {
				s[j] = append(s[j], time.Since(start))
			}
		}
	}
	return s, errs
}

// execBox creates a box from req for exec round trips and returns it and
// its removal.
func (r *run) execBox(ctx context.Context, req rest.CreateSandboxRequest) (*client.Sandbox, func(), error) {
	c := r.cfg.Client
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	rm := func() { _ = c.RemoveSandbox(context.WithoutCancel(ctx), sb.ID, client.RemoveOptions{Force: true}) }
	return c.Sandbox(sb.ID), rm, nil
}

func execTrue(ctx context.Context, box *client.Sandbox) error {
	res, err := box.Exec(ctx, client.ExecOptions{Cmd: []string{"true"}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("true exited %d", res.ExitCode)
	}
	return err
}

// userNSCost starts two daemons alike but for userns and measures the
// container tier's lifecycle on both in turns, then create+rm throughput
// with the most clients of Config.Clients on each, then the memory per
// idle box on each.
func (r *run) userNSCost(ctx context.Context) {
	lifeErr := func(err error) {
		on := r.addTierResult(NameUserNSOn, nil, err)
		off := r.addTierResult(NameUserNSOff, nil, err)
		r.addTierRatio("userns on / off, lifecycle", on, off, GoalUserNS)
		r.rep.TierRatios = append(r.rep.TierRatios, idleRatio(Density{Name: NameUserNSOnIdle, Err: err.Error()}, Density{Name: NameUserNSOffIdle}))
	}
	if r.cfg.DaemonBinary == "" {
		lifeErr(errors.New("no daemon binary to start (Config.DaemonBinary)"))
		return
	}
	var daemons [2]*benchDaemon
	for i, mode := range []string{"on", "off"} {
		r.progress("starting a daemon with userns = %q", mode)
		d, err := r.startDaemon(ctx, "userns-"+mode, "userns = \""+mode+"\"\n")
		if err != nil {
			lifeErr(fmt.Errorf("daemon with userns = %q: %w", mode, err))
			return // the deferred stops end the one started
		}
		defer d.stop()
		daemons[i] = d
	}
	req := r.createRequest()
	req.Runtime = ""
	r.progress("%s and %s in turns x%d", NameUserNSOn, NameUserNSOff, r.cfg.Lifecycles)
	var s [2][]time.Duration
	var errs [2]error
	for i := range r.cfg.Lifecycles + 2 {
		for j, d := range daemons {
			if errs[j] != nil {
				continue
			}
			start := time.Now()
			if errs[j] = lifecycleOnce(ctx, d.client, req); errs[j] == nil && i >= 2 {
				s[j] = append(s[j], time.Since(start))
			}
		}
	}
	on := r.addTierResult(NameUserNSOn, s[0], errs[0])
	off := r.addTierResult(NameUserNSOff, s[1], errs[1])
	r.addTierRatio("userns on / off, lifecycle", on, off, GoalUserNS)

	clients := 1
	for _, n := range r.cfg.Clients {
		clients = max(clients, n)
	}
	var tp [2]Throughput
	for j, name := range []string{NameUserNSOnTP, NameUserNSOffTP} {
		c := daemons[j].client
		op := func(ctx context.Context, _ int) error {
			sb, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			return c.RemoveSandbox(ctx, sb.ID, client.RemoveOptions{Force: true})
		}
		r.progress("%s with %d clients x%d", name, clients, r.cfg.ThroughputOps)
		_, _, _ = parallel(ctx, clients, clients, op)
		tp[j] = timedSeries(ctx, name, clients, r.cfg.ThroughputOps, op)
		r.rep.Throughput = append(r.rep.Throughput, tp[j])
	}
	t := TierRatio{Name: "userns off / on, throughput", Of: NameUserNSOffTP, Over: NameUserNSOnTP, Goal: GoalUserNS}
	switch {
	case tp[0].PerSecond <= 0:
		t.Err = cmp.Or(tp[0].Err, "no samples") + " (" + NameUserNSOnTP + ")"
	case tp[1].PerSecond <= 0:
		t.Err = cmp.Or(tp[1].Err, "no samples") + " (" + NameUserNSOffTP + ")"
	default:
		// Rates: the cost is off's rate over on's.
		t.Ratio = tp[1].PerSecond / tp[0].PerSecond
	}
	r.rep.TierRatios = append(r.rep.TierRatios, t)

	var idle [2]Density
	for j, name := range []string{NameUserNSOnIdle, NameUserNSOffIdle} {
		d := daemons[j]
		r.progress("%s density: starting %d idle boxes (memory limit %d MiB)", name, r.cfg.TierDensity, r.cfg.DensityMemory>>20)
		b := r.corralBoxes(name, d.client, req)
		b.daemonPID = d.cmd.Process.Pid
		idle[j] = r.measureDensity(ctx, b, r.cfg.TierDensity)
		r.rep.Density = append(r.rep.Density, idle[j])
	}
	r.rep.TierRatios = append(r.rep.TierRatios, idleRatio(idle[0], idle[1]))
}

// idleRatio is the verdict on the memory per idle box with userns on over
// off. A measurement with an error, a box that did not answer its exec or
// no memory taken gives an error instead of a ratio: its figure would
// not be that of working idle boxes.
func idleRatio(on, off Density) TierRatio {
	t := TierRatio{Name: "userns on / off, memory per idle box", Of: NameUserNSOnIdle, Over: NameUserNSOffIdle, Goal: GoalUserNS}
	for _, d := range []Density{on, off} {
		switch {
		case d.Err != "":
			t.Err = d.Err
		case d.Running == 0:
			t.Err = "no box running"
		case d.ExecOK < d.ExecChecked:
			t.Err = fmt.Sprintf("%d of %d boxes answered exec", d.ExecOK, d.ExecChecked)
		case d.PerBox <= 0:
			t.Err = "no memory taken (too few boxes to see, raise --tier-density)"
		default:
			continue
		}
		t.Err += " (" + d.Name + ")"
		return t
	}
	t.Ratio = float64(on.PerBox) / float64(off.PerBox)
	return t
}

// lifecycleOnce is create -> exec of true -> rm of one box from req.
func lifecycleOnce(ctx context.Context, c *client.Client, req rest.CreateSandboxRequest) error {
	sb, err := c.CreateSandbox(ctx, req)
	if err != nil {
		return err
	}
	err = execTrue(ctx, c.Sandbox(sb.ID))
	if rmErr := c.RemoveSandbox(ctx, sb.ID, client.RemoveOptions{Force: true}); err == nil {
		err = rmErr
	}
	return err
}

// benchDaemon is a daemon the bench started, with state of its own under
// the work directory.
type benchDaemon struct {
	dir    string
	cgroup string
	cmd    *exec.Cmd
	client *client.Client
	done   chan struct{}
}

// daemonStartTimeout bounds a bench daemon's start (built-in images
// included) and its graceful stop.
const daemonStartTimeout = 2 * time.Minute

// startDaemon starts `corral serve` on a configuration of its own under
// the work directory, the defaults plus extra, and waits for its API.
func (r *run) startDaemon(ctx context.Context, name, extra string) (*benchDaemon, error) {
	dir := filepath.Join(r.cfg.WorkDir, "daemon-"+name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	d := &benchDaemon{dir: dir, cgroup: "corral-bench-" + name + "-" + r.id, done: make(chan struct{})}
	sock := filepath.Join(dir, "run", "corral.sock")
	conf := fmt.Sprintf("version = 1\nroot = %q\nrun_dir = %q\nsocket = %q\ncgroup_parent = %q\n%s[runtime.gvisor]\nenabled = false\n",
		filepath.Join(dir, "root"), filepath.Join(dir, "run"), sock, d.cgroup, extra)
	confPath := filepath.Join(dir, "corral.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(dir, "daemon.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command(r.cfg.DaemonBinary, "serve", "--config", confPath, "--log-level", "warn")
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", r.cfg.DaemonBinary, err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	if d.client, err = client.New(client.WithHost("unix://" + sock)); err != nil {
		d.stop()
		return nil, err
	}
	deadline := time.Now().Add(daemonStartTimeout)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		_, err := d.client.Info(pctx)
		cancel()
		if err == nil {
			return d, nil
		}
		select {
		case <-d.done:
			d.stop()
			return nil, fmt.Errorf("it exited: %s", d.logTail())
		case <-ctx.Done():
			d.stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			d.stop()
			return nil, fmt.Errorf("no API after %s: %s", daemonStartTimeout, d.logTail())
		}
	}
}

// logTail is the end of the daemon's log, on one line.
func (d *benchDaemon) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "daemon.log"))
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}

// stop removes the daemon's boxes, stops it (SIGTERM, then SIGKILL) and
// removes its directory and cgroup parent; never a directory with a mount
// still under it.
func (d *benchDaemon) stop() {
	if d.client != nil {
		ctx, cancel := context.WithTimeout(context.Background(), daemonStartTimeout)
		if list, err := d.client.ListSandboxes(ctx); err == nil {
			for _, sb := range list {
				_ = d.client.RemoveSandbox(ctx, sb.ID, client.RemoveOptions{Force: true}) // best effort: try them all
			}
		}
		cancel()
	}
	if d.cmd.Process != nil {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(daemonStartTimeout):
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	}
	removeCgroups(cgroupRoot, d.cgroup)
	if !mountedUnder(d.dir) {
		_ = os.RemoveAll(d.dir)
	}
}

// mountedUnder reports whether anything is mounted at dir or below it.
func mountedUnder(dir string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			return true
		}
	}
	return false
}

// rawRunsc runs `runsc run` of /bin/true on runsc's default spec, on the
// busybox root Corral's boxes run, with the platform Corral uses by
// default and no network (a Corral box has none by default), from the
// same private mount namespace.
func (r *run) rawRunsc(ctx context.Context) (*peer, error) {
	bin, err := exec.LookPath("runsc")
	if err != nil {
		return nil, notInstalled("runsc", "runsc")
	}
	ns, err := r.namespace()
	if err != nil {
		return nil, err
	}
	bundle, err := r.bundle(ctx, "runsc", bin, "runsc-bundle", []string{"/bin/true"}, 0)
	if err != nil {
		return nil, err
	}
	state := filepath.Join(r.cfg.WorkDir, "runsc-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	var seq atomic.Int64
	return &peer{
		name: "runsc",
		run: func(ctx context.Context, _ int) error {
			id := fmt.Sprintf("bench-runsc-%d-%d", os.Getpid(), seq.Add(1))
			_, err := ns.run(exec.CommandContext(ctx, bin, "--root", state, "--platform=systrap", "--network=none", "--overlay2=none",
				"run", "--bundle", bundle, id))
			return err
		},
	}, nil
}

// printTiers prints the tiers section's series (the userns throughput
// series are in the throughput table, its idle boxes in the density one).
func printTiers(w io.Writer, rep *Report) {
	fmt.Fprintln(w, "tiers: each tier against its peer in this run (ratios below, with the targets; userns throughput and idle memory in their tables)")
	printResults(w, rep, func(g string) bool { return g == GroupTiers }, false)
}

// printTierTargets prints the tiers section's verdicts, as ratios.
func printTierTargets(w io.Writer, rep *Report) {
	for _, t := range rep.TierRatios {
		if t.Err != "" {
			fmt.Fprintf(w, "target %s <= %.2fx: not measured: %s\n", t.Name, t.Goal, t.Err)
			continue
		}
		fmt.Fprintf(w, "target %s <= %.2fx: %s (%.2fx)\n", t.Name, t.Goal, verdict(t.Met()), t.Ratio)
	}
}
