package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
)

// MeminfoFields are the /proc/meminfo fields whose growth a density
// measurement reports.
var MeminfoFields = []string{
	"MemAvailable", "MemFree", "AnonPages", "Slab", "SReclaimable", "SUnreclaim",
	"KernelStack", "PageTables", "Percpu", "Buffers", "Cached", "Shmem",
}

// Density is the host memory taken by idle sandboxes (or by a peer's idle
// containers). Memory figures are bytes.
type Density struct {
	// Name is "corral", "corral, userns on" or "off" (the tiers section)
	// or a peer's name.
	Name string `json:"name"`
	// Boxes were asked for; Running were started and counted.
	Boxes       int   `json:"boxes"`
	Running     int   `json:"running"`
	MemoryLimit int64 `json:"memory_limit_bytes"`
	// Start is the time it took to start them all.
	Start time.Duration `json:"start_ns"`
	// AvailableBefore, AvailableIdle and AvailableAfter are MemAvailable
	// before the boxes, with them idle, and after they were removed.
	AvailableBefore int64 `json:"mem_available_before"`
	AvailableIdle   int64 `json:"mem_available_idle"`
	AvailableAfter  int64 `json:"mem_available_after"`
	// PerBox is (AvailableBefore - AvailableIdle) / Running.
	PerBox int64 `json:"per_box_bytes"`
	// PerBoxAgents is PerBox read before the boxes' agents exited when
	// idle (Corral with corral-init only): each box's agent still runs, as
	// in a box used within the last agent_idle_exit. AgentsExit is how long
	// after that the agents had all exited.
	PerBoxAgents int64         `json:"per_box_with_agents_bytes,omitempty"`
	AgentsExit   time.Duration `json:"agents_exit_ns,omitempty"`
	// Accounted is the unreclaimable memory per box summed from its parts:
	// the boxes' processes' PSS, the daemon's RSS growth and the growth of
	// KernelStack, PageTables, SUnreclaim and Percpu. Page cache that other
	// programs fill or drop meanwhile moves PerBox but not Accounted.
	Accounted int64 `json:"accounted_per_box_bytes"`
	// Growth is the growth of each of MeminfoFields with the boxes idle.
	Growth map[string]int64 `json:"meminfo_growth"`
	// Processes are the boxes' processes (Corral: the agents), with their
	// summed RSS, PSS, anonymous PSS and threads.
	Processes int   `json:"processes"`
	RSS       int64 `json:"processes_rss"`
	PSS       int64 `json:"processes_pss"`
	PSSAnon   int64 `json:"processes_pss_anon"`
	Threads   int   `json:"processes_threads"`
	// DaemonRSSGrowth is the growth of the daemon's RSS (Corral only; 0
	// when the daemon's process was not found).
	DaemonRSSGrowth int64 `json:"daemon_rss_growth"`
	// ExecChecked boxes were asked to exec true; ExecOK answered with 0.
	ExecChecked int `json:"exec_checked"`
	ExecOK      int `json:"exec_ok"`
	// Returned is the fraction of the memory the boxes took that was
	// available again after they were removed.
	Returned float64 `json:"returned"`
	// Leftover is, for each of MeminfoFields, after removal - before the
	// boxes: what did not come back (or came back in excess).
	Leftover map[string]int64 `json:"meminfo_leftover"`
	// MemcgsLeft is how many more memory cgroups the kernel counts after
	// removal than before (/proc/cgroups): removed cgroups that still hold
	// charged pages ("dying") show up here.
	MemcgsLeft int `json:"memcgs_left"`
	// ReturnedIn is how long after the last removal Returned, Leftover
	// and MemcgsLeft were read: when the memory was back, or
	// Config.ReturnWait.
	ReturnedIn time.Duration `json:"returned_in_ns,omitempty"`
	Err        string        `json:"error,omitempty"`
}

// Meminfo is /proc/meminfo in bytes (fields given in kB are converted).
type Meminfo map[string]int64

