//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
)

// TestStatsAndAlerts: a box that fills most of its memory crosses 80% of
// its limit; the daemon logs the alert and posts it to the webhook; corral
// stats shows the use, corral inspect the disk, /metrics the box.
func TestStatsAndAlerts(t *testing.T) {
	type alert struct {
		Box, Kind, Level string
		Value, Limit     float64
		Time             time.Time
	}
	alerts := make(chan alert, 64)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a alert
		if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
			t.Errorf("webhook body: %v", err)
		}
		select {
		case alerts <- a:
		default:
		}
	}))
	defer hook.Close()
	d := startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += "[metrics]\ninterval = \"200ms\"\n[alerts]\nwebhook = \"" + hook.URL + "\"\n"
	})
	id := d.create("--image", "busybox", "--memory", "64m", "--name", "hog")

	// /dev/shm is a tmpfs charged to the box's memory, which the kernel
	// cannot reclaim without swap: 52 MiB of it and the box's own
	// processes are above 80% of 64 MiB.
	d.must("exec", id, "--", "sh", "-c", "head -c 54525952 /dev/zero > /dev/shm/fill")

	deadline := time.After(60 * time.Second)
	var got alert
	for got.Kind != "memory" {
		select {
		case got = <-alerts:
		case <-deadline:
			t.Fatalf("no memory alert posted within a minute; log:\n%s", tail(readFile(d.logFile), 30))
		}
	}
	if got.Box != id || (got.Level != "warning" && got.Level != "critical") || got.Limit != 64<<20 || got.Value < 0.8*(64<<20) || got.Time.IsZero() {
		t.Errorf("memory alert = %+v; want box %s, value >= 80%% of a 64 MiB limit", got, id)
	}
	if log := readFile(d.logFile); !strings.Contains(log, "sandbox alert") || !strings.Contains(log, "kind=memory") {
		t.Errorf("daemon log has no memory alert line:\n%s", tail(log, 30))
	}

	// corral stats shows it (one sample, every column).
	out := d.must("stats", "--no-stream", "--format", "{{.ID}} {{.MemPerc}} {{.DiskUsage}} {{.PIDs}}", id)
	f := strings.Fields(out)
	var memPct float64
	if len(f) > 1 {
		memPct, _ = strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
	}
	if len(f) < 4 || f[0] != id || memPct < 80 || f[len(f)-1] == "--" || strings.HasPrefix(f[2], "--") {
		t.Errorf("stats --no-stream = %q; want the box at 80%%+ memory with disk and pids", out)
	}
	var st []rest.SandboxStats
	if err := json.Unmarshal([]byte(d.must("stats", "--no-stream", "--json", "hog")), &st); err != nil || len(st) != 1 || st[0].Current == nil ||
		st[0].Current.MemoryLimitBytes != 64<<20 || st[0].Current.DiskLimitBytes == 0 || st[0].Current.PidsLimit == 0 {
		t.Errorf("stats --json hog = %+v, %v; want limits of memory, disk and pids", st, err)
	}

	// inspect shows the disk.
	var sbs []rest.Sandbox
	if err := json.Unmarshal([]byte(d.must("inspect", id)), &sbs); err != nil || len(sbs) != 1 || sbs[0].Usage == nil ||
		sbs[0].Usage.DiskLimitBytes == 0 || sbs[0].Usage.DiskBytes == 0 {
		t.Errorf("inspect usage = %+v, %v; want disk use and size", sbs, err)
	}

	// The history of the box, and /metrics.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	get := func(path string) string {
		resp, err := hc.Get("http://corral" + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	// The alert can come with the sampler's first sample: wait (bounded)
	// for a second one rather than race it.
	var hist rest.SandboxStats
	var err error
	for i := 0; i < 100; i++ {
		hist = rest.SandboxStats{}
		if err = json.Unmarshal([]byte(get("/v1/sandboxes/hog/stats")), &hist); err != nil || len(hist.History) >= 2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || len(hist.History) < 2 || hist.IntervalSeconds != 0.2 {
		t.Errorf("GET stats = %+v, %v; want a history of samples every 0.2 s", hist, err)
	}
	metrics := get("/metrics")
	for _, want := range []string{`corral_sandboxes{runtime="crun",state="running"} 1`, `corral_alerts_total{kind="memory",level=`, `corral_operation_duration_seconds_count{op="create"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	d.must("rm", id)
}
