package agent

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/agent/execcheck"
)

func TestExec(t *testing.T) {
	c := startAgent(t, Config{})
	tests := []struct {
		name     string
		req      *pb.StartRequest
		stdout   string
		exitCode int32
		code     connect.Code // expected error code, 0 for none
		msg      string       // the error's message, when code is set
		reason   string       // its execcheck.ReasonHeader
	}{
		{name: "echo", req: sh("echo hi"), stdout: "hi\n"},
		{name: "exit code", req: sh("echo out; exit 3"), stdout: "out\n", exitCode: 3},
		{name: "path lookup", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "echo", Args: []string{"a", "b"}}}, stdout: "a b\n"},
		{name: "env", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo $FOO"}, Envs: map[string]string{"FOO": "bar"}}}, stdout: "bar\n"},
		{name: "cwd", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/pwd", Cwd: proto.String("/usr")}}, stdout: "/usr\n"},
		{name: "missing command", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "no-such-command-xyz"}}, code: connect.CodeNotFound,
			msg: `command "no-such-command-xyz" not found in PATH: not found`},
		{name: "not executable", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/etc/passwd"}}, code: connect.CodePermissionDenied,
			msg: "fork/exec /etc/passwd: permission denied"},
		{name: "missing cwd", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/pwd", Cwd: proto.String("/no-such-dir")}}, code: connect.CodeInvalidArgument,
			msg: "working directory /no-such-dir does not exist", reason: execcheck.ReasonWorkdir},
		{name: "cwd is a file", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/pwd", Cwd: proto.String("/etc/passwd")}}, code: connect.CodeInvalidArgument,
			msg: "working directory /etc/passwd is not a directory", reason: execcheck.ReasonWorkdir},
		{name: "variable over MAX_ARG_STRLEN", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Envs: map[string]string{"BIG": strings.Repeat("x", 128<<10)}}},
			code: connect.CodeInvalidArgument, msg: "variable BIG is 128.1 KiB, more than the 128 KiB"},
		{name: "argument over MAX_ARG_STRLEN", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "echo", Args: []string{"a", strings.Repeat("x", 128<<10)}}},
			code: connect.CodeInvalidArgument, msg: "argument 2 is 128.1 KiB"},
		{name: "arguments over the total", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "echo", Args: slices.Repeat([]string{strings.Repeat("x", 100<<10)}, 70)}},
			code: connect.CodeInvalidArgument, msg: "the arguments and environment take"},
		{name: "env name with a space", req: &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "true", Envs: map[string]string{"A B": "1"}}},
			code: connect.CodeInvalidArgument, msg: `process.envs: name "A B" contains white space`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := run(t.Context(), t, c, tc.req, nil)
			if tc.code != 0 {
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != tc.code || ce.Message() != tc.msg && !strings.HasPrefix(ce.Message(), tc.msg) {
					t.Fatalf("Start(%v) error = %v; want code %v, message %q", tc.req.GetProcess().GetCmd(), err, tc.code, tc.msg)
				}
				if got := ce.Meta().Get(execcheck.ReasonHeader); got != tc.reason {
					t.Errorf("Start(%v) reason = %q; want %q", tc.req.GetProcess().GetCmd(), got, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := r.stdout.String(); got != tc.stdout {
				t.Errorf("stdout = %q; want %q", got, tc.stdout)
			}
			if r.end.GetExitCode() != tc.exitCode || !r.end.GetExited() {
				t.Errorf("end = %v; want exit code %d", r.end, tc.exitCode)
			}
		})
	}
}