// parseMeminfo reads /proc/meminfo's format.
func parseMeminfo(r io.Reader) (Meminfo, error) {
	m := Meminfo{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("meminfo %s: %w", name, err)
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		m[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if _, ok := m["MemAvailable"]; !ok {
		return nil, fmt.Errorf("meminfo has no MemAvailable")
	}
	return m, nil
}

func readMeminfo() (Meminfo, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMeminfo(f)
}

// growth is after - before of each of fields.
func growth(before, after Meminfo, fields []string) map[string]int64 {
	g := make(map[string]int64, len(fields))
	for _, f := range fields {
		if a, ok := after[f]; ok {
			g[f] = a - before[f]
		}
	}
	return g
}

// perBox is the memory n boxes took, each: (available before - available
// with the boxes) / n.
func perBox(before, idle int64, n int) int64 {
	if n <= 0 {
		return 0
	}
	return (before - idle) / int64(n)
}

// returnedFraction is how much of the memory taken between before and idle
// was available again at after (1 = all of it).
func returnedFraction(before, idle, after int64) float64 {
	used := before - idle
	if used <= 0 {
		return 1
	}
	return float64(after-idle) / float64(used)
}

// accounted is (processes + the growth of the kernel's unreclaimable
// counters) / n.
func accounted(g map[string]int64, processes int64, n int) int64 {
	if n <= 0 {
		return 0
	}
	sum := processes
	for _, f := range []string{"KernelStack", "PageTables", "SUnreclaim", "Percpu"} {
		sum += g[f]
	}
	return sum / int64(n)
}

// memcgs is the number of memory cgroups in /proc/cgroups, or -1.
func memcgs() int {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return -1
	}
	return parseCgroupsCount(string(b), "memory")
}

// parseCgroupsCount returns num_cgroups of subsystem in /proc/cgroups'
// format, or -1.
func parseCgroupsCount(s, subsystem string) int {
	for l := range strings.Lines(s) {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == subsystem {
			if n, err := strconv.Atoi(f[2]); err == nil {
				return n
			}
		}
	}
	return -1
}

// Rollup is the part of /proc/<pid>/smaps_rollup a density report uses,
// in bytes.
type Rollup struct{ RSS, PSS, PSSAnon int64 }

// parseRollup reads /proc/<pid>/smaps_rollup's format.
func parseRollup(r io.Reader) (Rollup, error) {
	var ro Rollup
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch name {
		case "Rss":
			dst = &ro.RSS
		case "Pss":
			dst = &ro.PSS
		case "Pss_Anon":
			dst = &ro.PSSAnon
		default:
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return ro, fmt.Errorf("smaps_rollup %s: unexpected %q", name, rest)
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return ro, fmt.Errorf("smaps_rollup %s: %w", name, err)
		}
		*dst = v * 1024
	}
	return ro, sc.Err()
}

// cgroupBase returns the last element of the process's cgroup paths in
// /proc/<pid>/cgroup format ("" if it has none but "/").
func cgroupBase(r io.Reader) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 || parts[2] == "/" || parts[2] == "" {
			continue
		}
		return path.Base(parts[2])
	}
	return ""
}

// procStats sums the smaps_rollup and threads of every process whose
// cgroup's last element is one of ids.
type procStats struct {
	Processes int
	Rollup
	Threads int
}

func boxProcesses(ids map[string]bool) procStats {
	var st procStats
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", pid, "cgroup"))
		if err != nil || !ids[cgroupBase(bytes.NewReader(b))] {
			continue
		}
		ro, err := readRollup(pid)
		if err != nil {
			continue
		}
		st.Processes++
		st.RSS += ro.RSS
		st.PSS += ro.PSS
		st.PSSAnon += ro.PSSAnon
		st.Threads += threads(pid)
	}
	return st
}

func readRollup(pid string) (Rollup, error) {
	f, err := os.Open(filepath.Join("/proc", pid, "smaps_rollup"))
	if err != nil {
		return Rollup{}, err
	}
	defer f.Close()
	return parseRollup(f)
}

func threads(pid string) int {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return 0
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return 0
}

