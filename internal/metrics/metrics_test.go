package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/stats"
)

// sampled returns a sampler that has sampled n boxes box0..box<n-1> once
// (fake v2 cgroup files).
func sampled(t testing.TB, n int) *stats.Sampler {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{"cgroup.controllers": "memory\n"}
	var targets []stats.Target
	for i := range n {
		id := fmt.Sprintf("box%d", i)
		d := "corral/" + id + "/"
		files[d+"memory.current"] = "1048576\n"
		files[d+"memory.max"] = "2097152\n"
		files[d+"memory.events"] = "oom_kill 2\n"
		files[d+"cpu.stat"] = "usage_usec 3000000\n"
		files[d+"pids.current"] = "4\n"
		files[d+"pids.max"] = "64\n"
		targets = append(targets, stats.Target{ID: id, Sample: true, Cgroup: "/corral/" + id, CPULimit: 1.5,
			Disk: func() (uint64, uint64, error) { return 4096, 8192, nil }})
	}
	for p, v := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := stats.New(stats.Config{CgroupRoot: root,
		Targets: func(context.Context) ([]stats.Target, error) { return targets, nil },
		Net:     func(string) (uint64, uint64) { return 5, 6 }})
	s.Round(context.Background())
	return s
}

func scrape(t testing.TB, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics = %d %s", rec.Code, rec.Body)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func testConfig(s *stats.Sampler, perBox bool) Config {
	return Config{
		Runtimes: []string{"crun", "runc"},
		Boxes: func() []Box {
			return []Box{{ID: "box0", Name: "web", Runtime: "crun", State: sandbox.StateRunning},
				{ID: "box1", Runtime: "crun", State: sandbox.StateRunning}, {ID: "x", Runtime: "runc", State: sandbox.StatePaused}}
		},
		Pools: func() []sandbox.PoolStatus {
			return []sandbox.PoolStatus{{Key: "pool-1", PoolSpec: sandbox.PoolSpec{Image: "busybox", Size: 4}, Ready: 3}}
		},
		Egress:     func() network.Counters { return network.Counters{BytesIn: 100, BytesOut: 50, Allowed: 7, Denied: 2} },
		Webhook:    func() (uint64, uint64, uint64) { return 1, 2, 3 },
		Sampler:    s,
		PerSandbox: perBox,
	}
}

func TestHandler(t *testing.T) {
	m := New(testConfig(sampled(t, 2), false))
	m.Observe(OpCreate, 30*time.Millisecond, nil)
	m.Observe(OpExec, time.Millisecond, nil)
	m.Observe(OpFork, time.Second, errors.New("no"))
	m.Alert(context.Background(), alerts.Alert{Kind: alerts.Memory, Level: alerts.Warning})
	m.AgentRestarts(2)
	m.AgentRestarts(1)
	out := scrape(t, m)
	for _, want := range []string{
		`corral_sandboxes{runtime="crun",state="running"} 2`,
		`corral_sandboxes{runtime="runc",state="paused"} 1`,
		`corral_sandboxes{runtime="runc",state="suspended"} 0`,
		`corral_pool_ready{image="busybox",pool="pool-1"} 3`,
		`corral_pool_size{image="busybox",pool="pool-1"} 4`,
		`corral_egress_bytes_total{direction="in"} 100`,
		`corral_egress_bytes_total{direction="out"} 50`,
		`corral_egress_connections_total{verdict="deny"} 2`,
		`corral_egress_connections_total{verdict="allow"} 7`,
		`corral_alert_webhook_total{result="dropped"} 3`,
		`corral_operation_duration_seconds_count{op="create"} 1`,
		`corral_operation_duration_seconds_bucket{op="create",le="0.05"} 1`,
		`corral_operation_duration_seconds_count{op="exec"} 1`,
		`corral_operation_duration_seconds_count{op="resume"} 0`,
		`corral_operation_errors_total{op="fork"} 1`,
		`corral_alerts_total{kind="memory",level="warning"} 1`,
		`corral_stats_sandboxes 2`,
		`corral_agent_restarts_total 3`,
		"go_goroutines ",
	} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if strings.Contains(out, "corral_sandbox_memory_bytes") {
		t.Error("/metrics has per-sandbox gauges while they are off")
	}
}

func TestHandlerPerSandbox(t *testing.T) {
	out := scrape(t, New(testConfig(sampled(t, 2), true)))
	for _, want := range []string{
		`corral_sandbox_memory_bytes{name="web",sandbox="box0"} 1.048576e+06`,
		`corral_sandbox_memory_limit_bytes{name="",sandbox="box1"} 2.097152e+06`,
		`corral_sandbox_cpu_seconds_total{name="web",sandbox="box0"} 3`,
		`corral_sandbox_cpu_limit_cores{name="web",sandbox="box0"} 1.5`,
		`corral_sandbox_disk_bytes{name="web",sandbox="box0"} 4096`,
		`corral_sandbox_disk_limit_bytes{name="web",sandbox="box0"} 8192`,
		`corral_sandbox_pids{name="web",sandbox="box0"} 4`,
		`corral_sandbox_pids_limit{name="web",sandbox="box0"} 64`,
		`corral_sandbox_oom_kills_total{name="web",sandbox="box0"} 2`,
		`corral_sandbox_network_bytes_total{direction="in",name="web",sandbox="box0"} 5`,
		`corral_sandbox_network_bytes_total{direction="out",name="web",sandbox="box0"} 6`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
}

// BenchmarkScrape scrapes a daemon with 1,000 sampled sandboxes, with and
// without the per-sandbox gauges.
func BenchmarkScrape(b *testing.B) {
	s := sampled(b, 1000)
	for _, per := range []bool{false, true} {
		b.Run(fmt.Sprintf("per_sandbox=%v", per), func(b *testing.B) {
			cfg := testConfig(s, per)
			boxes := make([]Box, 1000)
			for i := range boxes {
				boxes[i] = Box{ID: fmt.Sprintf("box%d", i), Runtime: "crun", State: sandbox.StateRunning}
			}
			cfg.Boxes = func() []Box { return boxes }
			m := New(cfg)
			for b.Loop() {
				rec := httptest.NewRecorder()
				m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
			}
		})
	}
}
