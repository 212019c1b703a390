package audit

import (
	"context"
	"errors"
	"time"

	"github.com/containerd/errdefs"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/rest"
)

// A detached exec (exec -d: the client left before the command ended)
// has its exec_end recorded when the command ends, like a foreground
// one's: the Store keeps it pending and CollectEnds, which the daemon
// calls every DetachedPollInterval, asks the box's agent (List with the
// ended commands, which the agent keeps for a while) how it ended.

// Bounds of the pending detached execs: beyond them an exec_end without
// the outcome is recorded when the client leaves, as without collection.
const (
	MaxDetachedPerBox = 64
	MaxDetached       = 4096
)

// DetachedPollInterval is how often the daemon collects the ends of the
// pending detached execs.
const DetachedPollInterval = 2 * time.Second

// startSlack is how far a process's start, as the agent reports it, may
// be from the exec's: a pid the box reused since is another command.
const startSlack = 10 * time.Second

// pendingExec is a detached exec whose end is not known yet.
type pendingExec struct {
	d   rest.ExecDetail
	add func(rest.AuditEvent)
}

// Detached keeps exec d of box pending until CollectEnds learns how it
// ended, then records its exec_end with add. It reports false (the
// caller records the end as unknown now) when the Store does not collect
// ends (Config.DetachedEnds), the exec has no pid, or too many are
// pending.
func (s *Store) Detached(box string, d rest.ExecDetail, add func(rest.AuditEvent)) bool {
	if !s.cfg.DetachedEnds || d.Pid == 0 {
		return false
	}
	s.mu.Lock()
	if s.closed || s.npending >= MaxDetached || len(s.pending[box]) >= MaxDetachedPerBox {
		s.mu.Unlock()
		return false
	}
	if s.pending[box] == nil {
		s.pending[box] = map[uint32]*pendingExec{}
	}
	old := s.pending[box][d.Pid]
	if old == nil {
		s.npending++
	}
	s.pending[box][d.Pid] = &pendingExec{d: d, add: add}
	s.mu.Unlock()
	if old != nil {
		// The pid was reused: the older command ended long ago.
		endUnknown(old, "the end is unknown: the box reused its pid")
	}
	return true
}

// Pending returns how many detached execs wait for their end.
func (s *Store) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.npending
}

// CollectEnds asks list, box by box, for the commands of each box with
// pending detached execs (running and recently ended), and records the
// exec_end of those that ended. A box that is gone (list returns
// errdefs.ErrNotFound) ends its pending execs as unknown; any other error
// leaves them for the next call (a paused or busy box).
func (s *Store) CollectEnds(ctx context.Context, list func(ctx context.Context, box string) ([]*processpb.ProcessInfo, error)) {
	s.mu.Lock()
	boxes := make([]string, 0, len(s.pending))
	for box := range s.pending {
		boxes = append(boxes, box)
	}
	s.mu.Unlock()
	for _, box := range boxes {
		if ctx.Err() != nil {
			return
		}
		procs, err := list(ctx, box)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		byPid := make(map[uint32]*processpb.ProcessInfo, len(procs))
		for _, p := range procs {
			// Ended ones come after the running ones, newest last: a pid
			// reused keeps the running command's entry.
			if q := byPid[p.GetPid()]; q == nil || q.GetEnd() != nil {
				byPid[p.GetPid()] = p
			}
		}
		var done []func()
		s.mu.Lock()
		for pid, pe := range s.pending[box] {
			p := byPid[pid]
			switch {
			case err != nil:
				done = append(done, func() { endUnknown(pe, "the end is unknown: the box was removed before the command ended") })
			case p == nil:
				done = append(done, func() {
					endUnknown(pe, "the end is unknown: the box's agent no longer knows the command (it was restarted, or forgot it)")
				})
			case absDuration(time.UnixMilli(p.GetStartedAtMs()).Sub(pe.d.Start)) > startSlack:
				done = append(done, func() { endUnknown(pe, "the end is unknown: the box reused its pid") })
			case p.GetEnd() == nil:
				continue // still running
			default:
				done = append(done, func() { ended(pe, p) })
			}
			delete(s.pending[box], pid)
			s.npending--
		}
		if len(s.pending[box]) == 0 {
			delete(s.pending, box)
		}
		s.mu.Unlock()
		// The events are added outside mu, which Add takes.
		for _, f := range done {
			f()
		}
	}
}

// ended records pe's exec_end from p, the agent's record of how it ended.
func ended(pe *pendingExec, p *processpb.ProcessInfo) {
	d := pe.d
	end := p.GetEnd()
	at := time.Now().UTC()
	if ms := p.GetEndedAtMs(); ms > 0 {
		at = time.UnixMilli(ms).UTC()
	}
	code := int(end.GetExitCode())
	d.End, d.ExitCode, d.Detached = &at, &code, true
	d.Status, d.Error = end.GetStatus(), end.GetError()
	d.OOM, d.TimedOut = end.GetOomKilled(), end.GetTimedOut()
	d.CPUTimeUS, d.PeakMemoryBytes = end.GetCpuTimeUs(), end.GetPeakMemoryBytes()
	d.Signal = signalOf(end.GetStatus())
	if n := p.GetOutputBytes() + p.GetOutputDroppedBytes(); n > 0 {
		d.OutputBytes = int64(n)
	}
	pe.add(rest.AuditEvent{Time: at, Type: rest.AuditExecEnd, Exec: &d})
}

// endUnknown records pe's exec_end without its outcome.
func endUnknown(pe *pendingExec, why string) {
	d := pe.d
	now := time.Now().UTC()
	d.End, d.Detached, d.Error = &now, true, why
	pe.add(rest.AuditEvent{Time: now, Type: rest.AuditExecEnd, Exec: &d})
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