// listenerPID returns the PID of a process holding the listening unix
// socket at sock (0 if none is found).
func listenerPID(sock string) int {
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return 0
	}
	inode := ""
	for l := range strings.Lines(string(b)) {
		f := strings.Fields(l)
		// Num RefCount Protocol Flags Type St Inode Path; 00010000 = listening
		if len(f) == 8 && f[7] == sock && f[3] == "00010000" {
			inode = f[6]
			break
		}
	}
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fds, _ := os.ReadDir(filepath.Join("/proc", e.Name(), "fd"))
		for _, fd := range fds {
			if l, _ := os.Readlink(filepath.Join("/proc", e.Name(), "fd", fd.Name())); l == want {
				return pid
			}
		}
	}
	return 0
}

func rssOf(pid int) int64 {
	if pid == 0 {
		return 0
	}
	ro, err := readRollup(strconv.Itoa(pid))
	if err != nil {
		return 0
	}
	return ro.RSS
}

// densityBoxes is what a density measurement needs from the thing it
// measures.
type densityBoxes struct {
	name string
	// start starts box i and returns its ID (which is also the last
	// element of its cgroup path).
	start func(ctx context.Context, i int) (string, error)
	// check asks box id to exec true; nil when there is no such check.
	check func(ctx context.Context, id string) error
	// remove removes box id.
	remove func(ctx context.Context, id string) error
	// daemonPID is the PID of the daemon running the boxes, or 0.
	daemonPID int
	// agentsExit says the boxes' agents exit when idle (Corral): the
	// measurement waits for that, up to Config.AgentIdleWait.
	agentsExit bool
	// whileIdle, when set, runs once the boxes are measured idle, with
	// how many run (the observability section's GET /metrics).
	whileIdle func(ctx context.Context, n int)
}