func TestStreamOrder(t *testing.T) {
	c := startAgent(t, Config{})
	r, err := run(t.Context(), t, c, sh("for i in 1 2 3 4 5; do echo o$i; echo e$i >&2; done"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.stdout.String(), "o1\no2\no3\no4\no5\n"; got != want {
		t.Errorf("stdout = %q; want %q", got, want)
	}
	if got, want := r.stderr.String(), "e1\ne2\ne3\ne4\ne5\n"; got != want {
		t.Errorf("stderr = %q; want %q", got, want)
	}
}

func TestStdin(t *testing.T) {
	c := startAgent(t, Config{})
	sel := func(pid uint32) *pb.ProcessSelector {
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
	}
	t.Run("SendInput", func(t *testing.T) {
		ctx := t.Context()
		r, err := run(ctx, t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}}, func(pid uint32) {
			for _, s := range []string{"hello ", "world"} {
				in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte(s)}}
				if _, err := c.Process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel(pid), Input: in})); err != nil {
					t.Error(err)
				}
			}
			if _, err := c.Process.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel(pid)})); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.stdout.String(); got != "hello world" {
			t.Errorf("stdout = %q; want %q", got, "hello world")
		}
	})
	t.Run("StreamInput", func(t *testing.T) {
		ctx := t.Context()
		r, err := run(ctx, t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "head", Args: []string{"-c", "6"}}}, func(pid uint32) {
			st := c.Process.StreamInput(ctx)
			msgs := []*pb.StreamInputRequest{
				{Event: &pb.StreamInputRequest_Start{Start: &pb.StreamInputRequest_StartEvent{Process: sel(pid)}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("abc")}}}}},
				{Event: &pb.StreamInputRequest_Data{Data: &pb.StreamInputRequest_DataEvent{Input: &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("def")}}}}},
			}
			for _, m := range msgs {
				if err := st.Send(m); err != nil {
					t.Error(err)
				}
			}
			if _, err := st.CloseAndReceive(); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := r.stdout.String(); got != "abcdef" {
			t.Errorf("stdout = %q; want %q", got, "abcdef")
		}
	})
	t.Run("disabled", func(t *testing.T) {
		r, err := run(t.Context(), t, c, &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "cat"}, Stdin: proto.Bool(false)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r.stdout.String() != "" || r.end.GetExitCode() != 0 {
			t.Errorf("cat without stdin: stdout %q, end %v; want empty, exit 0", r.stdout.String(), r.end)
		}
	})
}

func TestPTY(t *testing.T) {
	c := startAgent(t, Config{})
	ctx := t.Context()
	req := sh("stty size; read x; stty size; echo got $x")
	req.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: 80, Rows: 24}}
	stream, err := c.Process.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out strings.Builder
	var pid uint32
	sent := false
	var end *pb.ProcessEvent_EndEvent
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			pid = ev.Start.GetPid()
		case *pb.ProcessEvent_Data:
			out.Write(ev.Data.GetPty())
			if !sent && strings.Contains(out.String(), "24 80") {
				sent = true
				sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}
				if _, err := c.Process.Update(ctx, connect.NewRequest(&pb.UpdateRequest{Process: sel, Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: 120, Rows: 40}}})); err != nil {
					t.Fatal(err)
				}
				in := &pb.ProcessInput{Input: &pb.ProcessInput_Pty{Pty: []byte("yes\n")}}
				if _, err := c.Process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
					t.Fatal(err)
				}
			}
		case *pb.ProcessEvent_End:
			end = ev.End
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"24 80", "40 120", "got yes"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("pty output = %q; want it to contain %q", out.String(), want)
		}
	}
	if end.GetExitCode() != 0 {
		t.Errorf("end = %v; want exit 0", end)
	}
}

func TestSignalAndTimeout(t *testing.T) {
	c := startAgent(t, Config{})
	t.Run("SIGTERM", func(t *testing.T) {
		ctx := t.Context()
		r, err := run(ctx, t, c, sh("exec sleep 100"), func(pid uint32) {
			req := &pb.SendSignalRequest{Process: &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: pid}}, Signal: pb.Signal_SIGNAL_SIGTERM}
			if _, err := c.Process.SendSignal(ctx, connect.NewRequest(req)); err != nil {
				t.Error(err)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.end.GetExited() || r.end.GetStatus() != "signal: terminated" || r.end.GetTimedOut() {
			t.Errorf("end = %v; want signal: terminated", r.end)
		}
	})
	t.Run("timeout kills the group", func(t *testing.T) {
		req := sh("sleep 100 & sleep 100; echo never")
		req.TimeoutMs = proto.Uint64(100)
		r, err := run(t.Context(), t, c, req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !r.end.GetTimedOut() || r.end.GetExited() || r.stdout.String() != "" {
			t.Errorf("end = %v, stdout %q; want timed_out", r.end, r.stdout.String())
		}
	})
}

func TestBackgroundReattach(t *testing.T) {
	c := startAgent(t, Config{})
	ctx := t.Context()
	req := sh("read x; echo got $x")
	req.Tag = proto.String("bg")

	// Start and walk away after the start event.
	sctx, cancel := context.WithCancel(ctx)
	stream, err := c.Process.Start(sctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("first event = %v, %v; want start", stream.Msg(), stream.Err())
	}
	cancel()
	stream.Close()

	list, err := c.Process.List(ctx, connect.NewRequest(&pb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		found = found || p.GetTag() == "bg"
	}
	if !found {
		t.Fatalf("List() = %v; want a process tagged bg", list.Msg)
	}

	// A second Start with the same tag is refused while it runs.
	if _, err := run(ctx, t, c, req, nil); connect.CodeOf(err) != connect.CodeAlreadyExists {
		t.Errorf("Start(tag bg) again = %v; want AlreadyExists", err)
	}

	sel := &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "bg"}}
	cs, err := c.Process.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	var out strings.Builder
	var end *pb.ProcessEvent_EndEvent
	for cs.Receive() {
		switch ev := cs.Msg().GetEvent().GetEvent().(type) {
		case *pb.ProcessEvent_Start:
			in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: []byte("back\n")}}
			if _, err := c.Process.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
				t.Fatal(err)
			}
		case *pb.ProcessEvent_Data:
			out.Write(ev.Data.GetStdout())
		case *pb.ProcessEvent_End:
			end = ev.End
		}
	}
	if err := cs.Err(); err != nil {
		t.Fatal(err)
	}
	if out.String() != "got back\n" || end.GetExitCode() != 0 {
		t.Errorf("Connect(tag bg) output %q, end %v; want %q, exit 0", out.String(), end, "got back\n")
	}
	if _, err := c.Process.Connect(ctx, connect.NewRequest(&pb.ConnectRequest{Process: sel})); err == nil {
		// Connect is a stream: the error may come on first Receive.
		t.Log("connect after end returned no immediate error")
	}
}

