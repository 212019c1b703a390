// Package metrics serves the daemon's Prometheus metrics (GET /metrics):
// sandboxes by state and runtime, the latency of creates, execs, forks
// and resumes, warm pool levels, the egress proxy's bytes and verdicts,
// alerts, and, when enabled, per-sandbox gauges. A scrape reads counters
// and the stats sampler's last values only: it never walks cgroups, so it
// stays fast with thousands of sandboxes. docs/observability.md lists the
// metrics.
package metrics

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/stats"
)

// Operations whose latency is measured (the op label).
const (
	OpCreate = "create"
	OpExec   = "exec"
	OpFork   = "fork"
	OpResume = "resume"
)

// States are the sandbox states always reported (0 when none is in
// them), so that a series does not vanish.
var States = []sandbox.RecordState{
	sandbox.StateCreating, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateSuspending,
	sandbox.StateSuspended, sandbox.StateResuming, sandbox.StateDeleting, sandbox.StateExited, sandbox.StateError,
}

// Box is what the metrics need of one sandbox.
type Box struct {
	ID, Name, Runtime string
	State             sandbox.RecordState
}

// Config wires Metrics. Every source may be nil (its metrics are left
// out).
type Config struct {
	// Runtimes are the configured runtimes, always reported by state.
	Runtimes []string
	// Boxes returns the sandboxes (warm pools' left out).
	Boxes func() []Box
	// Pools returns the warm pools.
	Pools func() []sandbox.PoolStatus
	// Egress returns the egress proxy's totals.
	Egress func() network.Counters
	// Sampler holds the boxes' last samples.
	Sampler *stats.Sampler
	// PerSandbox adds gauges for every sandbox (label sandbox): off by
	// default, as it makes a series per box and resource.
	PerSandbox bool
	// Webhook reports the alert webhook's counts.
	Webhook func() (sent, failed, dropped uint64)
}

// Metrics is the daemon's registry. Observe and Alert are safe for
// concurrent use.
type Metrics struct {
	cfg      *Config
	reg      *prometheus.Registry
	ops      *prometheus.HistogramVec
	opErrors *prometheus.CounterVec
	alerts   *prometheus.CounterVec
	restarts prometheus.Counter
}

// latencyBuckets span an exec (a millisecond) to a slow create or a
// resume from disk (tens of seconds).
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// New returns the registry for cfg.
func New(cfg Config) *Metrics {
	m := &Metrics{cfg: &cfg, reg: prometheus.NewRegistry()}
	m.ops = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "corral_operation_duration_seconds",
		Help:    "Latency of sandbox operations that succeeded: create (a warm pool's hand-out included), fork, resume (auto-resume included) and exec (until the command started).",
		Buckets: latencyBuckets,
	}, []string{"op"})
	m.opErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_operation_errors_total",
		Help: "Sandbox operations that failed, by operation.",
	}, []string{"op"})
	m.alerts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "corral_alerts_total",
		Help: "Alerts raised, by kind (memory, cpu, disk, pids, oom, disk_full, egress_denied, agent_restart) and level (warning, critical).",
	}, []string{"kind", "level"})
	m.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "corral_agent_restarts_total",
		Help: "Agents of sandboxes that failed (crashed, were killed or exited with an error) and were replaced by corral-init, as the next agent reported them.",
	})
	for _, op := range []string{OpCreate, OpExec, OpFork, OpResume} {
		m.ops.WithLabelValues(op)
		m.opErrors.WithLabelValues(op)
	}
	m.reg.MustRegister(m.ops, m.opErrors, m.alerts, m.restarts, &collector{cfg: m.cfg},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// SetSampler sets Config.Sampler and Config.Webhook, which are made after
// the registry; call it before Handler serves.
func (m *Metrics) SetSampler(s *stats.Sampler, webhook func() (sent, failed, dropped uint64)) {
	m.cfg.Sampler, m.cfg.Webhook = s, webhook
}

// Observe records one operation that took d and ended with err.
func (m *Metrics) Observe(op string, d time.Duration, err error) {
	if err != nil {
		m.opErrors.WithLabelValues(op).Inc()
		return
	}
	m.ops.WithLabelValues(op).Observe(d.Seconds())
}

// Alert counts an alert (an alerts.Sink).
func (m *Metrics) Alert(_ context.Context, a alerts.Alert) {
	m.alerts.WithLabelValues(string(a.Kind), a.Level).Inc()
}

// AgentRestarts counts n failed and replaced agents.
func (m *Metrics) AgentRestarts(n uint64) { m.restarts.Add(float64(n)) }

// Handler serves the metrics in Prometheus' text format (or OpenMetrics
// when asked).
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{EnableOpenMetrics: true})
}

// Registry is the underlying registry (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// collector makes the metrics read from the daemon's state at each
// scrape.
type collector struct{ cfg *Config }

