package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/stats"
)

// agentRestarts turns what the boxes' agents report of the agents that
// failed before them (agentpool.Config.Restarts) into the agent restart
// metric and an agent_restart alert. corral-init counts a box's failed
// agents for the box's life and every later agent reports the count on
// each answer: a count higher than the last one seen is new. For a box
// that an earlier daemon created, the last count reported is read from
// its audit trail (the agent_restart alerts), so that a daemon restart
// neither repeats nor loses failures; without the trail, the first count
// seen of such a box is taken as already reported.
type agentRestarts struct {
	// started is when this daemon started.
	started time.Time
	// find returns the box of an agent address; nil until the Manager
	// exists.
	find atomic.Pointer[func(addr string) (sandbox.Record, bool)]
	// report is told of new failures: the box, how many are new, the
	// box's total and how the last one ended.
	report func(ctx context.Context, id string, added, total uint64, failure string)
	// reported, when set, returns the last count reported for box id
	// (by any daemon) and whether it knows.
	reported func(id string) (uint64, bool)

	mu sync.Mutex
	// seen is the last count of each agent that reported one, by its
	// address; guarded by mu.
	seen map[string]restartCount
}

type restartCount struct {
	id string
	n  uint64
}

func newAgentRestarts(report func(ctx context.Context, id string, added, total uint64, failure string)) *agentRestarts {
	return &agentRestarts{started: time.Now(), report: report, seen: map[string]restartCount{}}
}

// observe is agentpool.Config.Restarts: the agent at addr counts n failed
// agents of its box, the last of which ended as failure says.
func (r *agentRestarts) observe(addr string, n uint64, failure string) {
	r.mu.Lock()
	prev, known := r.seen[addr]
	r.mu.Unlock()
	if known && n <= prev.n {
		return // the common case: a count already seen
	}
	find := r.find.Load()
	if find == nil {
		return
	}
	rec, ok := (*find)(addr)
	if !ok {
		return
	}
	if !known && rec.Created.Before(r.started) {
		// A box of an earlier daemon: start from what was reported.
		last, ok := uint64(0), false
		if r.reported != nil {
			last, ok = r.reported(rec.ID)
		}
		if !ok {
			last = n
		}
		prev = restartCount{id: rec.ID, n: last}
	}
	r.mu.Lock()
	if cur, ok := r.seen[addr]; ok && cur.n > prev.n {
		prev = cur
	}
	if n <= prev.n {
		r.seen[addr] = prev
		r.mu.Unlock()
		return // reported already (by another answer, or an earlier daemon)
	}
	r.seen[addr] = restartCount{id: rec.ID, n: n}
	r.mu.Unlock()
	r.report(context.Background(), rec.ID, n-prev.n, n, failure)
}

// boxByAgentAddr returns what finds the box of an agent address in m.
func boxByAgentAddr(m *sandbox.Manager) func(addr string) (sandbox.Record, bool) {
	return func(addr string) (sandbox.Record, bool) {
		recs, err := m.List(context.Background())
		if err != nil {
			return sandbox.Record{}, false
		}
		for _, rec := range recs {
			if rec.AgentAddr == addr {
				return rec, true
			}
		}
		return sandbox.Record{}, false
	}
}

// Observe does nothing: agentRestarts is a stats.Watcher only to forget
// the boxes that are gone.
func (r *agentRestarts) Observe(string, *stats.Sample, stats.Sample) {}

// Forget drops what is known of box id.
func (r *agentRestarts) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, c := range r.seen {
		if c.id == id {
			delete(r.seen, addr)
		}
	}
}

// reportedRestarts returns the last count of failed agents reported for
// box id, from the agent_restart alerts of its audit trail; false when
// the trail is off.
func (d *Daemon) reportedRestarts(id string) (uint64, bool) {
	if d.audit == nil {
		return 0, false
	}
	var last uint64
	err := d.audit.Query(audit.Filter{Sandbox: id, Types: []string{rest.AuditAlert}}, func(ev rest.AuditEvent) error {
		if a := ev.Alert; a != nil && a.Kind == string(alerts.AgentRestart) {
			last = max(last, uint64(a.Value))
		}
		return nil
	})
	return last, err == nil
}
