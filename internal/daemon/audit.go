package daemon

import (
	"context"
	"path/filepath"
	"time"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/httpapi"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// auditPruneInterval is how often the trails of boxes removed longer
// than [audit] retention ago are deleted.
const auditPruneInterval = time.Hour

// openAudit opens the audit trail under Root/audit when [audit] is on.
func (d *Daemon) openAudit(ctx context.Context) (func() error, error) {
	cfg := d.cfg.Audit
	if !cfg.Enabled {
		return nil, nil
	}
	s, err := audit.Open(audit.Config{Dir: filepath.Join(d.cfg.Root, "audit"), MaxBytes: cfg.MaxBytesPerBox, Retention: cfg.retention(), DetachedEnds: true})
	if err != nil {
		return nil, err
	}
	d.audit = s
	log.G(ctx).Info("audit trail", "max_bytes_per_sandbox", cfg.MaxBytesPerBox, "retention", cfg.retention())
	return s.Close, nil
}

// networkEvents returns what is told of every egress decision: the audit
// trail records it (when on) and a denial raises an egress_denied alert,
// rate-limited per box (the alerts are wired after the network: d.obs
// is read at each event).
func (d *Daemon) networkEvents() func(network.Event) {
	return func(ev network.Event) {
		if d.audit != nil {
			d.audit.Network(ev)
		}
		if ev.Verdict == network.Deny {
			d.obs.deny(ev)
		}
	}
}

// auditSink returns the audit trail as an alert sink, if on.
func (d *Daemon) auditSink() []alerts.Sink {
	if d.audit == nil {
		return nil
	}
	return []alerts.Sink{d.audit}
}

// auditLog returns the audit trail for the API (nil when off: a nil
// *audit.Store in the interface would not be nil).
func (d *Daemon) auditLog() httpapi.AuditLog {
	if d.audit == nil {
		return nil
	}
	return d.audit
}

// followAudit records m's lifecycle events (from before Recover) and
// deletes the trails of boxes gone longer than the retention, now and
// then, until m closes.
func (d *Daemon) followAudit(ctx context.Context, m *sandbox.Manager) {
	if d.audit == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	d.audit.FollowManager(ctx, m)
	exists := func(id string) bool {
		_, err := m.Get(ctx, id)
		return err == nil
	}
	// The commands of a box and those that ended, asked of its agent
	// while no operation holds the box (a suspend's checkpoint).
	list := func(ctx context.Context, box string) ([]*processpb.ProcessInfo, error) {
		var procs []*processpb.ProcessInfo
		err := m.WithAgent(ctx, box, func(ctx context.Context, addr string) error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var err error
			procs, err = d.agents.Processes(ctx, addr, true)
			return err
		})
		return procs, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(auditPruneInterval)
		defer t.Stop()
		ends := time.NewTicker(audit.DetachedPollInterval)
		defer ends.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				d.audit.Prune(exists)
			case <-ends.C:
				d.audit.CollectEnds(ctx, list)
			}
		}
	}()
	d.closers.add(func() error {
		cancel()
		<-done
		return nil
	})
}