// measureDensity starts n boxes, lets them settle, reads host memory and
// the boxes' processes, checks every box answers, removes them and reads
// host memory again.
func (r *run) measureDensity(ctx context.Context, b densityBoxes, n int) Density {
	d := Density{Name: b.name, Boxes: n, MemoryLimit: r.cfg.DensityMemory}
	fail := func(err error) Density {
		if err != nil && d.Err == "" {
			d.Err = err.Error()
		}
		return d
	}
	workers := 2 * runtimeNumCPU()
	sleep(ctx, r.cfg.Settle)
	before, err := readMeminfo()
	if err != nil {
		return fail(err)
	}
	daemonBefore := rssOf(b.daemonPID)
	memcgsBefore := memcgs()

	var mu sync.Mutex
	ids := make([]string, 0, n) // guarded by mu
	start := time.Now()
	_, _, startErr := parallel(ctx, workers, n, func(ctx context.Context, i int) error {
		id, err := b.start(ctx, i)
		if err != nil {
			return err
		}
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		return nil
	})
	d.Start = time.Since(start)
	d.Running = len(ids)
	// removeAll tries every box and returns the first error.
	removeAll := func() error {
		var errMu sync.Mutex
		var first error
		_, _, _ = parallel(context.WithoutCancel(ctx), workers, len(ids), func(ctx context.Context, i int) error {
			if err := b.remove(ctx, ids[i]); err != nil {
				errMu.Lock()
				first = cmp.Or(first, err)
				errMu.Unlock()
			}
			return nil
		})
		return first
	}
	if startErr != nil {
		d.Err = fmt.Sprintf("started %d of %d: %v", len(ids), n, startErr)
	}
	r.progress("%s density: %d boxes started in %s; settling %s", b.name, len(ids), d.Start.Round(time.Millisecond), r.cfg.Settle)
	sleep(ctx, r.cfg.Settle)
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	if b.agentsExit && r.cfg.AgentIdleWait > 0 {
		withAgents, err := readMeminfo()
		if err != nil {
			_ = removeAll()
			return fail(err)
		}
		d.PerBoxAgents = perBox(before["MemAvailable"], withAgents["MemAvailable"], d.Running)
		r.progress("%s density: waiting up to %s for the agents to exit when idle", b.name, r.cfg.AgentIdleWait)
		waited, ok := waitAgentsExit(ctx, set, len(ids), r.cfg.AgentIdleWait)
		d.AgentsExit = waited
		if !ok && d.Err == "" {
			d.Err = fmt.Sprintf("agents still running after %s (agent_idle_exit longer, or no corral-init in this build)", r.cfg.AgentIdleWait)
		}
		sleep(ctx, r.cfg.Settle)
	}
	idle, err := readMeminfo()
	if err != nil {
		_ = removeAll()
		return fail(err)
	}
	st := boxProcesses(set)
	if b.daemonPID != 0 {
		d.DaemonRSSGrowth = rssOf(b.daemonPID) - daemonBefore
	}
	d.AvailableBefore, d.AvailableIdle = before["MemAvailable"], idle["MemAvailable"]
	d.PerBox = perBox(d.AvailableBefore, d.AvailableIdle, d.Running)
	d.Growth = growth(before, idle, MeminfoFields)
	d.Processes, d.RSS, d.PSS, d.PSSAnon, d.Threads = st.Processes, st.RSS, st.PSS, st.PSSAnon, st.Threads
	d.Accounted = accounted(d.Growth, d.PSS+d.DaemonRSSGrowth, d.Running)
	if b.whileIdle != nil {
		b.whileIdle(ctx, len(ids))
	}

	if b.check != nil {
		r.progress("%s density: exec true in each of %d boxes", b.name, len(ids))
		var okMu sync.Mutex
		_, _, _ = parallel(ctx, workers, len(ids), func(ctx context.Context, i int) error {
			err := b.check(ctx, ids[i])
			okMu.Lock()
			d.ExecChecked++
			if err == nil {
				d.ExecOK++
			}
			okMu.Unlock()
			return nil
		})
	}
	r.progress("%s density: removing %d boxes", b.name, len(ids))
	if err := removeAll(); err != nil && d.Err == "" {
		d.Err = fmt.Sprintf("remove: %v", err)
	}
	// The memory comes back, and the memory cgroups go, as the kernel
	// frees what the boxes held: read them every second until they are
	// back (MemoryBackVsCrun of what the boxes took, no cgroup left) or
	// ReturnWait has passed.
	removed := time.Now()
	for {
		sleep(ctx, time.Second)
		after, err := readMeminfo()
		if err != nil {
			return fail(err)
		}
		d.AvailableAfter = after["MemAvailable"]
		d.Returned = returnedFraction(d.AvailableBefore, d.AvailableIdle, d.AvailableAfter)
		d.Leftover = growth(before, after, MeminfoFields)
		if memcgsBefore >= 0 {
			if n := memcgs(); n >= 0 {
				d.MemcgsLeft = n - memcgsBefore
			}
		}
		d.ReturnedIn = time.Since(removed)
		if back(d.Returned, d.MemcgsLeft) || d.ReturnedIn >= r.cfg.ReturnWait || ctx.Err() != nil {
			return d
		}
	}
}

// back reports whether the memory of removed boxes counts as given back:
// at least MemoryBackVsCrun of it available again (crun's idle containers
// give back about all of theirs) and no memory cgroup left.
func back(returned float64, memcgsLeft int) bool {
	return returned >= MemoryBackVsCrun && memcgsLeft <= 0
}

