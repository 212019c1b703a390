// Package bench measures Corral against its peers on this machine, in one
// run, and prints medians and ratios side by side:
//
//   - lifecycle: create -> first exec done -> remove through a running
//     daemon (cold, and from a warm pool), next to a raw `crun run`,
//     `runc run`, `bwrap` and `podman run --rm` of true on the same busybox
//     root file system;
//   - exec round trip in a running sandbox;
//   - throughput: sandboxes created and removed per second with C
//     concurrent clients, and the peers' lifecycles run C at a time;
//   - idle density: host memory per idle sandbox (MemAvailable, Slab, the
//     agents' RSS and PSS), next to idle raw crun containers;
//   - the daemon's operations through the Go SDK: fork, suspend and resume.
//
// It is what `corral bench` runs; Chart and WriteSVG draw the report.
// Speed targets are checked here, never by timed assertions in the test
// suite.
package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
)

// Sections of a run, in the order they run.
const (
	SectionLifecycle  = "lifecycle"  // lifecycle and exec round trip, Corral and peers
	SectionThroughput = "throughput" // create+remove per second
	SectionDensity    = "density"    // idle sandboxes per host memory
	SectionOps        = "ops"        // fork, suspend/resume, warm pool
	SectionTiers      = "tiers"      // gvisor vs raw runsc, exec per tier, userns cost (tiers.go)
)

// AllSections is the default of Config.Sections, in the order they run:
// density last, because the kernel goes on freeing the namespaces and slab
// of its 1000 removed boxes for tens of seconds, which would slow whatever
// ran next (the warm-pool figures of the ops section did).
var AllSections = []string{SectionLifecycle, SectionOps, SectionTiers, SectionThroughput, SectionObs, SectionDensity}

// Result groups, the sections of the table and of the chart.
const (
	GroupLifecycle = "lifecycle"
	GroupExec      = "exec"
	GroupFork      = "fork"
	GroupSuspend   = "suspend"
)

// LabelKey is the label every sandbox made by a run carries (its value is
// the run's ID), so that whatever a run leaves behind can be found.
const LabelKey = "corral.bench"

// Config tunes a run. Zero fields take the documented defaults.
type Config struct {
	// Client talks to the daemon whose sandboxes are measured.
	Client *client.Client
	// Image is the image for Corral's sandboxes ("busybox" by default, the
	// same root file system the raw peers run).
	Image string
	// Runtime is the daemon runtime to measure ("" = the daemon's default).
	Runtime string
	// Sections to run (AllSections when empty).
	Sections []string
	// Lifecycles is how many create -> exec -> remove rounds to time (30).
	Lifecycles int
	// Execs is how many exec round trips to time (300).
	Execs int
	// Peers lists raw peers to run: "crun", "runc", "bwrap", "podman".
	Peers []string
	// Clients are the numbers of concurrent clients of the throughput
	// measurement (1 and 2 x the number of CPUs).
	Clients []int
	// ThroughputOps is how many create+remove (or peer lifecycles) each
	// throughput series does (100).
	ThroughputOps int
	// DensityBoxes is how many idle sandboxes the density measurement
	// starts (100; `corral bench` asks for 1000).
	DensityBoxes int
	// DensityMemory is the memory limit of each idle sandbox (32 MiB).
	DensityMemory int64
	// TierDensity is how many idle boxes the tiers section starts on each
	// of its two daemons (userns on and off) to compare their memory per
	// box (100).
	TierDensity int
	// DensityPeers lists raw peers whose idle containers are measured the
	// same way: "crun".
	DensityPeers []string
	// Settle is how long to wait before reading host memory, so that the
	// agents are idle and deferred frees are done (DefaultSettle).
	Settle time.Duration
	// AgentIdleWait bounds the wait, after settling, for the idle boxes'
	// agents to exit (the daemon's agent_idle_exit), so that idle boxes are
	// measured as they stay; 0 measures them with their agents running.
	AgentIdleWait time.Duration
	// Forks is how many forks, suspends and resumes to time (5).
	Forks int
	// ForkBytes are the amounts written in a sandbox, and synced, before
	// it is forked (1 MiB and 1 GiB).
	ForkBytes []int64
	// ForkUnsyncedBytes is written in a sandbox, not synced, right before
	// each fork of another series (512 MiB; negative: no such series).
	ForkUnsyncedBytes int64
	// ReturnWait bounds the wait, after the idle boxes of a density
	// measurement are removed, for their memory to come back and their
	// memory cgroups to go (DefaultReturnWait).
	ReturnWait time.Duration
	// DaemonSocket is the path of the daemon's unix socket, if it is one:
	// density then also reports the growth of the daemon's RSS.
	DaemonSocket string
	// DaemonBinary is the corral binary the tiers section starts its own
	// daemons with (userns on and off); empty skips that comparison.
	DaemonBinary string
	// WorkDir holds the peers' bundles; a temporary directory by default.
	WorkDir string
	// Progress, when set, gets a line as each measurement starts.
	Progress io.Writer
}

