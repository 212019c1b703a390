package daemon

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/metrics"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// TestAgentRestarts checks that a count of failed agents higher than the
// last one seen is reported once with what is new, that a box of an
// earlier daemon starts from its first count, and that a box forgotten is
// counted afresh.
func TestAgentRestarts(t *testing.T) {
	type report struct {
		id           string
		added, total uint64
	}
	var got []report
	r := newAgentRestarts(func(_ context.Context, id string, added, total uint64, _ string) {
		got = append(got, report{id, added, total})
	})
	boxes := map[string]sandbox.Record{
		"unix://a": {ID: "a", AgentAddr: "unix://a", Created: r.started.Add(time.Second)},
		"unix://b": {ID: "b", AgentAddr: "unix://b", Created: r.started.Add(-time.Hour)}, // recovered
	}
	// Before the Manager exists nothing is reported.
	r.observe("unix://a", 1, "killed by signal 9")
	find := func(addr string) (sandbox.Record, bool) { rec, ok := boxes[addr]; return rec, ok }
	r.find.Store(&find)

	r.observe("unix://a", 1, "killed by signal 9")
	r.observe("unix://a", 1, "killed by signal 9") // the same agent's next answer
	r.observe("unix://a", 3, "exited with status 2")
	r.observe("unix://b", 4, "killed by signal 9") // counted by the earlier daemon
	r.observe("unix://b", 5, "killed by signal 9")
	r.observe("unix://gone", 1, "killed by signal 9")
	want := []report{{"a", 1, 1}, {"a", 2, 3}, {"b", 1, 5}}
	if !slices.Equal(got, want) {
		t.Fatalf("reports = %+v; want %+v", got, want)
	}
	// With the audit trail, a box of an earlier daemon starts from the
	// count its trail says was reported.
	got = nil
	boxes["unix://c"] = sandbox.Record{ID: "c", AgentAddr: "unix://c", Created: r.started.Add(-time.Hour)}
	r.reported = func(id string) (uint64, bool) { return 2, id == "c" }
	r.observe("unix://c", 3, "killed by signal 9")
	if want := []report{{"c", 1, 3}}; !slices.Equal(got, want) {
		t.Errorf("box of an earlier daemon with its trail: reports = %+v; want %+v", got, want)
	}
	r.Forget("a")
	got = nil
	r.observe("unix://a", 3, "killed by signal 9")
	if want := []report{{"a", 3, 3}}; !slices.Equal(got, want) {
		t.Errorf("after Forget: reports = %+v; want %+v", got, want)
	}
}

// TestAgentRestartAlert checks that a reported failure counts in
// /metrics and reaches the alert sinks as an agent_restart alert.
func TestAgentRestartAlert(t *testing.T) {
	var got alertList
	o := &observability{metrics: metrics.New(metrics.Config{})}
	sinks := []alerts.Sink{&got}
	o.sinks.Store(&sinks)
	o.agentRestarts(context.Background(), "a", 2, 3, "killed by signal 9")
	if len(got) != 1 || got[0].Kind != alerts.AgentRestart || got[0].Box != "a" || got[0].Value != 3 {
		t.Fatalf("alerts = %+v; want one agent_restart of a with value 3", got)
	}
	mfs, err := o.metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64 = -1
	for _, mf := range mfs {
		if mf.GetName() == "corral_agent_restarts_total" {
			n = mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	if n != 2 {
		t.Errorf("corral_agent_restarts_total = %v; want 2", n)
	}
}
