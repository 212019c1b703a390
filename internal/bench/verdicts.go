package bench

import (
	"fmt"
	"time"
)

// Targets (issue 27): every verdict is a ratio against a peer measured in
// the same run, never an absolute figure, which moves with the machine and
// with the phase of a shared host.
const (
	// LifecycleVsCrun bounds a cold create -> first exec -> remove (and
	// the same from a warm pool) over a raw `crun run true`.
	LifecycleVsCrun = 1.5
	// PoolExecVsCrun bounds create -> first exec done from a warm pool
	// over a raw `crun run true` (it replaces an absolute target; the
	// run it was derived from is in docs/benchmarks.md).
	PoolExecVsCrun = 0.3
	// ExecVsCrun bounds an exec round trip over a raw `crun run true`
	// (derived as PoolExecVsCrun is).
	ExecVsCrun = 0.3
	// ThroughputVsCrun is the least create+rm rate over raw crun run's,
	// with ThroughputClients clients each.
	ThroughputVsCrun  = 1.0
	ThroughputClients = 4
	// DensityVsCrun bounds the host memory per idle box over an idle crun
	// container's.
	DensityVsCrun = 1.2
	// MemoryBackVsCrun is the least fraction of the memory the idle boxes
	// took that is available again after their removal, over crun's
	// fraction; and no memory cgroup may be left, alive or dying.
	MemoryBackVsCrun = 0.98
	// ForkUnsyncedVsSmall bounds a fork right after ForkUnsyncedBytes were
	// written (not synced) over a fork after 1 MiB.
	ForkUnsyncedVsSmall = 1.2
	// ForkSyncedVsSmall bounds a fork after 1 GiB written and synced over a
	// fork after 1 MiB.
	ForkSyncedVsSmall = 1.2
	// RestoreVsCrun bounds a memory restore (resume of a suspended idle
	// box) over a raw `crun run true`.
	RestoreVsCrun = 5
)

// Verdict is one target checked against a run.
type Verdict struct {
	// Target says what is compared with what, and the bound.
	Target string
	// Ratio is the measured ratio; Met says whether it is within the bound.
	Ratio float64
	Met   bool
	// Detail gives the figures the ratio is made of.
	Detail string
}

func (v Verdict) String() string {
	s := fmt.Sprintf("target %s: %s (%.2fx", v.Target, verdict(v.Met), v.Ratio)
	if v.Detail != "" {
		s += ": " + v.Detail
	}
	return s + ")"
}