func (cfg *Config) defaults() {
	if cfg.Image == "" {
		cfg.Image = "busybox"
	}
	if len(cfg.Sections) == 0 {
		cfg.Sections = AllSections
	}
	if cfg.Lifecycles <= 0 {
		cfg.Lifecycles = 30
	}
	if cfg.Execs <= 0 {
		cfg.Execs = 300
	}
	if len(cfg.Clients) == 0 {
		cfg.Clients = DefaultClients()
	}
	if cfg.ThroughputOps <= 0 {
		cfg.ThroughputOps = 100
	}
	if cfg.DensityBoxes <= 0 {
		cfg.DensityBoxes = 100
	}
	if cfg.TierDensity <= 0 {
		cfg.TierDensity = 100
	}
	if cfg.DensityMemory <= 0 {
		cfg.DensityMemory = 32 << 20
	}
	if cfg.Settle <= 0 {
		cfg.Settle = DefaultSettle
	}
	if cfg.Forks <= 0 {
		cfg.Forks = 5
	}
	if len(cfg.ForkBytes) == 0 {
		cfg.ForkBytes = []int64{1 << 20, 1 << 30}
	}
	if cfg.ForkUnsyncedBytes == 0 {
		cfg.ForkUnsyncedBytes = 512 << 20
	}
	if cfg.ReturnWait <= 0 {
		cfg.ReturnWait = DefaultReturnWait
	}
}

// DefaultReturnWait is the default of Config.ReturnWait: issue 27 wants
// the memory back within a minute of the last removal.
const DefaultReturnWait = time.Minute

// DefaultSettle is the default of Config.Settle.
const DefaultSettle = 5 * time.Second

// DefaultClients is 1 and 2 x the number of CPUs.
func DefaultClients() []int {
	return []int{1, 2 * runtimeNumCPU()}
}

// Result is one measured series of durations.
type Result struct {
	// Group is GroupLifecycle, GroupExec, GroupFork or GroupSuspend.
	Group   string          `json:"group,omitempty"`
	Name    string          `json:"name"`
	Samples []time.Duration `json:"-"`
	N       int             `json:"n"`
	Median  time.Duration   `json:"median_ns"`
	P90     time.Duration   `json:"p90_ns"`
	// First is the first sample: for a fork series, the fork right after
	// the sandbox wrote its data, the one that would wait for a write-back.
	First time.Duration `json:"first_ns,omitempty"`
	Err   string        `json:"error,omitempty"`
}

// Report is the whole run.
type Report struct {
	Date    time.Time `json:"date"`
	Machine Machine   `json:"machine"`
	Results []Result  `json:"results"`
	// Ratios are Corral's lifecycle median over each peer's ("crun" -> 1.2).
	Ratios     map[string]float64 `json:"lifecycle_ratio_vs"`
	Throughput []Throughput       `json:"throughput,omitempty"`
	Density    []Density          `json:"density,omitempty"`
	// Suspend holds the size of suspended sandboxes' saved state.
	Suspend *SuspendSize `json:"suspend,omitempty"`
	// TierRatios are the tiers section's verdicts (tiers.go).
	TierRatios []TierRatio `json:"tier_ratios,omitempty"`
	// Obs is the observability section (obs.go).
	Obs *Obs `json:"obs,omitempty"`
}