func TestHugeOutputFlatMemory(t *testing.T) {
	c := startAgent(t, Config{})
	const size = 200 << 20
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "head", Args: []string{"-c", "209715200", "/dev/zero"}}}
	stream, err := c.Process.Start(t.Context(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var n int
	var maxHeap uint64
	var ms runtime.MemStats
	i := 0
	for stream.Receive() {
		n += len(stream.Msg().GetEvent().GetData().GetStdout())
		if i++; i%500 == 0 {
			runtime.ReadMemStats(&ms)
			maxHeap = max(maxHeap, ms.HeapInuse)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Errorf("received %d bytes; want %d", n, size)
	}
	// Client and server share this process; both must stream.
	if maxHeap > 64<<20 {
		t.Errorf("max HeapInuse = %d MiB while streaming %d MiB; want < 64 MiB", maxHeap>>20, size>>20)
	}
}

func TestOOMReported(t *testing.T) {
	cg := t.TempDir()
	mustWrite(t, cg+"/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
	mustWrite(t, cg+"/memory.max", "536870912\n")
	c := startAgent(t, Config{CgroupPath: cg})
	// The command plays the kernel: it bumps the counter and dies of SIGKILL.
	r, err := run(t.Context(), t, c, sh(`printf 'oom 2\noom_kill 2\n' > `+cg+`/memory.events; kill -9 $$`), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := "killed: out of memory (memory limit 512 MiB)"
	if !r.end.GetOomKilled() || r.end.GetError() != want {
		t.Errorf("end = %v; want oom_killed with error %q", r.end, want)
	}
	// The answer carries the counter at the command's start, for the
	// daemon (agentclient.OOMKillsHeader).
	stream, err := c.Process.Start(t.Context(), connect.NewRequest(sh("true")))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if got := stream.ResponseHeader().Get(oomKillsHeader); got != "2" {
		t.Errorf("Start answer %s = %q; want %q", oomKillsHeader, got, "2")
	}
	// SIGKILL without a counter change is not an OOM.
	r, err = run(t.Context(), t, c, sh(`kill -9 $$`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.end.GetOomKilled() {
		t.Errorf("end = %v; want oom_killed=false", r.end)
	}
}

func TestStopKillsChildren(t *testing.T) {
	c := startAgent(t, Config{StopGrace: 50 * time.Millisecond})
	// Ignores SIGTERM, so Close must escalate to SIGKILL.
	req := sh("trap '' TERM; while :; do sleep 1; done")
	sctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stream, err := c.Process.Start(sctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() {
		t.Fatal(stream.Err())
	}
	// The t.Cleanup of startAgent stops the agent and waits for every end
	// event; a hang there is the failure.
}

// TestEndUsage checks that a command's end event says what CPU time and
// peak memory it used, the descendants it waited for included.
func TestEndUsage(t *testing.T) {
	c := startAgent(t, Config{})
	// A loop, then a child (waited for by the shell) that fills a 32 MiB
	// buffer.
	r, err := run(t.Context(), t, c, sh(`i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; dd if=/dev/zero of=/dev/null bs=32M count=1 2>/dev/null`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.end.GetCpuTimeUs() == 0 {
		t.Errorf("end cpu_time_us = 0; want the CPU time the loop used")
	}
	if peak := r.end.GetPeakMemoryBytes(); peak < 32<<20 {
		t.Errorf("end peak_memory_bytes = %d; want at least the 32 MiB buffer dd filled", peak)
	}
}
