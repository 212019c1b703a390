package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/agentclient"
)

// startDetached starts req and leaves its stream after the start event, as
// a detached exec does. It returns the pid.
func startDetached(t *testing.T, c *agentclient.Client, req *pb.StartRequest) uint32 {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("first event = %v, %v; want start", stream.Msg(), stream.Err())
	}
	return stream.Msg().GetEvent().GetStart().GetPid()
}

// connectAll reads a Connect stream to its end.
func connectAll(t *testing.T, c *agentclient.Client, req *pb.ConnectRequest) (*result, error) {
	t.Helper()
	stream, err := c.Process.Connect(t.Context(), connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	r := &result{}
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			r.pid = ev.Start.GetPid()
		case *pb.ProcessEvent_Data:
			r.stdout.Write(ev.Data.GetStdout())
			r.stderr.Write(ev.Data.GetStderr())
			r.pty.Write(ev.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = ev.End
		case *pb.ProcessEvent_Gap:
			r.gaps = append(r.gaps, gapAt{uint64(r.stdout.Len()), ev.Gap.GetDroppedBytes()})
		}
	}
	return r, stream.Err()
}

func tagSel(tag string) *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: tag}}
}

// waitEnded waits (without a time bound of its own) until sel's command
// ended: a Connect without replay returns its end.
func waitEnded(t *testing.T, c *agentclient.Client, sel *pb.ProcessSelector) *pb.ProcessEvent_EndEvent {
	t.Helper()
	r, err := connectAll(t, c, &pb.ConnectRequest{Process: sel})
	if err != nil || r.end == nil {
		t.Fatalf("Connect(%v) = %v, %v; want an end event", sel, r, err)
	}
	return r.end
}

func TestReplay(t *testing.T) {
	c := startAgent(t, Config{})
	req := sh("echo one; echo two; read x; echo got $x; exit 3")
	req.Tag = proto.String("job")
	startDetached(t, c, req)
	sel := tagSel("job")

	// Output before anyone re-attached, without following: the stream
	// ends after the replay. The command waits for input, so this is all
	// of it up to now, once it is there.
	var r *result
	for {
		var err error
		r, err = connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true), Follow: proto.Bool(false)})
		if err != nil {
			t.Fatal(err)
		}
		if r.stdout.String() == "one\ntwo\n" {
			break
		}
		if r.end != nil || !strings.HasPrefix("one\ntwo\n", r.stdout.String()) {
			t.Fatalf("replay = %q, %q, end %v; want the output so far and no end", r.stdout.String(), r.stderr.String(), r.end)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r.end != nil {
		t.Errorf("replay of a running command without follow has an end event: %v", r.end)
	}

	// Tail.
	r, err := connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true), TailLines: proto.Uint32(1), Follow: proto.Bool(false)})
	if err != nil || r.stdout.String() != "two\n" || r.stderr.String() != "" {
		t.Errorf("replay tail 1 = %q, %q, %v; want %q", r.stdout.String(), r.stderr.String(), err, "two\n")
	}

	// Input, then the end: a Connect with replay and follow has it all.
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("in\n")}}
	if _, err := c.Process.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
		t.Fatal(err)
	}
	r, err = connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true)})
	if err != nil || r.stdout.String() != "one\ntwo\ngot in\n" || r.end.GetExitCode() != 3 {
		t.Fatalf("replay and follow = %q, end %v, %v; want all of stdout and exit 3", r.stdout.String(), r.end, err)
	}

	// After the end: the default Connect (as envd's) has start and end,
	// no output; replay has the output too.
	r, err = connectAll(t, c, &pb.ConnectRequest{Process: sel})
	if err != nil || r.end.GetExitCode() != 3 || r.stdout.Len() != 0 || r.pid == 0 {
		t.Errorf("Connect after the end = pid %d, %q, end %v, %v; want the pid, no output, exit 3", r.pid, r.stdout.String(), r.end, err)
	}
	r, err = connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true), Follow: proto.Bool(false)})
	if err != nil || r.stdout.String() != "one\ntwo\ngot in\n" || r.end.GetExitCode() != 3 {
		t.Errorf("replay after the end = %q, end %v, %v; want the output and exit 3", r.stdout.String(), r.end, err)
	}
	// Each stream's output is replayed as that stream's.
	pid := startDetached(t, c, sh("echo e >&2"))
	pidSel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	waitEnded(t, c, pidSel)
	r, err = connectAll(t, c, &pb.ConnectRequest{Process: pidSel, Replay: proto.Bool(true)})
	if err != nil || r.stderr.String() != "e\n" || r.stdout.Len() != 0 {
		t.Errorf("replay of stderr = %q, %q, %v; want stderr %q", r.stdout.String(), r.stderr.String(), err, "e\n")
	}

	// Input and signals go to running commands only.
	_, err = c.Process.SendInput(t.Context(), connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in}))
	if connect.CodeOf(err) != connect.CodeNotFound || !strings.Contains(err.Error(), `process with tag "job" has ended`) {
		t.Errorf("SendInput after the end = %v; want not found: has ended", err)
	}
}

