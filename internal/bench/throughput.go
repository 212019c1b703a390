package bench

import (
	"context"
	"fmt"
	"os"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/client"
)

// NameThroughput is the name of Corral's throughput series.
const NameThroughput = "corral create+rm"

// Throughput is one series of lifecycles done by Clients concurrent
// clients: Corral's create+remove through the API, or a peer's run of true.
type Throughput struct {
	Name    string `json:"name"`
	Clients int    `json:"clients"`
	// Ops is how many lifecycles completed in Elapsed.
	Ops       int           `json:"ops"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	PerSecond float64       `json:"per_second"`
	// Median and P90 are the latencies of one lifecycle under this load.
	Median time.Duration `json:"median_op_ns"`
	P90    time.Duration `json:"p90_op_ns"`
	// CPUPerOp is the CPU time the whole host spent (/proc/stat, all
	// CPUs, not idle) per completed lifecycle: what bounds the rate once
	// every CPU is busy. 0 when /proc/stat could not be read.
	CPUPerOp time.Duration `json:"cpu_per_op_ns"`
	Err      string        `json:"error,omitempty"`
}

func runtimeNumCPU() int { return goruntime.NumCPU() }

// perSecond is ops per second of elapsed time (0 for no time).
func perSecond(ops int, elapsed time.Duration) float64 {
	if elapsed <= 0 {
		return 0
	}
	return float64(ops) / elapsed.Seconds()
}

func throughputOf(name string, clients int, s []time.Duration, elapsed time.Duration, err error) Throughput {
	t := Throughput{Name: name, Clients: clients, Ops: len(s), Elapsed: elapsed, PerSecond: perSecond(len(s), elapsed)}
	t.Median, t.P90 = medianP90(s)
	if err != nil {
		t.Err = err.Error()
	}
	return t
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux
// architecture Corral runs on).
const userHZ = 100

// parseCPUBusy returns the busy time of all CPUs from /proc/stat's first
// line: user, nice, system, irq, softirq and steal (not idle, iowait or
// the guest times, which user and nice already include).
func parseCPUBusy(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system [idle iowait] irq softirq steal
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		busy += v
	}
	return time.Duration(busy) * time.Second / userHZ, nil
}

func cpuBusy() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseCPUBusy(string(b))
}

// timedSeries runs op ops times with clients clients and returns the
// series with the host CPU time spent per completed op.
func timedSeries(ctx context.Context, name string, clients, ops int, op func(context.Context, int) error) Throughput {
	cpu0, cpuErr := cpuBusy()
	s, el, err := parallel(ctx, clients, ops, op)
	t := throughputOf(name, clients, s, el, err)
	if cpu1, err := cpuBusy(); err == nil && cpuErr == nil && len(s) > 0 {
		t.CPUPerOp = (cpu1 - cpu0) / time.Duration(len(s))
	}
	return t
}

// parallel runs op n times with clients concurrent callers, each taking the
// next index, and returns the duration of each completed call and the wall
// time of the whole. The first error stops the callers and is returned.
func parallel(ctx context.Context, clients, n int, op func(context.Context, int) error) ([]time.Duration, time.Duration, error) {
	if n <= 0 {
		return nil, 0, nil
	}
	clients = max(1, min(clients, n))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next     atomic.Int64
		mu       sync.Mutex
		samples  []time.Duration // guarded by mu
		firstErr error           // guarded by mu
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				t0 := time.Now()
				err := op(ctx, i)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				samples = append(samples, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return samples, time.Since(start), firstErr
}

// throughput measures Corral's create+remove and each peer's lifecycle
// with every number of clients.
func (r *run) throughput(ctx context.Context) {
	c := r.cfg.Client
	corralOp := func(ctx context.Context, _ int) error {
		sb, err := c.CreateSandbox(ctx, r.createRequest())
		if err != nil {
			return err
		}
		return c.RemoveSandbox(ctx, sb.ID, client.RemoveOptions{Force: true})
	}
	for _, n := range r.cfg.Clients {
		r.progress("%s with %d clients x%d", NameThroughput, n, r.cfg.ThroughputOps)
		// Warm up with one round of the clients, untimed.
		_, _, _ = parallel(ctx, n, n, corralOp)
		r.rep.Throughput = append(r.rep.Throughput, timedSeries(ctx, NameThroughput, n, r.cfg.ThroughputOps, corralOp))
	}
	for _, name := range r.cfg.Peers {
		p, err := r.peer(ctx, name)
		for _, n := range r.cfg.Clients {
			if err != nil {
				r.rep.Throughput = append(r.rep.Throughput, throughputOf(PeerName(name), n, nil, 0, err))
				continue
			}
			r.progress("%s with %d clients x%d", PeerName(name), n, r.cfg.ThroughputOps)
			_, _, _ = parallel(ctx, n, n, p.run)
			r.rep.Throughput = append(r.rep.Throughput, timedSeries(ctx, PeerName(name), n, r.cfg.ThroughputOps, p.run))
		}
	}
}

// series returns the throughput series named name with clients clients,
// or nil.
func (rep *Report) series(name string, clients int) *Throughput {
	for i := range rep.Throughput {
		if t := &rep.Throughput[i]; t.Name == name && t.Clients == clients {
			return t
		}
	}
	return nil
}
