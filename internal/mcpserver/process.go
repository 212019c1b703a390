package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/client"
)

// Wait timeouts of wait_process, in seconds.
const (
	DefaultWaitTimeout = 60
	MaxWaitTimeout     = 3600
)

// procSelector is how the process tools pick a background process.
type procSelector struct {
	Sandbox string `json:"sandbox" jsonschema:"the sandbox's id or name"`
	PID     uint32 `json:"pid,omitempty" jsonschema:"the process's pid (from start_process or list_processes); give pid or tag"`
	Tag     string `json:"tag,omitempty" jsonschema:"the tag the process was started with; give pid or tag"`
}

func (p procSelector) selector() (client.ProcessSelector, error) {
	if (p.PID == 0) == (p.Tag == "") {
		return client.ProcessSelector{}, fmt.Errorf("give pid or tag (one of them) to pick the process: %w", errdefs.ErrInvalidArgument)
	}
	return client.ProcessSelector{PID: p.PID, Tag: p.Tag}, nil
}

// Follow bounds of process_logs, in seconds.
const MaxFollowSeconds = 300

type logsInput struct {
	procSelector
	TailLines        int   `json:"tail_lines,omitempty" jsonschema:"return only the last this many lines of the kept output; 0 returns all of it from the start"`
	MaxOutputKiB     int   `json:"max_output_kib,omitempty" jsonschema:"keep at most this many KiB of stdout and as many of stderr; longer output keeps its first and last halves"`
	SinceStdoutBytes int64 `json:"since_stdout_bytes,omitempty" jsonschema:"return only stdout after this offset: the stdout_bytes of the previous call"`
	SinceStderrBytes int64 `json:"since_stderr_bytes,omitempty" jsonschema:"return only stderr after this offset: the stderr_bytes of the previous call"`
	FollowSeconds    int   `json:"follow_seconds,omitempty" jsonschema:"wait up to this many seconds for output past the since offsets (or the process's end), and return as soon as some arrived"`
}

type logsOutput struct {
	Stdout      string `json:"stdout" jsonschema:"standard output kept so far, or after since_stdout_bytes (all output, for a process on a terminal)"`
	Stderr      string `json:"stderr" jsonschema:"standard error kept so far, or after since_stderr_bytes"`
	StdoutBytes int64  `json:"stdout_bytes" jsonschema:"offset of the end of the stdout returned (before any cut): pass it as since_stdout_bytes to get only what comes next"`
	StderrBytes int64  `json:"stderr_bytes" jsonschema:"offset of the end of the stderr returned: pass it as since_stderr_bytes"`
	Running     bool   `json:"running" jsonschema:"the process still runs; its output goes on"`
	ExitCode    *int   `json:"exit_code,omitempty" jsonschema:"the exit status, once it ended"`
	Note        string `json:"note,omitempty" jsonschema:"what was cut from the output, if anything"`
}

type inputInput struct {
	procSelector
	Input      string `json:"input,omitempty" jsonschema:"text written to the process's stdin as it is (add a newline to end a line)"`
	CloseStdin bool   `json:"close_stdin,omitempty" jsonschema:"close the process's stdin after writing input, so it reads end of file"`
}

type inputOutput struct {
	BytesSent   int  `json:"bytes_sent" jsonschema:"bytes written to the process's stdin"`
	StdinClosed bool `json:"stdin_closed,omitempty" jsonschema:"the process's stdin was closed"`
}

type waitInput struct {
	procSelector
	TimeoutSeconds int `json:"timeout_seconds,omitempty" jsonschema:"stop waiting after this many seconds; the process keeps running"`
}

