package agentpool

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"

	"connectrpc.com/connect"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/gen/process/processconnect"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// fakeProcess answers process.Process Start with a start event (pid 42)
// and, unless the command is tagged, an end event with exit code 3.
type fakeProcess struct {
	processconnect.UnimplementedProcessHandler
	mu   sync.Mutex
	reqs []*processpb.StartRequest
}

func (f *fakeProcess) Start(_ context.Context, req *connect.Request[processpb.StartRequest], s *connect.ServerStream[processpb.StartResponse]) error {
	f.mu.Lock()
	f.reqs = append(f.reqs, req.Msg)
	f.mu.Unlock()
	ev := func(e *processpb.ProcessEvent) error { return s.Send(&processpb.StartResponse{Event: e}) }
	if err := ev(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}); err != nil {
		return err
	}
	if req.Msg.GetTag() != "" {
		return nil // a managed command: the stream ends, the command runs on
	}
	return ev(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true}}})
}

// TestStartAndRun: Start starts a tagged shell command and returns its
// PID at its start event; Run waits for the end event's exit code.
func TestStartAndRun(t *testing.T) {
	fp := &fakeProcess{}
	path, h := processconnect.NewProcessHandler(fp)
	mux := http.NewServeMux()
	mux.Handle(path, h)
	_, p := newFakeAgent(t, mux.ServeHTTP)
	ctx := testutil.Context(t)
	if pid, err := p.Start(ctx, "fake://a", "start", "httpd -f"); err != nil || pid != 42 {
		t.Fatalf("Start = %d, %v; want pid 42", pid, err)
	}
	if code, err := p.Run(ctx, "fake://a", "test -f /ready"); err != nil || code != 3 {
		t.Fatalf("Run = %d, %v; want exit code 3", code, err)
	}
	fp.mu.Lock()
	defer fp.mu.Unlock()
	if len(fp.reqs) != 2 {
		t.Fatalf("the agent got %d starts; want 2", len(fp.reqs))
	}
	for i, want := range []struct{ tag, cmd string }{{"start", "httpd -f"}, {"", "test -f /ready"}} {
		r := fp.reqs[i]
		if r.GetTag() != want.tag || r.GetProcess().GetCmd() != "/bin/sh" || !slices.Equal(r.GetProcess().GetArgs(), []string{"-c", want.cmd}) {
			t.Errorf("start %d = tag %q, %s %q; want tag %q, /bin/sh -c %q", i, r.GetTag(), r.GetProcess().GetCmd(), r.GetProcess().GetArgs(), want.tag, want.cmd)
		}
	}
}

// gapProcess answers Connect with a replay of a head, a gap and an end.
type gapProcess struct {
	processconnect.UnimplementedProcessHandler
}

func (gapProcess) Connect(_ context.Context, _ *connect.Request[processpb.ConnectRequest], s *connect.ServerStream[processpb.ConnectResponse]) error {
	s.ResponseHeader().Set("Corral-Output-Offset", "0")
	data := func(b string) *processpb.ProcessEvent {
		return &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte(b)}}}}
	}
	for _, ev := range []*processpb.ProcessEvent{
		{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}},
		data("head"),
		{Event: &processpb.ProcessEvent_Gap{Gap: &processpb.ProcessEvent_GapEvent{DroppedBytes: 100}}},
		data("end"),
	} {
		if err := s.Send(&processpb.ConnectResponse{Event: ev}); err != nil {
			return err
		}
	}
	return nil
}

// TestOutputGap: a gap in the agent's replay moves the offset of the
// output after it past the bytes the agent did not keep.
func TestOutputGap(t *testing.T) {
	path, h := processconnect.NewProcessHandler(gapProcess{})
	mux := http.NewServeMux()
	mux.Handle(path, h)
	_, p := newFakeAgent(t, mux.ServeHTTP)
	type chunk struct {
		off  uint64
		data string
	}
	var got []chunk
	first, err := p.Output(testutil.Context(t), "fake://a", 42, 0, func(off uint64, _ bool, data []byte) error {
		got = append(got, chunk{off, string(data)})
		return nil
	})
	want := []chunk{{0, "head"}, {104, "end"}}
	if err != nil || first != 0 || !slices.Equal(got, want) {
		t.Errorf("Output = %d, %v, chunks %v; want 0, chunks %v", first, err, got, want)
	}
}