// waitAgentsExit waits until the boxes in set have one process each (their
// corral-init) or max passed, and returns how long it waited.
func waitAgentsExit(ctx context.Context, set map[string]bool, boxes int, max time.Duration) (time.Duration, bool) {
	start := time.Now()
	for {
		if boxProcesses(set).Processes <= boxes {
			return time.Since(start), true
		}
		if time.Since(start) >= max || ctx.Err() != nil {
			return time.Since(start), false
		}
		sleep(ctx, time.Second)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// density measures Corral's idle sandboxes and each density peer's idle
// containers.
func (r *run) density(ctx context.Context) {
	n := r.cfg.DensityBoxes
	r.progress("corral density: starting %d idle boxes (memory limit %d MiB)", n, r.cfg.DensityMemory>>20)
	boxes := r.corralBoxes("corral", r.cfg.Client, r.createRequest())
	boxes.whileIdle = r.scrapeMetrics
	if r.cfg.DaemonSocket != "" {
		boxes.daemonPID = listenerPID(r.cfg.DaemonSocket)
	}
	r.rep.Density = append(r.rep.Density, r.measureDensity(ctx, boxes, n))

	for _, name := range r.cfg.DensityPeers {
		r.progress("%s density: starting %d idle containers", name, n)
		var d Density
		switch name {
		case "crun", "runc":
			b, cleanup, err := r.idleOCI(ctx, name)
			if err != nil {
				d = Density{Name: name, Boxes: n, Err: err.Error()}
				break
			}
			d = r.measureDensity(ctx, b, n)
			cleanup()
		default:
			d = Density{Name: name, Boxes: n, Err: fmt.Sprintf("unknown density peer %q (want crun or runc)", name)}
		}
		r.rep.Density = append(r.rep.Density, d)
	}
}

// corralBoxes are idle boxes from req of the daemon c talks to, named name
// in the report: with the density memory limit, each asked to exec true,
// their agents exiting when idle.
func (r *run) corralBoxes(name string, c *client.Client, req rest.CreateSandboxRequest) densityBoxes {
	req.Resources.MemoryBytes = r.cfg.DensityMemory
	return densityBoxes{
		name: name,
		start: func(ctx context.Context, _ int) (string, error) {
			sb, err := c.CreateSandbox(ctx, req)
			if err != nil {
				return "", err
			}
			return sb.ID, nil
		},
		check: func(ctx context.Context, id string) error {
			return execTrue(ctx, c.Sandbox(id))
		},
		remove: func(ctx context.Context, id string) error {
			return c.RemoveSandbox(ctx, id, client.RemoveOptions{Force: true})
		},
		agentsExit: true,
	}
}

// idleOCI runs idle containers (busybox sleep) with "<runtime> run -d" on
// the runtime's default spec with the density memory limit.
func (r *run) idleOCI(ctx context.Context, name string) (densityBoxes, func(), error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return densityBoxes{}, nil, notInstalled(name, name)
	}
	ns, err := r.namespace()
	if err != nil {
		return densityBoxes{}, nil, err
	}
	bundle, err := r.bundle(ctx, name, bin, name+"-idle-bundle", []string{"/bin/sleep", "1000000000"}, r.cfg.DensityMemory)
	if err != nil {
		return densityBoxes{}, nil, err
	}
	state := filepath.Join(r.cfg.WorkDir, name+"-idle-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return densityBoxes{}, nil, err
	}
	var mu sync.Mutex
	started := map[string]bool{} // guarded by mu
	remove := func(ctx context.Context, id string) error {
		_, err := ns.run(exec.CommandContext(ctx, bin, "--root", state, "delete", "--force", id))
		if err == nil {
			mu.Lock()
			delete(started, id)
			mu.Unlock()
		}
		return err
	}
	b := densityBoxes{
		name: name,
		start: func(ctx context.Context, i int) (string, error) {
			id := fmt.Sprintf("bench-idle-%s-%d-%d", name, os.Getpid(), i)
			mu.Lock()
			started[id] = true
			mu.Unlock()
			// A detached container keeps its runtime's stdio: never a pipe
			// (Wait would wait for the container), a file.
			out, err := os.CreateTemp(r.cfg.WorkDir, "idle-out-")
			if err != nil {
				return "", err
			}
			defer os.Remove(out.Name())
			defer out.Close()
			cmd := exec.CommandContext(ctx, bin, "--root", state, "run", "--detach", "--bundle", bundle, id)
			cmd.Stdout, cmd.Stderr = out, out
			if err := ns.start(cmd); err != nil {
				return "", err
			}
			if err := cmd.Wait(); err != nil {
				msg, _ := os.ReadFile(out.Name())
				return "", fmt.Errorf("%s run %s: %w: %s", name, id, err, bytes.TrimSpace(msg))
			}
			return id, nil
		},
		remove: remove,
	}
	cleanup := func() {
		mu.Lock()
		left := slices.Collect(maps.Keys(started))
		mu.Unlock()
		for _, id := range left {
			_ = remove(context.Background(), id)
		}
	}
	return b, cleanup, nil
}