type waitOutput struct {
	Exited    bool   `json:"exited" jsonschema:"the process ended; false when it still ran at the timeout"`
	PID       uint32 `json:"pid,omitempty" jsonschema:"the process's pid in the sandbox"`
	ExitCode  *int   `json:"exit_code,omitempty" jsonschema:"the exit status once it ended; 128+N when killed by signal N"`
	Signal    string `json:"signal,omitempty" jsonschema:"the signal that ended it, if one did"`
	OOMKilled bool   `json:"oom_killed,omitempty" jsonschema:"it was killed by the OOM killer"`
	TimedOut  bool   `json:"timed_out,omitempty" jsonschema:"it was killed by its own timeout_seconds (from start_process)"`
	Error     string `json:"error,omitempty" jsonschema:"the sandbox's explanation of an abnormal end"`
}

func (s *server) addProcessTools(srv *mcp.Server) {
	pick := func(p map[string]*jsonschema.Schema) {
		nonEmpty(p["sandbox"])
		p["pid"].Minimum = ptr(1.0)
	}
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "process_logs",
		Title: "Read a background process's output",
		Description: fmt.Sprintf(`Read what a background process (from start_process) wrote to stdout and stderr, from its start or, with tail_lines, its last lines. Works while it runs and for a while after it ended (the sandbox keeps the last 64 processes that ended, for 15 minutes). Pick it by pid or tag.
Returns stdout, stderr, running and, once it ended, exit_code, with stdout_bytes and stderr_bytes: pass them back as since_stdout_bytes and since_stderr_bytes to get only the output that came after. It returns at once with what was written so far; to follow a process (a server starting, a build), add follow_seconds: the call then waits up to that many seconds until there is output past the since offsets or the process ended, and returns what arrived (nothing, with running true, when the time ran out); call it again with the new offsets for more. wait_process waits for the end.
Limits: the sandbox keeps the last 1 MiB (by default) of each process's output (offsets count that kept output); stdout and stderr are each returned up to max_output_kib (default %d KiB, at most %d): longer output keeps its first and last halves and note says how much was cut, so prefer tail_lines or the since offsets. follow_seconds is at most %d.`,
			DefaultOutputKiB, MaxOutputKiB, MaxFollowSeconds),
		InputSchema: inputSchema[logsInput](func(p map[string]*jsonschema.Schema) {
			pick(p)
			p["tail_lines"].Minimum = ptr(0.0)
			bounds(p["max_output_kib"], 1, MaxOutputKiB, DefaultOutputKiB)
			p["since_stdout_bytes"].Minimum = ptr(0.0)
			p["since_stderr_bytes"].Minimum = ptr(0.0)
			bounds(p["follow_seconds"], 1, MaxFollowSeconds, 0)
		}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, s.processLogs)

	mcp.AddTool(srv, &mcp.Tool{
		Name:  "send_input",
		Title: "Write to a background process's stdin",
		Description: `Write text to the stdin of a running background process, picked by pid or tag: answer a prompt, feed a REPL, send commands to a server console. The process must have been started by start_process with open_stdin: true (else its stdin is /dev/null and this fails with "failed precondition").
close_stdin: true closes its stdin after the input, so a process that reads to end of file (cat, sort, a script reading stdin) finishes. Returns bytes_sent. Read the answer with process_logs.`,
		InputSchema: inputSchema[inputInput](pick),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}, s.sendInput)

	mcp.AddTool(srv, &mcp.Tool{
		Name:  "wait_process",
		Title: "Wait for a background process to end",
		Description: fmt.Sprintf(`Wait until a background process (from start_process), picked by pid or tag, ends, and return its exit_code and how it ended (signal, oom_killed, timed_out). A process that ended already returns at once.
When it still runs after timeout_seconds (default %d, at most %d), the result is exited: false and the process keeps running: call again, or kill_process. Read its output with process_logs.`,
			DefaultWaitTimeout, MaxWaitTimeout),
		InputSchema: inputSchema[waitInput](func(p map[string]*jsonschema.Schema) {
			pick(p)
			bounds(p["timeout_seconds"], 1, MaxWaitTimeout, DefaultWaitTimeout)
		}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, s.waitProcess)
}

func (s *server) processLogs(ctx context.Context, _ *mcp.CallToolRequest, in logsInput) (*mcp.CallToolResult, *logsOutput, error) {
	sel, err := in.selector()
	if err != nil {
		return nil, nil, err
	}
	out, err := s.readLogs(ctx, in.Sandbox, sel, in)
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: logsText(out)}}}, out, nil
}