// Result names of Corral's own series.
const (
	NameLifecycle     = "corral create+exec+rm"
	NameCreateExec    = "corral create+exec"
	NamePoolLifecycle = "corral create+exec+rm, warm pool"
	NamePoolExec      = "corral create+exec, warm pool"
	NameExec          = "corral exec round trip"
)

// PeerName is the name of a raw peer's lifecycle series.
func PeerName(peer string) string { return peer + " run true" }

func summarize(name string, s []time.Duration, err error) Result {
	r := Result{Name: name, Samples: s, N: len(s)}
	if err != nil {
		r.Err = err.Error()
	}
	if len(s) == 0 {
		return r
	}
	r.Median, r.P90 = medianP90(s)
	r.First = s[0]
	return r
}

// medianP90 returns the median and the 90th percentile of s (unchanged).
func medianP90(s []time.Duration) (time.Duration, time.Duration) {
	if len(s) == 0 {
		return 0, 0
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	return sorted[len(sorted)/2], sorted[int(math.Ceil(float64(len(sorted))*0.9))-1]
}

// group is r.Group, or for results without one (reports of older
// builds) GroupExec for the exec round trip and GroupLifecycle otherwise.
func (r Result) group() string {
	switch {
	case r.Group != "":
		return r.Group
	case r.Name == NameExec:
		return GroupExec
	}
	return GroupLifecycle
}

// groupResults returns the results of group, Corral's first, each kind in
// the order measured.
func (rep *Report) groupResults(group string) []Result {
	var corral, peers []Result
	for _, r := range rep.Results {
		switch {
		case r.group() != group:
		case strings.HasPrefix(r.Name, "corral"):
			corral = append(corral, r)
		default:
			peers = append(peers, r)
		}
	}
	return append(corral, peers...)
}

// result returns the first result named name, or nil.
func (rep *Report) result(name string) *Result {
	for i := range rep.Results {
		if rep.Results[i].Name == name {
			return &rep.Results[i]
		}
	}
	return nil
}

// run is the state of one Run.
type run struct {
	cfg    Config
	id     string // value of LabelKey on this run's sandboxes
	rootfs string
	rep    *Report

	nsOnce sync.Once
	ns     *nsThread
	nsErr  error

	peersMu sync.Mutex
	// peers are set up on first use and closed at the end; guarded by peersMu.
	peers map[string]*peer
}

// Run measures everything in cfg and returns the report. Sandboxes it makes
// carry the label LabelKey; whatever is left of them (an interrupted run)
// is removed before Run returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if cfg.Client == nil {
		return nil, fmt.Errorf("bench needs a client: %w", errdefs.ErrInvalidArgument)
	}
	for _, s := range cfg.Sections {
		if !slices.Contains(AllSections, s) {
			return nil, fmt.Errorf("unknown section %q (want %s): %w", s, strings.Join(AllSections, ", "), errdefs.ErrInvalidArgument)
		}
	}
	if cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "corral-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		cfg.WorkDir = d
	}
	r := &run{
		cfg:   cfg,
		id:    strconv.FormatInt(time.Now().UnixNano(), 36),
		rep:   &Report{Date: time.Now().UTC(), Ratios: map[string]float64{}},
		peers: map[string]*peer{},
	}
	r.rep.Machine = machineInfo(ctx, cfg.Client, peerNames(cfg))
	defer r.close(ctx)
	var err error
	if r.rootfs, err = busyboxRootfs(cfg.WorkDir); err != nil {
		return nil, err
	}
	for _, s := range cfg.Sections {
		r.settle(ctx)
		switch s {
		case SectionLifecycle:
			r.lifecycle(ctx)
		case SectionThroughput:
			r.throughput(ctx)
		case SectionDensity:
			r.density(ctx)
		case SectionOps:
			r.ops(ctx)
		case SectionTiers:
			r.tiers(ctx)
		case SectionObs:
			r.obs(ctx)
		}
		if err := ctx.Err(); err != nil {
			return r.rep, err
		}
	}
	return r.rep, nil
}