var (
	descSandboxes   = prometheus.NewDesc("corral_sandboxes", "Sandboxes by state and runtime (warm pools' left out).", []string{"state", "runtime"}, nil)
	descPoolReady   = prometheus.NewDesc("corral_pool_ready", "Ready sandboxes of each warm pool.", []string{"pool", "image"}, nil)
	descPoolSize    = prometheus.NewDesc("corral_pool_size", "Target size of each warm pool.", []string{"pool", "image"}, nil)
	descEgressBytes = prometheus.NewDesc("corral_egress_bytes_total", "Bytes the egress proxy received from (in) and sent to (out) the internet for sandboxes.", []string{"direction"}, nil)
	descEgressConns = prometheus.NewDesc("corral_egress_connections_total", "Egress connections and DNS queries by verdict (allow, deny, error).", []string{"verdict"}, nil)
	descWebhook     = prometheus.NewDesc("corral_alert_webhook_total", "Alerts posted to the webhook, by result (sent, failed, dropped: the queue was full).", []string{"result"}, nil)
	descSampled     = prometheus.NewDesc("corral_stats_sandboxes", "Sandboxes with a resource history in the stats sampler.", nil, nil)
	descRound       = prometheus.NewDesc("corral_stats_round_seconds", "How long the stats sampler's last round over every sandbox took.", nil, nil)

	boxLabels      = []string{"sandbox", "name"}
	descBoxCPU     = prometheus.NewDesc("corral_sandbox_cpu_seconds_total", "CPU time the sandbox used.", boxLabels, nil)
	descBoxCPULim  = prometheus.NewDesc("corral_sandbox_cpu_limit_cores", "CPU quota of the sandbox in cores.", boxLabels, nil)
	descBoxMem     = prometheus.NewDesc("corral_sandbox_memory_bytes", "Working set of the sandbox (usage less the inactive page cache).", boxLabels, nil)
	descBoxMemLim  = prometheus.NewDesc("corral_sandbox_memory_limit_bytes", "Memory limit of the sandbox.", boxLabels, nil)
	descBoxDisk    = prometheus.NewDesc("corral_sandbox_disk_bytes", "Bytes used on the sandbox's writable disk.", boxLabels, nil)
	descBoxDiskLim = prometheus.NewDesc("corral_sandbox_disk_limit_bytes", "Size of the sandbox's writable disk.", boxLabels, nil)
	descBoxPids    = prometheus.NewDesc("corral_sandbox_pids", "Tasks (processes and threads) in the sandbox.", boxLabels, nil)
	descBoxPidsLim = prometheus.NewDesc("corral_sandbox_pids_limit", "Task limit of the sandbox.", boxLabels, nil)
	descBoxOOM     = prometheus.NewDesc("corral_sandbox_oom_kills_total", "Processes the OOM killer ended in the sandbox.", boxLabels, nil)
	descBoxNet     = prometheus.NewDesc("corral_sandbox_network_bytes_total", "Bytes through the egress proxy for the sandbox since its network was attached, by direction.", append(slices.Clone(boxLabels), "direction"), nil)
)

// Describe sends nothing: the collector is unchecked, as its per-sandbox
// series come and go.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	cfg := *c.cfg
	var names map[string]string
	if cfg.Boxes != nil {
		type key struct{ state, runtime string }
		counts := map[key]int{}
		for _, rt := range cfg.Runtimes {
			for _, st := range States {
				counts[key{string(st), rt}] = 0
			}
		}
		boxes := cfg.Boxes()
		if cfg.PerSandbox {
			names = make(map[string]string, len(boxes))
		}
		for _, b := range boxes {
			counts[key{string(b.State), b.Runtime}]++
			if names != nil {
				names[b.ID] = b.Name
			}
		}
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), k.state, k.runtime)
		}
	}
	if cfg.Pools != nil {
		for _, p := range cfg.Pools() {
			ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(p.Ready), p.Key, p.Image)
			ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(p.Size), p.Key, p.Image)
		}
	}
	if cfg.Egress != nil {
		e := cfg.Egress()
		ch <- prometheus.MustNewConstMetric(descEgressBytes, prometheus.CounterValue, float64(e.BytesIn), "in")
		ch <- prometheus.MustNewConstMetric(descEgressBytes, prometheus.CounterValue, float64(e.BytesOut), "out")
		ch <- prometheus.MustNewConstMetric(descEgressConns, prometheus.CounterValue, float64(e.Allowed), network.Allow)
		ch <- prometheus.MustNewConstMetric(descEgressConns, prometheus.CounterValue, float64(e.Denied), network.Deny)
		ch <- prometheus.MustNewConstMetric(descEgressConns, prometheus.CounterValue, float64(e.Errors), "error")
	}
	if cfg.Webhook != nil {
		sent, failed, dropped := cfg.Webhook()
		ch <- prometheus.MustNewConstMetric(descWebhook, prometheus.CounterValue, float64(sent), "sent")
		ch <- prometheus.MustNewConstMetric(descWebhook, prometheus.CounterValue, float64(failed), "failed")
		ch <- prometheus.MustNewConstMetric(descWebhook, prometheus.CounterValue, float64(dropped), "dropped")
	}
	if s := cfg.Sampler; s != nil {
		n, round := s.Status()
		ch <- prometheus.MustNewConstMetric(descSampled, prometheus.GaugeValue, float64(n))
		ch <- prometheus.MustNewConstMetric(descRound, prometheus.GaugeValue, round.Seconds())
		if cfg.PerSandbox {
			s.Each(func(id string, smp stats.Sample) {
				perBox(ch, smp, id, names[id])
			})
		}
	}
}

// perBox sends the gauges of one sandbox's last sample.
func perBox(ch chan<- prometheus.Metric, s stats.Sample, id, name string) {
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, id, name)
	}
	c := func(d *prometheus.Desc, v float64, extra ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, append([]string{id, name}, extra...)...)
	}
	c(descBoxCPU, float64(s.CPUNanos)/1e9)
	g(descBoxCPULim, s.CPULimit)
	g(descBoxMem, float64(s.MemoryBytes))
	g(descBoxMemLim, float64(s.MemoryLimitBytes))
	g(descBoxDisk, float64(s.DiskBytes))
	g(descBoxDiskLim, float64(s.DiskLimitBytes))
	g(descBoxPids, float64(s.Pids))
	g(descBoxPidsLim, float64(s.PidsLimit))
	c(descBoxOOM, float64(s.OOMKills))
	c(descBoxNet, float64(s.NetInBytes), "in")
	c(descBoxNet, float64(s.NetOutBytes), "out")
}