// readLogs reads a background process's output as process_logs returns
// it: the kept output (its tail, or what follows the since offsets),
// waiting up to in.FollowSeconds for output past the offsets.
func (s *server) readLogs(ctx context.Context, box string, sel client.ProcessSelector, in logsInput) (*logsOutput, error) {
	if in.TailLines < 0 {
		return nil, fmt.Errorf("tail_lines %d must not be negative (0: all of it): %w", in.TailLines, errdefs.ErrInvalidArgument)
	}
	if in.SinceStdoutBytes < 0 || in.SinceStderrBytes < 0 {
		return nil, fmt.Errorf("since_stdout_bytes and since_stderr_bytes must not be negative (give the previous call's stdout_bytes and stderr_bytes): %w", errdefs.ErrInvalidArgument)
	}
	since := in.SinceStdoutBytes > 0 || in.SinceStderrBytes > 0
	if in.TailLines > 0 && (since || in.FollowSeconds > 0) {
		return nil, fmt.Errorf("tail_lines goes without since_stdout_bytes, since_stderr_bytes and follow_seconds (they pick where the output starts): %w", errdefs.ErrInvalidArgument)
	}
	if in.FollowSeconds < 0 || in.FollowSeconds > MaxFollowSeconds {
		return nil, fmt.Errorf("follow_seconds %d: want 1 to %d (0: do not wait): %w", in.FollowSeconds, MaxFollowSeconds, errdefs.ErrInvalidArgument)
	}
	kib := in.MaxOutputKiB
	if kib == 0 {
		kib = DefaultOutputKiB
	}
	if kib < 0 || kib > MaxOutputKiB {
		return nil, fmt.Errorf("max_output_kib %d: want 1 to %d: %w", kib, MaxOutputKiB, errdefs.ErrInvalidArgument)
	}
	stdout, stderr := newBoundedBuffer(kib<<10), newBoundedBuffer(kib<<10)
	opts := client.LogsOptions{Stdout: stdout, Stderr: stderr, Tail: in.TailLines}
	lctx := ctx
	var arrived chan struct{}
	var so, se *skipWriter
	if since || in.FollowSeconds > 0 {
		// One stream of the kept output and then the live output, so
		// that nothing is lost between the two; the bytes before the
		// offsets are counted, not returned.
		arrived = make(chan struct{})
		var once sync.Once
		signal := func() { once.Do(func() { close(arrived) }) }
		so = &skipWriter{w: stdout, skip: in.SinceStdoutBytes, arrived: signal}
		se = &skipWriter{w: stderr, skip: in.SinceStderrBytes, arrived: signal}
		opts.Stdout, opts.Stderr = so, se
	}
	if in.FollowSeconds > 0 {
		opts.Follow = true
		var cancel context.CancelFunc
		lctx, cancel = context.WithTimeout(ctx, time.Duration(in.FollowSeconds)*time.Second)
		defer cancel()
		go func() {
			select {
			case <-arrived:
				cancel()
			case <-lctx.Done():
			}
		}()
	}
	res, err := s.c.Sandbox(box).Logs(lctx, sel, opts)
	if err != nil && (lctx == ctx || ctx.Err() != nil || !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) && !errdefs.IsDeadlineExceeded(err) && !errdefs.IsCanceled(err)) {
		return nil, err
	}
	if err != nil {
		res = nil // stopped following: the process still runs
	}
	out := &logsOutput{
		Stdout: stdout.String(), Stderr: stderr.String(),
		StdoutBytes: stdout.total, StderrBytes: stderr.total,
		Running: res == nil,
	}
	if so != nil {
		out.StdoutBytes, out.StderrBytes = so.seen, se.seen
	}
	if res != nil {
		out.ExitCode = &res.ExitCode
	}
	var notes []string
	for _, b := range []struct {
		name string
		buf  *boundedBuffer
	}{{"stdout", stdout}, {"stderr", stderr}} {
		if b.buf.cut() {
			notes = append(notes, fmt.Sprintf("%s was %s, more than max_output_kib (%d KiB): its middle was cut; use tail_lines or the since offsets", b.name, client.FormatBytes(b.buf.total), kib))
		}
	}
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

