package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// startAgent serves an agent on a fresh unix socket for the test's lifetime.
func startAgent(t testing.TB, cfg Config) *agentclient.Client {
	t.Helper()
	c, _ := startAgentServer(t, cfg)
	return c
}

// startAgentServer is startAgent that also returns the agent.
func startAgentServer(t testing.TB, cfg Config) (*agentclient.Client, *Server) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(testutil.Context(t)))
	dir, err := os.MkdirTemp("", "agent")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	c, err := agentclient.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		cancel()
		<-done
		os.RemoveAll(dir)
	})
	if err := c.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c, s
}

// result is everything a Start stream produced.
type result struct {
	pid    uint32
	stdout strings.Builder
	stderr strings.Builder
	pty    strings.Builder
	end    *pb.ProcessEvent_EndEvent
	// gaps are the gap events' dropped bytes, at the stdout length then.
	gaps []gapAt
}

type gapAt struct{ at, dropped uint64 }

// run starts a command and collects its stream; onStart runs after the
// start event (for input or signals).
func run(ctx context.Context, t testing.TB, c *agentclient.Client, req *pb.StartRequest, onStart func(pid uint32)) (*result, error) {
	t.Helper()
	stream, err := c.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	r := &result{}
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			r.pid = ev.Start.GetPid()
			if onStart != nil {
				onStart(r.pid)
			}
		case *pb.ProcessEvent_Data:
			r.stdout.Write(ev.Data.GetStdout())
			r.stderr.Write(ev.Data.GetStderr())
			r.pty.Write(ev.Data.GetPty())
		case *pb.ProcessEvent_End:
			r.end = ev.End
		}
	}
	if err := stream.Err(); err != nil {
		return r, err
	}
	if r.end == nil {
		return r, errors.New("stream ended without an end event")
	}
	return r, nil
}

func sh(script string) *pb.StartRequest {
	return &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}}
}

func mustWrite(t testing.TB, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