func peerNames(cfg Config) []string {
	var names []string
	tiers := []string{}
	if slices.Contains(cfg.Sections, SectionTiers) {
		tiers = append(tiers, "runsc") // its raw peer
	}
	for _, p := range slices.Concat(cfg.Peers, cfg.DensityPeers, tiers) {
		if !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	return names
}

// Before each section the bench lets the host settle: the ops section
// writes 1 GiB into boxes and removes them, and the kernel goes on writing
// back and discarding afterwards, which the next section would measure as
// its own (the figures are in docs/benchmarks.md, beside the order of
// the sections). The first section too: a bench started right after another
// one, or a build, measured a much slower cold lifecycle than a minute
// later.
const (
	settleBusy = 0.10             // host CPU busy fraction that counts as settled
	settleMax  = 30 * time.Second // then the section runs anyway
)

// settle flushes dirty data (sync) and waits until the host's CPUs were
// at most settleBusy busy over half a second, or settleMax has passed.
func (r *run) settle(ctx context.Context) {
	start := time.Now()
	syscall.Sync()
	for ctx.Err() == nil && time.Since(start) < settleMax {
		b0, err := cpuBusy()
		if err != nil {
			return
		}
		t0 := time.Now()
		sleep(ctx, 500*time.Millisecond)
		b1, err := cpuBusy()
		if err != nil {
			return
		}
		if busy := float64(b1-b0) / float64(time.Since(t0)) / float64(runtimeNumCPU()); busy <= settleBusy {
			r.progress("host settled in %s", time.Since(start).Round(time.Millisecond))
			return
		}
	}
	r.progress("host still busy after %s: going on", settleMax)
}

func (r *run) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, "bench: "+format+"\n", args...)
	}
}

// close releases the peers and the namespace thread and removes the
// sandboxes of this run that are still there.
func (r *run) close(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	r.sweep(ctx)
	r.peersMu.Lock()
	for _, p := range r.peers {
		if p.close != nil {
			p.close()
		}
	}
	r.peersMu.Unlock()
	if r.ns != nil {
		r.ns.close()
	}
}

// sweep removes every sandbox labelled with this run's ID.
func (r *run) sweep(ctx context.Context) {
	if r.cfg.Client == nil {
		return
	}
	list, err := r.cfg.Client.ListSandboxes(ctx)
	if err != nil {
		return
	}
	var ids []string
	for _, sb := range list {
		if sb.Labels[LabelKey] == r.id {
			ids = append(ids, sb.ID)
		}
	}
	_, _, _ = parallel(ctx, 2*runtimeNumCPU(), len(ids), func(ctx context.Context, i int) error {
		_ = r.cfg.Client.RemoveSandbox(ctx, ids[i], client.RemoveOptions{Force: true}) // best effort: try them all
		return nil
	})
}

// namespace returns the thread in a private mount namespace, made once.
func (r *run) namespace() (*nsThread, error) {
	r.nsOnce.Do(func() { r.ns, r.nsErr = newNSThread() })
	return r.ns, r.nsErr
}

// createRequest is the request for one of this run's sandboxes, made from
// scratch (never taken from a warm pool).
func (r *run) createRequest() rest.CreateSandboxRequest {
	return rest.CreateSandboxRequest{
		Image: r.cfg.Image, Runtime: r.cfg.Runtime, NoPool: true,
		Labels: map[string]string{LabelKey: r.id},
	}
}

// lifecycle times Corral's lifecycle and exec round trip and the peers'
// lifecycles.
func (r *run) lifecycle(ctx context.Context) {
	r.progress("corral lifecycle x%d", r.cfg.Lifecycles)
	full, toExec, err := r.corralLifecycle(ctx, r.createRequest())
	life := summarize(NameLifecycle, full, err)
	life.Group = GroupLifecycle
	ce := summarize(NameCreateExec, toExec, err)
	ce.Group = GroupLifecycle
	r.progress("corral exec round trip x%d", r.cfg.Execs)
	execs, err := r.corralExec(ctx)
	ex := summarize(NameExec, execs, err)
	ex.Group = GroupExec
	r.rep.Results = append(r.rep.Results, life, ce, ex)

	for _, name := range r.cfg.Peers {
		r.progress("%s x%d", PeerName(name), r.cfg.Lifecycles)
		var s []time.Duration
		p, err := r.peer(ctx, name)
		if err == nil {
			s, err = sequential(ctx, r.cfg.Lifecycles, 2, p.run)
		}
		res := summarize(PeerName(name), s, err)
		res.Group = GroupLifecycle
		r.rep.Results = append(r.rep.Results, res)
		if res.Median > 0 && life.Median > 0 {
			r.rep.Ratios[name] = float64(life.Median) / float64(res.Median)
		}
	}
}