// skipWriter drops the first skip bytes written to it, passes the rest
// to w, and calls arrived at the first byte past skip; seen counts every
// byte.
type skipWriter struct {
	w       io.Writer
	skip    int64
	seen    int64
	arrived func()
}

func (s *skipWriter) Write(b []byte) (int, error) {
	n := len(b)
	start := s.seen
	s.seen += int64(n)
	if s.seen <= s.skip {
		return n, nil
	}
	if start < s.skip {
		b = b[s.skip-start:]
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	s.arrived()
	return n, nil
}

// logsText is process_logs' result as the model reads it.
func logsText(o *logsOutput) string {
	var b strings.Builder
	if o.Running {
		b.WriteString("running\n")
	} else {
		fmt.Fprintf(&b, "exited: exit_code %d\n", *o.ExitCode)
	}
	writeStreams(&b, o.Note, o.Stdout, o.Stderr)
	return b.String()
}

func (s *server) sendInput(ctx context.Context, _ *mcp.CallToolRequest, in inputInput) (*mcp.CallToolResult, *inputOutput, error) {
	sel, err := in.selector()
	if err != nil {
		return nil, nil, err
	}
	if in.Input == "" && !in.CloseStdin {
		return nil, nil, fmt.Errorf("input is empty and close_stdin is not set: give the text to write, or close_stdin: true: %w", errdefs.ErrInvalidArgument)
	}
	sb := s.c.Sandbox(in.Sandbox)
	if in.Input != "" {
		if err := sb.SendInput(ctx, sel, []byte(in.Input)); err != nil {
			if errdefs.IsFailedPrecondition(err) {
				return nil, nil, fmt.Errorf("%w (start the process with start_process and open_stdin: true to write to it)", err)
			}
			return nil, nil, err
		}
	}
	if in.CloseStdin {
		if err := sb.CloseStdin(ctx, sel); err != nil {
			return nil, nil, err
		}
	}
	return nil, &inputOutput{BytesSent: len(in.Input), StdinClosed: in.CloseStdin}, nil
}

func (s *server) waitProcess(ctx context.Context, _ *mcp.CallToolRequest, in waitInput) (*mcp.CallToolResult, *waitOutput, error) {
	sel, err := in.selector()
	if err != nil {
		return nil, nil, err
	}
	timeout := in.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultWaitTimeout
	}
	if timeout < 0 || timeout > MaxWaitTimeout {
		return nil, nil, fmt.Errorf("timeout_seconds %d: want 1 to %d: %w", timeout, MaxWaitTimeout, errdefs.ErrInvalidArgument)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Duration(timeout)*time.Second)
	defer cancel()
	res, err := s.c.Sandbox(in.Sandbox).Wait(wctx, sel)
	if err != nil {
		// The wait's own bound may end it on the daemon's side first
		// (the request carries its deadline), before wctx is done here.
		timedOut := wctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errdefs.IsDeadlineExceeded(err)
		if timedOut && ctx.Err() == nil {
			return nil, &waitOutput{Exited: false, PID: sel.PID}, nil
		}
		return nil, nil, err
	}
	return nil, &waitOutput{
		Exited: true, PID: res.PID, ExitCode: &res.ExitCode,
		Signal: res.Signal, OOMKilled: res.OOMKilled, TimedOut: res.TimedOut, Error: res.Error,
	}, nil
}
