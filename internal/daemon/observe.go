package daemon

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/stats"
)

// observability is the daemon's resource sampler, alerts and metrics.
type observability struct {
	sampler *stats.Sampler
	metrics *metrics.Metrics
	// denials raises the egress_denied alerts; set by start.
	denials atomic.Pointer[alerts.Denials]
	// sinks are the alert sinks; set by start.
	sinks atomic.Pointer[[]alerts.Sink]
	// watchers are more stats watchers, given before start.
	watchers []stats.Watcher
}

// cgroupRuntime is a runtime whose boxes have a cgroup each and a disk
// that can be read cheaply (*oci.Runtime).
type cgroupRuntime interface {
	CgroupPath(id string) string
	DiskUsage(id string) (used, total uint64, err error)
}

// newObservability makes the metrics registry (before the Manager, which
// reports its latencies to it; m is read once the Manager exists).
func newObservability(cfg Config, netsvc *network.Service, m func() *sandbox.Manager) *observability {
	o := &observability{}
	if n, err := cfg.normalize(); err == nil { // Validate refused the rest
		cfg = n
	}
	runtimes := slices.Clone(cfg.Runtime.Container.Runtimes)
	if cfg.Runtime.GVisor.Enabled {
		runtimes = append(runtimes, RunscName)
	}
	o.metrics = metrics.New(metrics.Config{
		Runtimes: runtimes,
		Boxes: func() []metrics.Box {
			recs, err := m().List(context.Background())
			if err != nil {
				return nil
			}
			out := make([]metrics.Box, len(recs))
			for i, r := range recs {
				out[i] = metrics.Box{ID: r.ID, Name: r.Name, Runtime: r.Runtime, State: r.State}
			}
			return out
		},
		Pools:      func() []sandbox.PoolStatus { return m().Pools() },
		Egress:     netsvc.Counters,
		PerSandbox: cfg.Metrics.PerSandbox,
	})
	return o
}

// start makes the sampler and the alert sinks and starts sampling; the
// returned function stops it.
func (o *observability) start(ctx context.Context, cfg Config, m *sandbox.Manager, runtimes map[string]sandbox.Runtime, netsvc *network.Service, more ...alerts.Sink) (func() error, error) {
	sinks := append([]alerts.Sink{alerts.LogSink, o.metrics}, more...)
	var hook *alerts.Webhook
	if cfg.Alerts.Webhook != "" {
		var err error
		if hook, err = alerts.NewWebhook(ctx, alerts.WebhookConfig{URL: cfg.Alerts.Webhook, Timeout: cfg.Alerts.webhookTimeout()}); err != nil {
			return nil, err
		}
		sinks = append(sinks, hook)
	}
	denials := alerts.NewDenials(ctx, alerts.DenialsConfig{}, sinks...)
	o.denials.Store(denials)
	o.sinks.Store(&sinks)
	o.sampler = stats.New(stats.Config{
		Interval: cfg.Metrics.interval(),
		History:  cfg.Metrics.History,
		Targets:  func(ctx context.Context) ([]stats.Target, error) { return targets(ctx, m, runtimes) },
		Net: func(id string) (uint64, uint64) {
			in, out := netsvc.Traffic(id)
			return uint64(in), uint64(out)
		},
		Watchers: append([]stats.Watcher{alerts.NewEvaluator(ctx, sinks...), denials}, o.watchers...),
	})
	var webhook func() (uint64, uint64, uint64)
	if hook != nil {
		webhook = hook.Counts
	}
	o.metrics.SetSampler(o.sampler, webhook)
	log.G(ctx).Info("stats sampler", "interval", o.sampler.Interval(), "history", cfg.Metrics.History,
		"max_bytes_per_sandbox", cfg.Metrics.History*stats.SampleSize, "webhook", cfg.Alerts.Webhook != "")
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		o.sampler.Run(sctx)
	}()
	return func() error {
		cancel()
		<-done
		if hook != nil {
			return hook.Close()
		}
		return nil
	}, nil
}

// targets lists the sandboxes for the sampler: running and paused ones
// are sampled, the others keep their history until they are removed.
func targets(ctx context.Context, m *sandbox.Manager, runtimes map[string]sandbox.Runtime) ([]stats.Target, error) {
	recs, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]stats.Target, 0, len(recs))
	for _, r := range recs {
		t := stats.Target{ID: r.ID, CPULimit: r.Resources.CPUs,
			Sample: r.State == sandbox.StateRunning || r.State == sandbox.StatePaused}
		if rt, ok := runtimes[r.Runtime].(cgroupRuntime); ok && t.Sample {
			id := r.ID
			t.Cgroup = rt.CgroupPath(id)
			t.Disk = func() (uint64, uint64, error) { return rt.DiskUsage(id) }
		} else {
			t.Sample = false
		}
		out = append(out, t)
	}
	return out, nil
}

// deny raises the egress_denied alert of a denial (rate-limited per box),
// once the alerts are wired.
func (o *observability) deny(ev network.Event) {
	if o == nil {
		return
	}
	if den := o.denials.Load(); den != nil {
		den.Deny(ev.Sandbox, describeDenial(ev), printable(ev.Reason))
	}
}

// describeDenial says what was denied: "tcp 203.0.113.7:443 (pid 14
// curl)", "dns example.com".
func describeDenial(ev network.Event) string {
	what := ev.Kind
	port := strconv.Itoa(int(ev.Port))
	switch {
	case ev.Kind == "dns":
		what += " " + ev.Host
	case ev.Host != "":
		what += " " + net.JoinHostPort(ev.Host, port)
	case ev.Addr != "":
		what += " " + net.JoinHostPort(ev.Addr, port)
	}
	if p := ev.Process; p != nil {
		what += fmt.Sprintf(" (pid %d %s)", p.Pid, p.Command)
	}
	return printable(what)
}

// printable keeps a box-written string (a name it asked for) safe to log
// and print: control characters become '?' and it is cut at 256 bytes.
func printable(s string) string {
	if len(s) > 256 {
		s = s[:256]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// agentRestarts counts added failed agents of box id (total since the box
// started, the last ended as failure) and raises an agent_restart alert.
func (o *observability) agentRestarts(ctx context.Context, id string, added, total uint64, failure string) {
	if o == nil {
		return
	}
	o.metrics.AgentRestarts(added)
	sinks := o.sinks.Load()
	if sinks == nil {
		return
	}
	a := alerts.Alert{Box: id, Kind: alerts.AgentRestart, Level: alerts.Warning, Value: float64(total), Time: time.Now().UTC(),
		Message: fmt.Sprintf("the box's agent failed (%s) and was replaced: %d failed since the box started", printable(failure), total)}
	for _, s := range *sinks {
		s.Alert(ctx, a)
	}
}
