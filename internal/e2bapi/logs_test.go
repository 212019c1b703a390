package e2bapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/audit"
)

// fakeTrail is an audit trail in memory, in time order.
type fakeTrail struct {
	events []rest.AuditEvent
	// kept are the IDs of removed sandboxes whose trail is kept.
	kept map[string]bool
}

func (f *fakeTrail) Query(flt audit.Filter, fn func(rest.AuditEvent) error) error {
	for _, ev := range f.events {
		if !flt.Match(&ev) {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeTrail) Has(id string) bool { return f.kept[id] }

func TestLogs(t *testing.T) {
	f := newFixture(t)
	id := f.create(t, `{"templateID":"host"}`)
	at := func(s int) time.Time { return testNow.Add(time.Duration(s) * time.Second).UTC() }
	one, zero := 1, 0
	f.trail.events = []rest.AuditEvent{
		{Seq: 1, Time: at(1), Sandbox: id, Type: rest.AuditLifecycle, Lifecycle: &rest.LifecycleDetail{Change: "created"}},
		{Seq: 2, Time: at(2), Sandbox: id, Type: rest.AuditExec, Exec: &rest.ExecDetail{ID: "e1", Cmd: "ls", Args: []string{"/x"}}},
		{Seq: 3, Time: at(3), Sandbox: id, Type: rest.AuditExecEnd, Exec: &rest.ExecDetail{ID: "e1", Cmd: "ls", Args: []string{"/x"}, ExitCode: &one, Status: "exit status 1"}},
		{Seq: 1, Time: at(3), Sandbox: "other", Type: rest.AuditExec, Exec: &rest.ExecDetail{ID: "e9", Cmd: "secret-of-another-box"}},
		{Seq: 4, Time: at(4), Sandbox: id, Type: rest.AuditFile, File: &rest.FileDetail{Op: "write", Path: "/tmp/a", Status: 200}},
		{Seq: 5, Time: at(5), Sandbox: id, Type: rest.AuditExecEnd, Exec: &rest.ExecDetail{ID: "e2", Cmd: "true", ExitCode: &zero, Status: "exit status 0"}},
		{Seq: 6, Time: at(6), Sandbox: id, Type: rest.AuditAlert, Alert: &rest.AlertDetail{Kind: "memory", Level: "warning", Message: "memory at 80% of its limit"}},
	}
	type page struct {
		Logs []logEntry `json:"logs"`
	}
	get := func(t *testing.T, query string) []string {
		t.Helper()
		code, out, _ := f.do(t, "GET", "/v2/sandboxes/"+id+"/logs"+query, "")
		var p page
		if err := json.Unmarshal([]byte(out), &p); err != nil || code != http.StatusOK {
			t.Fatalf("GET logs%s = %d %s; want 200 and E2B's body", query, code, out)
		}
		var got []string
		for _, e := range p.Logs {
			got = append(got, fmt.Sprintf("%s %s", e.Level, e.Message))
		}
		return got
	}
	ms := func(s int) string { return fmt.Sprint(at(s).UnixMilli()) }
	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"all", "", []string{"info sandbox created", "info process started: ls /x", "error process ended: ls /x: exit status 1",
			"info file write /tmp/a", "info process ended: true: exit status 0", "warn memory at 80% of its limit"}},
		{"forward from a cursor, bounded", "?cursor=" + ms(3) + "&limit=2", []string{"error process ended: ls /x: exit status 1", "info file write /tmp/a"}},
		{"backward from a cursor", "?cursor=" + ms(4) + "&direction=backward&limit=2", []string{"info file write /tmp/a", "error process ended: ls /x: exit status 1"}},
		{"backward from now", "?direction=backward&limit=1", []string{"warn memory at 80% of its limit"}},
		{"level", "?level=warn", []string{"error process ended: ls /x: exit status 1", "warn memory at 80% of its limit"}},
		{"search", "?search=ls%20/x", []string{"info process started: ls /x", "error process ended: ls /x: exit status 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := get(t, tc.query); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("GET logs%s = %q; want %q", tc.query, got, tc.want)
			}
		})
	}

	// v1: the same entries, and plain lines.
	code, out, _ := f.do(t, "GET", "/sandboxes/"+id+"/logs?start="+ms(6), "")
	var v1 struct {
		Logs       []logLine  `json:"logs"`
		LogEntries []logEntry `json:"logEntries"`
	}
	if err := json.Unmarshal([]byte(out), &v1); err != nil || code != http.StatusOK || len(v1.Logs) != 1 || len(v1.LogEntries) != 1 ||
		v1.Logs[0].Line != "memory at 80% of its limit" || v1.LogEntries[0].Fields["kind"] != "memory" {
		t.Errorf("GET /sandboxes/%s/logs = %d %s; want the alert as one line and one entry", id, code, out)
	}

	for _, q := range []string{"?cursor=x", "?direction=up", "?level=fatal", "?limit=1001"} {
		code, out, _ := f.do(t, "GET", "/v2/sandboxes/"+id+"/logs"+q, "")
		wantError(t, "GET logs"+q, code, out, http.StatusBadRequest)
	}
	code, out, _ = f.do(t, "GET", "/v2/sandboxes/nope/logs", "")
	wantError(t, "GET logs of an unknown sandbox", code, out, http.StatusNotFound)
	// A removed sandbox's trail is kept for a while, and so is its log.
	f.trail.kept = map[string]bool{"gone1": true}
	f.trail.events = append(f.trail.events, rest.AuditEvent{Seq: 1, Time: at(7), Sandbox: "gone1", Type: rest.AuditLifecycle, Lifecycle: &rest.LifecycleDetail{Change: "removed"}})
	code, out, _ = f.do(t, "GET", "/v2/sandboxes/gone1/logs", "")
	if code != http.StatusOK || !json.Valid([]byte(out)) {
		t.Errorf("GET logs of a removed sandbox = %d %s; want 200", code, out)
	}
}
