// Package alerts turns the samples of package stats into alerts: memory,
// CPU, disk and pids at 80% and 90% of a sandbox's limits (when the use
// crosses the level going up, re-armed only once it falls Hysteresis
// points below, so that a value hovering at the level does not flap), an
// OOM kill, a full disk, and egress denials (Denials, rate-limited per
// box). Every alert goes to the Sinks: a log line, a
// webhook, the /metrics counters, and later the daemon's event funnel.
package alerts

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/stats"
	"github.com/corral-sandbox/corral/internal/units"
)

// Kind is what an alert is about.
type Kind string

// Kinds of alerts.
const (
	Memory   Kind = "memory"
	CPU      Kind = "cpu"
	Disk     Kind = "disk"
	Pids     Kind = "pids"
	OOM      Kind = "oom"
	DiskFull Kind = "disk_full"
	// AgentRestart: a box's agent failed (it crashed, was killed or
	// exited with an error) and corral-init replaced it; the daemon
	// raises it, Value is how many failed since the box started.
	AgentRestart Kind = "agent_restart"
)

// Levels of alerts.
const (
	Warning  = "warning"  // 80% of a limit
	Critical = "critical" // 90% of a limit, an OOM kill, a full disk
)

// Thresholds are the percentages of a limit that raise an alert: the first
// is a warning, the second critical.
var Thresholds = [2]float64{80, 90}

// Hysteresis is how many percentage points below a threshold the use must
// fall before crossing it again raises a new alert.
const Hysteresis = 5

// FullFreeBytes is the free space below which a disk is full: ext4 fails
// writes with a few blocks left (its metadata needs some).
const FullFreeBytes = 1 << 20

// Alert is one alert, as logged and as the webhook's JSON body.
type Alert struct {
	// Box is the sandbox's ID.
	Box   string `json:"box"`
	Kind  Kind   `json:"kind"`
	Level string `json:"level"`
	// Threshold is the percentage of the limit that was crossed (0 for
	// oom and disk_full).
	Threshold float64 `json:"threshold,omitempty"`
	// Value and Limit are bytes (memory, disk, disk_full), cores (cpu) or
	// tasks (pids); for oom, Value is how many processes the OOM killer
	// has ended in the box and Limit its memory limit in bytes.
	Value   float64   `json:"value"`
	Limit   float64   `json:"limit"`
	Time    time.Time `json:"time"`
	Message string    `json:"message"`
}

// Sink receives alerts. Alert is called from the sampler's goroutine: it
// must not block (queue, or drop and count).
type Sink interface {
	Alert(ctx context.Context, a Alert)
}

// SinkFunc adapts a function to Sink.
type SinkFunc func(ctx context.Context, a Alert)

// Alert calls f.
func (f SinkFunc) Alert(ctx context.Context, a Alert) { f(ctx, a) }

// Evaluator watches the samples of every box (a stats.Watcher) and sends
// an alert to its sinks on each crossing.
type Evaluator struct {
	ctx   context.Context
	sinks []Sink

	mu    sync.Mutex
	boxes map[string]*boxState // guarded by mu
}

// boxState is what an Evaluator remembers of one box.
type boxState struct {
	// held is the highest threshold index+1 alerted and not yet re-armed,
	// by kind (0: none).
	held map[Kind]int
	full bool
}

// NewEvaluator returns an Evaluator that sends to sinks; ctx carries the
// logger of the sinks.
func NewEvaluator(ctx context.Context, sinks ...Sink) *Evaluator {
	return &Evaluator{ctx: ctx, sinks: sinks, boxes: map[string]*boxState{}}
}

// Forget drops what is known of box id (it is gone).
func (e *Evaluator) Forget(id string) {
	e.mu.Lock()
	delete(e.boxes, id)
	e.mu.Unlock()
}

// Observe evaluates box id's new sample cur (prev is the one before, nil
// for its first).
func (e *Evaluator) Observe(id string, prev *stats.Sample, cur stats.Sample) {
	e.mu.Lock()
	st := e.boxes[id]
	if st == nil {
		st = &boxState{held: map[Kind]int{}}
		e.boxes[id] = st
	}
	var out []Alert
	at := cur.When().UTC()
	level := func(k Kind, value, limit float64, what func(v, l float64) string) {
		if limit <= 0 {
			return
		}
		pct := value / limit * 100
		held := st.held[k]
		// Re-arm the levels the use has fallen well below.
		for held > 0 && pct < Thresholds[held-1]-Hysteresis {
			held--
		}
		crossed := 0
		for i, t := range Thresholds {
			if pct >= t {
				crossed = i + 1
			}
		}
		if crossed > held {
			lvl := Warning
			if crossed == len(Thresholds) {
				lvl = Critical
			}
			t := Thresholds[crossed-1]
			out = append(out, Alert{Box: id, Kind: k, Level: lvl, Threshold: t, Value: value, Limit: limit, Time: at,
				Message: fmt.Sprintf("%s at %.0f%% of its limit (%s of %s)", k, pct, what(value, limit), what(limit, limit))})
			held = crossed
		}
		st.held[k] = held
	}
	bytes := func(v, _ float64) string { return units.FormatBytes(int64(v)) }
	count := func(v, _ float64) string { return fmt.Sprintf("%.0f", v) }
	cores := func(v, _ float64) string { return fmt.Sprintf("%.2f cores", v) }
	level(Memory, float64(cur.MemoryBytes), float64(cur.MemoryLimitBytes), bytes)
	if prev != nil { // the first sample has no CPU rate
		level(CPU, cur.CPUPercent/100, cur.CPULimit, cores)
	}
	level(Disk, float64(cur.DiskBytes), float64(cur.DiskLimitBytes), bytes)
	level(Pids, float64(cur.Pids), float64(cur.PidsLimit), count)

	if prev != nil && cur.OOMKills > prev.OOMKills {
		out = append(out, Alert{Box: id, Kind: OOM, Level: Critical, Value: float64(cur.OOMKills), Limit: float64(cur.MemoryLimitBytes), Time: at,
			Message: fmt.Sprintf("the OOM killer ended %d process(es) at the memory limit of %s", cur.OOMKills-prev.OOMKills, units.FormatBytes(int64(cur.MemoryLimitBytes)))})
	}
	if l := cur.DiskLimitBytes; l > 0 {
		free := l - min(cur.DiskBytes, l)
		switch {
		case !st.full && free < FullFreeBytes:
			st.full = true
			out = append(out, Alert{Box: id, Kind: DiskFull, Level: Critical, Value: float64(cur.DiskBytes), Limit: float64(l), Time: at,
				Message: fmt.Sprintf("the disk is full (%s of %s used): writes fail with ENOSPC", units.FormatBytes(int64(cur.DiskBytes)), units.FormatBytes(int64(l)))})
		case st.full && float64(cur.DiskBytes) < float64(l)*(Thresholds[len(Thresholds)-1]-Hysteresis)/100:
			st.full = false
		}
	}
	e.mu.Unlock()
	for _, a := range out {
		for _, s := range e.sinks {
			s.Alert(e.ctx, a)
		}
	}
}
