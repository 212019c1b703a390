//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestObservabilityAlerts: a box's agent killed from outside is replaced
// by corral-init and counted (/metrics, an agent_restart alert on the
// webhook and in the audit trail); a box denied in a loop raises
// egress_denied alerts, rate-limited, that account for every denial.
func TestObservabilityAlerts(t *testing.T) {
	type alert struct {
		Box, Kind, Level, Message string
		Value                     float64
	}
	alerts := make(chan alert, 256)
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
		*cfg += "[alerts]\nwebhook = \"" + hook.URL + "\"\n"
	})
	// next waits for the next webhook alert of kind.
	next := func(kind string, within time.Duration) alert {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case a := <-alerts:
				if a.Kind == kind {
					return a
				}
			case <-deadline:
				t.Fatalf("no %s alert posted within %v; log:\n%s", kind, within, tail(readFile(d.logFile), 30))
			}
		}
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", d.socket)
	}}}
	metric := func(name string) string {
		resp, err := hc.Get("http://corral/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				return v
			}
		}
		return ""
	}

	t.Run("agent restart", func(t *testing.T) {
		id := d.create("--image", "busybox")
		// killAgent kills the box's running agent from the host.
		killAgent := func() {
			t.Helper()
			d.must("exec", id, "--", "true") // the agent runs
			agent := 0
			for _, pid := range d.cgroupPids(id) {
				if strings.HasPrefix(readFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline")), "/.corral/corral\x00agent\x00") {
					agent = pid
				}
			}
			if agent == 0 {
				t.Fatal("no agent runs in the box after an exec (is corral-init its PID 1?)")
			}
			// An agent that fails within a second of its start is
			// replaced only after a second: let it be older.
			time.Sleep(1100 * time.Millisecond)
			if err := syscall.Kill(agent, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}
		// execAfterKill runs echo back once a new agent answers.
		execAfterKill := func() string {
			var out string
			for range 50 {
				var err error
				if out, _, err = d.corral("exec", id, "--", "echo", "back"); err == nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			return strings.TrimSpace(out)
		}
		killAgent()
		if out := execAfterKill(); out != "back" {
			t.Fatalf("exec after the agent was killed: %q", out)
		}
		a := next("agent_restart", 30*time.Second)
		if a.Box != id || a.Value != 1 || !strings.Contains(a.Message, "killed by signal 9") {
			t.Errorf("agent_restart alert = %+v; want box %s, value 1, killed by signal 9", a, id)
		}
		if got := metric("corral_agent_restarts_total"); got != "1" {
			t.Errorf("corral_agent_restarts_total = %q; want 1", got)
		}
		// The next answers carry the same count: no second report.
		d.must("exec", id, "--", "true")
		if got := metric("corral_agent_restarts_total"); got != "1" {
			t.Errorf("corral_agent_restarts_total after another exec = %q; want 1", got)
		}
		if ev := d.must("events", "--box", id, "--type", "alert", "--json"); !strings.Contains(ev, `"agent_restart"`) {
			t.Errorf("events of the box have no agent_restart alert:\n%s", ev)
		}
		// A new daemon does not report that failure again (its trail says
		// it was), and reports the next one.
		d.kill()
		d.start()
		d.must("exec", id, "--", "true")
		if got := metric("corral_agent_restarts_total"); got != "0" {
			t.Errorf("corral_agent_restarts_total after a daemon restart = %q; want 0 (reported by the first daemon)", got)
		}
		killAgent()
		if out := execAfterKill(); out != "back" {
			t.Fatalf("exec after the agent was killed again: %q", out)
		}
		if a := next("agent_restart", 30*time.Second); a.Box != id || a.Value != 2 {
			t.Errorf("second agent_restart alert = %+v; want box %s, value 2", a, id)
		}
		if got := metric("corral_agent_restarts_total"); got != "1" {
			t.Errorf("corral_agent_restarts_total after the second failure = %q; want 1", got)
		}
		d.must("rm", "-f", id)
	})

	t.Run("detached exec end", func(t *testing.T) {
		id := d.create("--image", "busybox")
		pid := strings.TrimSpace(d.must("exec", "-d", id, "--", "sh", "-c", "echo out; sleep 1; exit 3"))
		// Nobody waits for it: the daemon learns its end from the agent.
		type execEnd struct {
			Exec struct {
				Pid         int   `json:"pid"`
				ExitCode    *int  `json:"exit_code"`
				Detached    bool  `json:"detached"`
				OutputBytes int64 `json:"output_bytes"`
			} `json:"exec"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			var got []execEnd
			for _, line := range strings.Split(strings.TrimSpace(d.must("events", "--box", id, "--type", "exec_end", "--json")), "\n") {
				var ev execEnd
				if json.Unmarshal([]byte(line), &ev) == nil && strconv.Itoa(ev.Exec.Pid) == pid {
					got = append(got, ev)
				}
			}
			if len(got) > 1 {
				t.Fatalf("%d exec_end events of pid %s; want 1", len(got), pid)
			}
			if len(got) == 1 {
				e := got[0].Exec
				if e.ExitCode == nil || *e.ExitCode != 3 || !e.Detached || e.OutputBytes != 4 {
					t.Errorf("exec_end of the detached command = %+v; want exit 3, detached, 4 bytes of output", e)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no exec_end of detached pid %s within 30 s", pid)
			}
			time.Sleep(200 * time.Millisecond)
		}
		d.must("rm", "-f", id)
	})

	t.Run("egress denials", func(t *testing.T) {
		id := d.create("--image", "busybox", "--network", "allowlist", "--allow", "allowed.test")
		const n = 5
		d.sh(id, "for i in 1 2 3 4 5; do nc -w 1 192.0.2.10 80 </dev/null; done")
		first := next("egress_denied", 30*time.Second)
		if first.Box != id || first.Value != 1 || !strings.Contains(first.Message, "192.0.2.10") {
			t.Errorf("first egress_denied alert = %+v; want box %s, value 1, naming 192.0.2.10", first, id)
		}
		// The rest come in one alert when the window ends.
		rest := next("egress_denied", 30*time.Second)
		if rest.Box != id || first.Value+rest.Value != n {
			t.Errorf("second egress_denied alert = %+v; want box %s reporting the %d denials held back", rest, id, n-1)
		}
		d.must("rm", "-f", id)
	})
}