func TestReplayBounded(t *testing.T) {
	c := startAgent(t, Config{OutputBuffer: 8 << 10})
	req := sh("i=0; while [ $i -lt 2000 ]; do echo line $i; i=$((i+1)); done")
	pid := startDetached(t, c, req)
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	waitEnded(t, c, sel)
	r, err := connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	out := r.stdout.String()
	if len(out) > 8<<10 || !strings.HasPrefix(out, "line 0\nline 1\n") || !strings.HasSuffix(out, "line 1999\n") {
		t.Errorf("replay is %d bytes ending %q; want at most 8 KiB from the first line, ending with the last", len(out), out[max(len(out)-20, 0):])
	}
	// The replay says where the bytes it lacks were.
	var all strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&all, "line %d\n", i)
	}
	if len(r.gaps) != 1 || out[:r.gaps[0].at]+all.String()[r.gaps[0].at:r.gaps[0].at+r.gaps[0].dropped]+out[r.gaps[0].at:] != all.String() {
		t.Errorf("replay gaps %+v; want one, of the bytes between its head and its end", r.gaps)
	}
	list, err := c.Process.List(t.Context(), connect.NewRequest(&pb.ListRequest{IncludeEnded: proto.Bool(true)}))
	if err != nil || len(list.Msg.GetProcesses()) != 1 {
		t.Fatalf("List(include_ended) = %v, %v; want one", list, err)
	}
	info := list.Msg.GetProcesses()[0]
	if info.GetOutputDroppedBytes() == 0 || info.GetOutputBytes() != uint64(len(out)) {
		t.Errorf("output_bytes %d, output_dropped_bytes %d; want %d and some dropped", info.GetOutputBytes(), info.GetOutputDroppedBytes(), len(out))
	}

	// No output kept at all.
	c = startAgent(t, Config{OutputBuffer: -1})
	pid = startDetached(t, c, sh("echo hi"))
	sel = &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	waitEnded(t, c, sel)
	if r, err := connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true)}); err != nil || r.stdout.Len() != 0 || r.end == nil {
		t.Errorf("replay with no buffer = %q, %v, %v; want nothing and the end", r.stdout.String(), r.end, err)
	}
}

func TestEndedHistory(t *testing.T) {
	c := startAgent(t, Config{EndedKeep: 2})
	ctx := t.Context()
	for i, script := range []string{"exit 1", "exit 2", "exit 3"} {
		req := sh(script)
		req.Tag = proto.String("t")
		if _, err := run(ctx, t, c, req, nil); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
	}
	running := sh("read x")
	running.Tag = proto.String("live")
	startDetached(t, c, running)

	// E2B clients (no include_ended) see the running command only.
	list, err := c.Process.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil || len(list.Msg.GetProcesses()) != 1 || list.Msg.GetProcesses()[0].GetTag() != "live" {
		t.Fatalf("List() = %v, %v; want the running command only", list.Msg, err)
	}
	list, err = c.Process.List(ctx, connect.NewRequest(&pb.ListRequest{IncludeEnded: proto.Bool(true)}))
	if err != nil {
		t.Fatal(err)
	}
	var codes []int32
	for _, p := range list.Msg.GetProcesses() {
		if p.End == nil {
			codes = append(codes, -100)
			continue
		}
		codes = append(codes, p.GetEnd().GetExitCode())
		if p.GetEndedAtMs() < p.GetStartedAtMs() || p.GetStartedAtMs() == 0 {
			t.Errorf("pid %d: started %d, ended %d", p.GetPid(), p.GetStartedAtMs(), p.GetEndedAtMs())
		}
	}
	// The running one first, then the two that ended last (EndedKeep).
	if want := []int32{-100, 2, 3}; !equalInts(codes, want) {
		t.Errorf("List(include_ended) exit codes = %v; want %v (-100: running)", codes, want)
	}
	// A tag selects the command that ended last.
	if end := waitEnded(t, c, tagSel("t")); end.GetExitCode() != 3 {
		t.Errorf("Connect(tag t) = exit %d; want 3, the latest", end.GetExitCode())
	}
}

