package daemon

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/stats"
)

// agentRestarts turns what the boxes' agents report of the agents that
// failed before them (agentpool.Config.Restarts) into the agent restart
// metric and an agent_restart alert. corral-init counts a box's failed
// agents for the box's life and every later agent reports the count on
// each answer: a count higher than the last one seen is new. The first
// count seen of a box that an earlier daemon created is taken as it is
// (that daemon reported those), not as new failures.
type agentRestarts struct {
	// started is when this daemon started.
	started time.Time
	// find returns the box of an agent address; nil until the Manager
	// exists.
	find atomic.Pointer[func(addr string) (sandbox.Record, bool)]
	// report is told of new failures: the box, how many are new, the
	// box's total and how the last one ended.
	report func(ctx context.Context, id string, added, total uint64, failure string)

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

// reported is agentpool.Config.Restarts: the agent at addr counts n failed
// agents of its box, the last of which ended as failure says.
func (r *agentRestarts) reported(addr string, n uint64, failure string) {
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
	r.mu.Lock()
	prev, known = r.seen[addr]
	if known && n <= prev.n {
		r.mu.Unlock()
		return // another answer reported it meanwhile
	}
	r.seen[addr] = restartCount{id: rec.ID, n: n}
	r.mu.Unlock()
	if !known && rec.Created.Before(r.started) {
		return
	}
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