// Verdicts checks every target whose series the report has (with no
// error and a median), in the order of issue 27's table.
func Verdicts(rep *Report) []Verdict {
	var vs []Verdict
	atMost := func(target string, a, b float64, limit float64, detail string) {
		if a > 0 && b > 0 {
			r := a / b
			vs = append(vs, Verdict{Target: target, Ratio: r, Met: r <= limit, Detail: detail})
		}
	}
	crun := rep.okResult(PeerName("crun"))
	if crun != nil {
		if life := rep.okResult(NameLifecycle); life != nil {
			atMost(fmt.Sprintf("cold create -> first exec -> rm <= %.1fx raw crun run", LifecycleVsCrun),
				float64(life.Median), float64(crun.Median), LifecycleVsCrun, vsMs(life.Median, crun.Median))
		}
		if pool := rep.okResult(NamePoolLifecycle); pool != nil {
			atMost(fmt.Sprintf("create -> first exec -> rm with a warm pool <= %.1fx raw crun run", LifecycleVsCrun),
				float64(pool.Median), float64(crun.Median), LifecycleVsCrun, vsMs(pool.Median, crun.Median))
		}
		if pe := rep.okResult(NamePoolExec); pe != nil {
			atMost(fmt.Sprintf("create -> first exec done with a warm pool <= %.1fx raw crun run", PoolExecVsCrun),
				float64(pe.Median), float64(crun.Median), PoolExecVsCrun, vsMs(pe.Median, crun.Median))
		}
		if ex := rep.okResult(NameExec); ex != nil {
			atMost(fmt.Sprintf("exec round trip <= %.1fx raw crun run", ExecVsCrun),
				float64(ex.Median), float64(crun.Median), ExecVsCrun, vsMs(ex.Median, crun.Median))
		}
	}
	if c, p := throughputPair(rep, PeerName("crun")); c != nil {
		r := c.PerSecond / p.PerSecond
		vs = append(vs, Verdict{
			Target: fmt.Sprintf("create+rm per second >= %.1fx raw crun run, %d clients", ThroughputVsCrun, c.Clients),
			Ratio:  r, Met: r >= ThroughputVsCrun,
			Detail: fmt.Sprintf("%.1f/s vs %.1f/s", c.PerSecond, p.PerSecond),
		})
	}
	if c, p := rep.density("corral"), rep.density("crun"); c != nil && p != nil {
		atMost(fmt.Sprintf("idle host memory per box <= %.1fx an idle crun container", DensityVsCrun),
			float64(c.PerBox), float64(p.PerBox), DensityVsCrun,
			fmt.Sprintf("%s vs %s, %d and %d boxes", mib(c.PerBox), mib(p.PerBox), c.Running, p.Running))
		if c.Returned > 0 && p.Returned > 0 {
			r := c.Returned / p.Returned
			vs = append(vs, Verdict{
				Target: fmt.Sprintf("memory back after %d idle boxes are removed >= %.2fx crun's, no memory cgroup left", c.Running, MemoryBackVsCrun),
				Ratio:  r, Met: r >= MemoryBackVsCrun && c.MemcgsLeft <= 0,
				Detail: fmt.Sprintf("%.1f%% vs %.1f%%%s, memory cgroups %+d", 100*c.Returned, 100*p.Returned, backIn(c), c.MemcgsLeft),
			})
		}
	}
	small := rep.okResult(ForkName(1 << 20))
	if small != nil {
		for _, r := range rep.Results {
			if n, ok := unsyncedForkBytes(r.Name); ok && r.Err == "" && r.Median > 0 {
				// Every fork of this series follows a fresh write: its
				// median is the fork right after unsynced writes.
				atMost(fmt.Sprintf("fork right after %s written, not synced <= %.1fx a fork after 1 MiB", sizeName(n), ForkUnsyncedVsSmall),
					float64(r.Median), float64(small.Median), ForkUnsyncedVsSmall, vsMs(r.Median, small.Median))
			}
		}
		if big := rep.okResult(ForkName(1 << 30)); big != nil {
			atMost(fmt.Sprintf("fork after 1 GiB written and synced <= %.1fx a fork after 1 MiB", ForkSyncedVsSmall),
				float64(big.Median), float64(small.Median), ForkSyncedVsSmall,
				fmt.Sprintf("%s; the first fork after the write %s vs %s", vsMs(big.Median, small.Median), ms(big.First), ms(small.First)))
		}
	}
	if crun != nil {
		if res := rep.okResult(NameResume); res != nil {
			atMost(fmt.Sprintf("memory restore (resume of a suspended idle box) <= %.0fx raw crun run", float64(RestoreVsCrun)),
				float64(res.Median), float64(crun.Median), RestoreVsCrun, vsMs(res.Median, crun.Median))
		}
	}
	return vs
}

// okResult is the series named name if it has a median and no error, or
// nil.
func (rep *Report) okResult(name string) *Result {
	r := rep.result(name)
	if r == nil || r.Err != "" || r.Median <= 0 {
		return nil
	}
	return r
}

// throughputPair returns Corral's throughput series and peer's with the
// same clients: ThroughputClients if both have it, else the most clients
// both have; nil when there is none.
func throughputPair(rep *Report, peer string) (c, p *Throughput) {
	for i := range rep.Throughput {
		t := &rep.Throughput[i]
		if t.Name != NameThroughput || t.Err != "" || t.PerSecond <= 0 {
			continue
		}
		o := rep.series(peer, t.Clients)
		if o == nil || o.Err != "" || o.PerSecond <= 0 {
			continue
		}
		if c == nil || t.Clients == ThroughputClients || (c.Clients != ThroughputClients && t.Clients > c.Clients) {
			c, p = t, o
		}
	}
	return c, p
}

// density returns the density series named name with boxes running, or
// nil.
func (rep *Report) density(name string) *Density {
	for i := range rep.Density {
		if d := &rep.Density[i]; d.Name == name && d.Running > 0 && d.PerBox > 0 {
			return d
		}
	}
	return nil
}

func backIn(d *Density) string {
	if d.ReturnedIn <= 0 {
		return ""
	}
	return fmt.Sprintf(" %s after the last removal", d.ReturnedIn.Round(time.Second))
}

func vsMs(a, b time.Duration) string { return ms(a) + " vs " + ms(b) }