func TestEndedTTL(t *testing.T) {
	c := startAgent(t, Config{EndedTTL: time.Millisecond})
	if _, err := run(t.Context(), t, c, sh("true"), nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	list, err := c.Process.List(t.Context(), connect.NewRequest(&pb.ListRequest{IncludeEnded: proto.Bool(true)}))
	if err != nil || len(list.Msg.GetProcesses()) != 0 {
		t.Errorf("List(include_ended) after the TTL = %v, %v; want none", list.Msg, err)
	}
}

func equalInts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestUncollectedKeepsAgent(t *testing.T) {
	s, err := New(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{pid: 1, started: time.Now(), timedOut: make(chan struct{}), endedCh: make(chan struct{})}
	s.proc.mu.Lock()
	s.proc.ended = append(s.proc.ended, p)
	s.proc.mu.Unlock()
	p.finish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{}}})
	if !s.busy() {
		t.Error("busy() = false with an ended command nobody collected; want true")
	}
	p.markCollected()
	if s.busy() {
		t.Error("busy() = true once its end was collected; want false")
	}
}

// TestReplayFromOffset: a replay from an output offset on starts there,
// and the Corral-Output-Offset header says where the replay starts, past
// what the ring dropped.
func TestReplayFromOffset(t *testing.T) {
	c := startAgent(t, Config{OutputBuffer: 4096})
	pid := startDetached(t, c, sh("echo one; echo two >&2; i=0; while [ $i -lt 2000 ]; do echo 0123456789; i=$((i+1)); done"))
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	waitEnded(t, c, sel)
	const total = 8 + 2000*11
	tests := []struct {
		name      string
		from      uint64
		wantFirst func(uint64) bool
		want      string
	}{
		{name: "in the head", from: 4, wantFirst: func(n uint64) bool { return n == 4 }},
		{name: "dropped", from: 4096, wantFirst: func(n uint64) bool { return n > 4096 && n < total }},
		{name: "held", from: total - 22, wantFirst: func(n uint64) bool { return n == total-22 }, want: "0123456789\n0123456789\n"},
		{name: "the end", from: total, wantFirst: func(n uint64) bool { return n == total }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stream, err := c.Process.Connect(t.Context(), connect.NewRequest(&pb.ConnectRequest{Process: sel, Replay: proto.Bool(true), Follow: proto.Bool(false), FromOffset: proto.Uint64(tc.from)}))
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			var out strings.Builder
			var gap uint64
			for stream.Receive() {
				out.Write(stream.Msg().GetEvent().GetData().GetStdout())
				out.Write(stream.Msg().GetEvent().GetData().GetStderr())
				gap += stream.Msg().GetEvent().GetGap().GetDroppedBytes()
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			first, err := strconv.ParseUint(stream.ResponseHeader().Get(outputOffsetHeader), 10, 64)
			if err != nil || !tc.wantFirst(first) {
				t.Fatalf("%s = %d, %v; want the first offset replayed", outputOffsetHeader, first, err)
			}
			if got := out.String(); uint64(len(got))+gap != total-first || (tc.want != "" && got != tc.want) {
				t.Errorf("replay from %d = %d bytes; want the %d from %d (%q)", tc.from, len(got), total-first, first, tc.want)
			}
		})
	}
}

// TestReplayFromOffsetCollectsNoEnd: the daemon's copy of an ended
// command's output (a replay from an offset) does not count as a client
// learning how it ended, which keeps the agent from exiting when idle.
func TestReplayFromOffsetCollectsNoEnd(t *testing.T) {
	c, s := startAgentServer(t, Config{})
	// The command ends only once its starter has gone: a command that
	// ends while the Start stream is still open delivers its end there,
	// which collects it (the test raced that before).
	gate := filepath.Join(t.TempDir(), "go")
	pid := startDetached(t, c, sh("while [ ! -e "+gate+" ]; do sleep 0.01; done; echo hi"))
	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	time.Sleep(50 * time.Millisecond) // let the agent see the starter leave
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for {
		r, err := connectAll(t, c, &pb.ConnectRequest{Process: sel, Replay: proto.Bool(true), Follow: proto.Bool(false), FromOffset: proto.Uint64(0)})
		if err != nil {
			t.Fatal(err)
		}
		if r.end != nil {
			if r.stdout.String() != "hi\n" {
				t.Errorf("replay from 0 = %q; want %q", r.stdout.String(), "hi\n")
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !s.busy() {
		t.Fatal("busy() = false after a replay from an offset; want true, the end not collected")
	}
	waitEnded(t, c, sel) // as corral wait
	if s.busy() {
		t.Error("busy() = true after a client got the end; want false")
	}
}