// sequential runs op warm+n times, one after the other, and returns the
// durations of the last n.
func sequential(ctx context.Context, n, warm int, op func(context.Context, int) error) ([]time.Duration, error) {
	var s []time.Duration
	for i := range n + warm {
		start := time.Now()
		if err := op(ctx, i); err != nil {
			return s, err
		}
		if i >= warm {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// corralLifecycle times create -> exec of true -> remove and returns the
// full durations and those up to the end of the exec.
func (r *run) corralLifecycle(ctx context.Context, req rest.CreateSandboxRequest) (full, toExec []time.Duration, err error) {
	c := r.cfg.Client
	for range r.cfg.Lifecycles {
		start := time.Now()
		sb, err := c.CreateSandbox(ctx, req)
		if err != nil {
			return full, toExec, err
		}
		res, err := c.Sandbox(sb.ID).Exec(ctx, client.ExecOptions{Cmd: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		execDone := time.Since(start)
		rmErr := c.RemoveSandbox(ctx, sb.ID, client.RemoveOptions{Force: true})
		if err != nil {
			return full, toExec, err
		}
		if rmErr != nil {
			return full, toExec, rmErr
		}
		full = append(full, time.Since(start))
		toExec = append(toExec, execDone)
	}
	return full, toExec, nil
}

func (r *run) corralExec(ctx context.Context) ([]time.Duration, error) {
	c := r.cfg.Client
	sb, err := c.CreateSandbox(ctx, r.createRequest())
	if err != nil {
		return nil, err
	}
	defer c.RemoveSandbox(context.WithoutCancel(ctx), sb.ID, client.RemoveOptions{Force: true})
	box := c.Sandbox(sb.ID)
	return sequential(ctx, r.cfg.Execs, 10, func(ctx context.Context, _ int) error {
		res, err := box.Exec(ctx, client.ExecOptions{Cmd: []string{"true"}})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("true exited %d", res.ExitCode)
		}
		return nil
	})
}

// busyboxRootfs makes a root file system with /bin/busybox and the applets
// the peers run.
func busyboxRootfs(dir string) (string, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("busybox not found (apt-get install busybox-static): %w", err)
	}
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		return "", err
	}
	for _, a := range []string{"sh", "true", "sleep"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			return "", err
		}
	}
	return root, nil
}

// patchSpec makes the default spec run /bin/true without a terminal on the
// root file system at rootfs (an absolute path: runc refuses symlinks).
func patchSpec(p, rootfs string) error {
	return patchSpecWith(p, rootfs, []string{"/bin/true"}, 0)
}

// patchSpecWith makes the default spec run args without a terminal on the
// read-only root file system at rootfs, with a memory limit unless
// memory is 0.
func patchSpecWith(p, rootfs string, args []string, memory int64) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	proc, _ := spec["process"].(map[string]any)
	if proc == nil {
		return fmt.Errorf("%s: no process section", p)
	}
	proc["terminal"] = false
	proc["args"] = args
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	if memory > 0 {
		linux, _ := spec["linux"].(map[string]any)
		if linux == nil {
			linux = map[string]any{}
			spec["linux"] = linux
		}
		res, _ := linux["resources"].(map[string]any)
		if res == nil {
			res = map[string]any{}
			linux["resources"] = res
		}
		res["memory"] = map[string]any{"limit": memory}
	}
	b, err = json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

// limitedBuffer keeps the first 64 KiB written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := 64<<10 - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *limitedBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *limitedBuffer) String() string { return string(bytes.TrimSpace(b.Bytes())) }
