package audit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/rest"
)

// detachedExec starts exec pid in box through the data plane's record
// and has its client leave before it ends.
func detachedExec(t *testing.T, s *Store, box string, pid uint32) {
	t.Helper()
	e := NewExec(func(ev rest.AuditEvent) { ev.Client = "uid=0"; s.Add(ev) }, box, startRequest(t, false))
	e.Detach = s.Detached
	e.Message(0, response(t, false, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: pid}}}), 0)
	e.Finish(http.StatusOK)
}

func execEnds(t *testing.T, s *Store, box string) []*rest.ExecDetail {
	t.Helper()
	var out []*rest.ExecDetail
	if err := s.Query(Filter{Sandbox: box, Types: []string{rest.AuditExecEnd}}, func(ev rest.AuditEvent) error {
		if ev.Client != "uid=0" {
			t.Errorf("exec_end client = %q; want the exec's, uid=0", ev.Client)
		}
		out = append(out, ev.Exec)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDetachedEnd checks that a detached exec's exec_end is recorded when
// the command ends, with how it ended, and not when the client leaves.
func TestDetachedEnd(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), DetachedEnds: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	detachedExec(t, s, "box1", 42)
	if got := execEnds(t, s, "box1"); len(got) != 0 {
		t.Fatalf("exec_end when the client left: %+v; want none before the command ends", got)
	}
	start := time.Now()
	info := &processpb.ProcessInfo{Pid: 42, StartedAtMs: start.UnixMilli()}
	list := func(context.Context, string) ([]*processpb.ProcessInfo, error) {
		return []*processpb.ProcessInfo{{Pid: 9, StartedAtMs: start.UnixMilli()}, info}, nil
	}
	s.CollectEnds(context.Background(), list) // still running
	if got := execEnds(t, s, "box1"); len(got) != 0 || s.Pending() != 1 {
		t.Fatalf("running command: exec_end %+v, %d pending; want none, 1 pending", got, s.Pending())
	}
	info.End = &processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", OomKilled: true, CpuTimeUs: 7, PeakMemoryBytes: 9}
	info.EndedAtMs = start.Add(time.Second).UnixMilli()
	info.OutputBytes, info.OutputDroppedBytes = 100, 20
	s.CollectEnds(context.Background(), list)
	got := execEnds(t, s, "box1")
	if len(got) != 1 {
		t.Fatalf("ended command: %d exec_end; want 1", len(got))
	}
	d := got[0]
	if d.ExitCode == nil || *d.ExitCode != -1 || d.Signal != "killed" || !d.OOM || !d.Detached || d.OutputBytes != 120 ||
		d.Pid != 42 || d.Cmd != "sh" || d.End == nil || d.End.UnixMilli() != info.EndedAtMs || d.CPUTimeUS != 7 || d.PeakMemoryBytes != 9 {
		t.Errorf("exec_end = %+v; want pid 42 sh killed by the OOM killer, detached, 120 bytes, ended at the agent's time", d)
	}
	if s.Pending() != 0 {
		t.Errorf("pending after the end = %d; want 0", s.Pending())
	}
}

// TestDetachedEndUnknown checks the ends that cannot be learnt: the box
// was removed, its agent forgot the command, the pid is another
// command's; a busy box is asked again later.
func TestDetachedEndUnknown(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), DetachedEnds: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i, tc := range []struct {
		name string
		list func(context.Context, string) ([]*processpb.ProcessInfo, error)
		want string
	}{
		{"removed", func(context.Context, string) ([]*processpb.ProcessInfo, error) {
			return nil, fmt.Errorf("sandbox: %w", errdefs.ErrNotFound)
		}, "the box was removed"},
		{"forgotten", func(context.Context, string) ([]*processpb.ProcessInfo, error) { return nil, nil }, "no longer knows"},
		{"pid reused", func(context.Context, string) ([]*processpb.ProcessInfo, error) {
			return []*processpb.ProcessInfo{{Pid: 5, StartedAtMs: time.Now().Add(time.Hour).UnixMilli()}}, nil
		}, "reused its pid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := fmt.Sprintf("box%d", i)
			detachedExec(t, s, box, 5)
			s.CollectEnds(context.Background(), func(context.Context, string) ([]*processpb.ProcessInfo, error) {
				return nil, errors.New("busy")
			})
			if got := execEnds(t, s, box); len(got) != 0 {
				t.Fatalf("busy box: exec_end %+v; want none yet", got)
			}
			s.CollectEnds(context.Background(), tc.list)
			got := execEnds(t, s, box)
			if len(got) != 1 || !got[0].Detached || got[0].ExitCode != nil || !strings.Contains(got[0].Error, tc.want) {
				t.Errorf("exec_end = %+v; want one, detached, no exit code, error with %q", got, tc.want)
			}
		})
	}
}

// TestDetachedBounded checks that a box cannot keep more than
// MaxDetachedPerBox execs pending: the others end, unknown, at once.
func TestDetachedBounded(t *testing.T) {
	s, err := Open(Config{Dir: t.TempDir(), DetachedEnds: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for pid := range uint32(MaxDetachedPerBox + 3) {
		detachedExec(t, s, "box1", pid+1)
	}
	if n := s.Pending(); n != MaxDetachedPerBox {
		t.Errorf("pending = %d; want %d", n, MaxDetachedPerBox)
	}
	if got := execEnds(t, s, "box1"); len(got) != 3 {
		t.Errorf("exec_end recorded at once = %d; want the 3 over the bound", len(got))
	}
}

// TestDetachedEndAtClose checks that the execs pending when the store
// closes get their exec_end, saying the end is unknown.
func TestDetachedEndAtClose(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir, DetachedEnds: true})
	if err != nil {
		t.Fatal(err)
	}
	detachedExec(t, s, "box1", 5)
	s.Close()
	s, err = Open(Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := execEnds(t, s, "box1")
	if len(got) != 1 || !strings.Contains(got[0].Error, "daemon stopped") {
		t.Errorf("exec_end after close = %+v; want one saying the daemon stopped", got)
	}
}
