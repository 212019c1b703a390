package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs"

	fspb "github.com/corral-sandbox/corral/api/gen/filesystem"
	pb "github.com/corral-sandbox/corral/api/gen/process"
)

// Process is a command the agent tracks: running, or ended recently (the
// agent keeps the last 64 that ended, for 15 minutes).
type Process struct {
	PID  uint32            `json:"pid"`
	Tag  string            `json:"tag,omitempty"`
	Cmd  []string          `json:"cmd"`
	Cwd  string            `json:"cwd,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	User string            `json:"user,omitempty"`
	// State is "running" or "exited".
	State string `json:"state"`
	// TTY is set for a command on a pseudo-terminal; Stdin when its
	// stdin is open for SendInput.
	TTY   bool `json:"tty,omitempty"`
	Stdin bool `json:"stdin,omitempty"`
	// StartedAt is when it started; EndedAt when it ended (zero while it
	// runs).
	StartedAt time.Time `json:"started_at,omitzero"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// Exit is how it ended (as Exec's result); nil while it runs.
	Exit *ExitStatus `json:"exit,omitempty"`
	// OutputBytes is the output the agent keeps for Logs and Attach;
	// OutputDroppedBytes what it dropped to stay within its buffer: the
	// bytes between the start it keeps and its newest output.
	OutputBytes        uint64 `json:"output_bytes"`
	OutputDroppedBytes uint64 `json:"output_dropped_bytes,omitempty"`
}

// ExitStatus is how a command ended: ExecResult's fields, for JSON.
type ExitStatus struct {
	ExitCode  int    `json:"exit_code"`
	Signal    string `json:"signal,omitempty"`
	OOMKilled bool   `json:"oom_killed,omitempty"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ListProcessesOptions filter ListProcesses.
type ListProcessesOptions struct {
	// Ended lists the commands that ended recently too, after the
	// running ones, in the order they ended.
	Ended bool
}

// ListProcesses lists the commands started through the agent: the running
// ones by PID and, with opts.Ended, those that ended recently.
func (s *Sandbox) ListProcesses(ctx context.Context, opts ListProcessesOptions) ([]Process, error) {
	req := &pb.ListRequest{}
	if opts.Ended {
		req.IncludeEnded = &opts.Ended
	}
	resp, err := s.proc.List(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fromConnect(ctx, err)
	}
	var out []Process
	for _, p := range resp.Msg.GetProcesses() {
		cfg := p.GetConfig()
		pr := Process{
			PID:                p.GetPid(),
			Tag:                p.GetTag(),
			Cmd:                append([]string{cfg.GetCmd()}, cfg.GetArgs()...),
			Cwd:                cfg.GetCwd(),
			Env:                cfg.GetEnvs(),
			User:               cfg.GetUser(),
			State:              "running",
			TTY:                p.GetPty(),
			Stdin:              p.GetStdin(),
			OutputBytes:        p.GetOutputBytes(),
			OutputDroppedBytes: p.GetOutputDroppedBytes(),
		}
		if ms := p.GetStartedAtMs(); ms > 0 {
			pr.StartedAt = time.UnixMilli(ms)
		}
		if p.End != nil {
			pr.State = "exited"
			if ms := p.GetEndedAtMs(); ms > 0 {
				pr.EndedAt = time.UnixMilli(ms)
			}
			r := endResult(p.GetPid(), p.GetEnd())
			pr.Exit = &ExitStatus{ExitCode: r.ExitCode, Signal: r.Signal, OOMKilled: r.OOMKilled, TimedOut: r.TimedOut, Error: r.Error}
		}
		out = append(out, pr)
	}
	return out, nil
}

// Wait waits until the command p selects ends and returns how it ended,
// as Exec does; for a command that ended already (and that the agent still
// keeps) it returns at once. errdefs.ErrNotFound when no command matches.
func (s *Sandbox) Wait(ctx context.Context, p ProcessSelector) (*ExecResult, error) {
	return s.Attach(ctx, p, AttachOptions{})
}

// LogsOptions say which output Logs writes and where.
type LogsOptions struct {
	// Stdout and Stderr receive the output; nil discards it. A command
	// on a terminal has all of its output on Stdout.
	Stdout, Stderr io.Writer
	// Tail writes only the last Tail lines of the kept output (0: all).
	Tail int
	// Follow goes on with the live output until the command ends.
	Follow bool
	// Gap, when set, is called where the output lacks bytes that
	// neither the agent nor the daemon's log file kept: the agent keeps
	// the start and the end of a command's output, and drops the middle
	// of one longer than its output buffer. nil: nothing marks the gap.
	Gap func(dropped uint64)
}

// Logs writes the output of the command p selects from its start: the agent
// keeps 1 MiB of each command's (by default), its first bytes and its
// newest (see Process.OutputDroppedBytes), running or ended recently; with
// the daemon's [output_log] on, bytes it dropped come from the daemon's
// log file of the command when the file has them, else opts.Gap marks
// them. A command the agent no longer knows (it ended
// long ago, or the agent restarted) but that has a log file, selected by
// pid, has the file's output and a nil result (how it ended is not
// known). The result is how
// the command ended, or nil when it still runs (without Follow, Logs
// returns once the kept output is written). errdefs.ErrNotFound when no
// command matches.
func (s *Sandbox) Logs(ctx context.Context, p ProcessSelector, opts LogsOptions) (*ExecResult, error) {
	if opts.Tail < 0 {
		return nil, fmt.Errorf("logs: tail %d must not be negative (0 writes all of it): %w", opts.Tail, errdefs.ErrInvalidArgument)
	}
	sel, err := p.pb()
	if err != nil {
		return nil, err
	}
	req := &pb.ConnectRequest{Process: sel, Replay: ptr(true), Follow: ptr(opts.Follow)}
	if opts.Tail > 0 {
		req.TailLines = ptr(uint32(min(opts.Tail, 1<<31)))
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.proc.Connect(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fromConnect(ctx, err)
	}
	defer stream.Close()
	ls := &logFileStream{ctx: ctx, s: s, stream: stream, gap: opts.Gap}
	if opts.Follow {
		res, err := receiveOutput(ctx, ls, p.PID, opts.Stdout, opts.Stderr, cancel, s.goneError(parent))
		if errdefs.IsNotFound(err) && !ls.checked && s.logFile(ctx, p, opts) {
			return nil, nil
		}
		return res, err
	}
	res, err := receiveOutput(ctx, ls, p.PID, opts.Stdout, opts.Stderr, cancel, func(err error) error { return err })
	if errdefs.IsNotFound(err) && !ls.checked && s.logFile(ctx, p, opts) {
		return nil, nil // the agent forgot the command; the log file has its output
	}
	var ne *noEndError
	if errors.As(err, &ne) {
		return nil, nil // the replay of a running command ended
	}
	return res, err
}

// AttachOptions say what Attach forwards.
type AttachOptions struct {
	// Stdout and Stderr receive the output; nil discards it.
	Stdout, Stderr io.Writer
	// Replay first writes the output the agent kept since the command
	// started (see Logs), then the live output.
	Replay bool
	// Stdin, when set, is forwarded to the command's stdin (or terminal)
	// while Attach runs; the command needs an open stdin (ExecOptions'
	// Stdin, OpenStdin or TTY). At its EOF, the command's stdin stays
	// open unless CloseStdin is set, so that Attach can be repeated.
	Stdin      io.Reader
	CloseStdin bool
	// Resize carries terminal size changes of a command on a terminal.
	Resize <-chan Size
}

// Attach reattaches to the command p selects: it writes its output (with
// opts.Replay, from the start), forwards opts.Stdin, and returns how the
// command ended, as Exec does. A command that ended already (and that the
// agent still keeps) returns at once. When ctx ends first, Attach returns
// its error and the command keeps running. errdefs.ErrNotFound when no
// command matches.
func (s *Sandbox) Attach(ctx context.Context, p ProcessSelector, opts AttachOptions) (*ExecResult, error) {
	sel, err := p.pb()
	if err != nil {
		return nil, err
	}
	req := &pb.ConnectRequest{Process: sel}
	if opts.Replay {
		req.Replay = ptr(true)
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := s.proc.Connect(ctx, connect.NewRequest(req))
	if err != nil {
		return nil, fromConnect(ctx, err)
	}
	defer stream.Close()
	pid := p.PID
	if opts.Stdin != nil || opts.Resize != nil {
		// Input goes to the pid of the start event: a tag may be taken
		// by another command once this one ended.
		for {
			if !stream.Receive() {
				return receiveOutput(ctx, stream, pid, opts.Stdout, opts.Stderr, cancel, s.goneError(parent))
			}
			ev := stream.Msg().GetEvent()
			if st := ev.GetStart(); st != nil {
				pid = st.GetPid()
				break
			}
			if ev.GetKeepalive() == nil {
				return nil, fmt.Errorf("attach: %T before the start event: %w", ev.GetEvent(), errdefs.ErrInternal)
			}
		}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if opts.Stdin != nil {
		go s.forwardInput(ctx, pid, opts.Stdin, opts.CloseStdin)
	}
	if opts.Resize != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.forwardResize(ctx, pid, opts.Resize)
		}()
	}
	res, err := receiveOutput(ctx, stream, pid, opts.Stdout, opts.Stderr, cancel, s.goneError(parent))
	cancel()
	return res, err
}

// forwardInput sends what r reads to pid's stdin until EOF or ctx ends;
// then closes the command's stdin when closeAtEOF is set.
func (s *Sandbox) forwardInput(ctx context.Context, pid uint32, r io.Reader, closeAtEOF bool) {
	buf := make([]byte, stdinChunk)
	for {
		n, err := r.Read(buf)
		if ctx.Err() != nil {
			return
		}
		if n > 0 {
			if serr := s.SendInput(ctx, ProcessSelector{PID: pid}, buf[:n]); serr != nil {
				s.c.logger.DebugContext(ctx, "send input", "pid", pid, "error", serr)
				return
			}
		}
		if err != nil {
			if closeAtEOF && errors.Is(err, io.EOF) {
				if cerr := s.CloseStdin(ctx, ProcessSelector{PID: pid}); cerr != nil {
					s.c.logger.DebugContext(ctx, "close stdin", "pid", pid, "error", cerr)
				}
			}
			return
		}
	}
}

// SendInput writes data to the stdin (or terminal) of the command p
// selects; it needs an open stdin (ExecOptions' Stdin, OpenStdin or TTY),
// else errdefs.ErrFailedPrecondition.
func (s *Sandbox) SendInput(ctx context.Context, p ProcessSelector, data []byte) error {
	sel, err := p.pb()
	if err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), stdinChunk)
		in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: data[:n]}}
		if _, err := s.proc.SendInput(ctx, connect.NewRequest(&pb.SendInputRequest{Process: sel, Input: in})); err != nil {
			return fromConnect(ctx, err)
		}
		data = data[n:]
	}
	return nil
}

// CloseStdin closes the stdin of the command p selects (it reads EOF). A
// command on a terminal refuses (errdefs.ErrFailedPrecondition): send it
// Ctrl-D ("\x04") with SendInput instead. Closing a closed stdin is
// success.
func (s *Sandbox) CloseStdin(ctx context.Context, p ProcessSelector) error {
	sel, err := p.pb()
	if err != nil {
		return err
	}
	_, err = s.proc.CloseStdin(ctx, connect.NewRequest(&pb.CloseStdinRequest{Process: sel}))
	return fromConnect(ctx, err)
}

// FileEvent is one change that WatchDir reports.
type FileEvent struct {
	// Name is the changed entry's path relative to the watched directory.
	Name string `json:"name"`
	// Type is "create", "write", "remove", "rename" or "chmod".
	Type string `json:"type"`
	// Entry describes the entry after the change, with
	// WatchOptions.IncludeEntry, when it still exists.
	Entry *Entry `json:"entry,omitempty"`
}

// WatchOptions say what WatchDir watches.
type WatchOptions struct {
	// Recursive watches the subdirectories too.
	Recursive bool
	// IncludeEntry describes each changed entry (FileEvent.Entry).
	IncludeEntry bool
}

// DirWatch is a running WatchDir. Read Events until it is closed, then
// Err says why it ended.
type DirWatch struct {
	// Events delivers the changes in order; it is closed when the watch
	// ends (Close, the context, or an error: see Err).
	Events <-chan FileEvent
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// Close ends the watch and waits for Events to be closed.
func (w *DirWatch) Close() error {
	w.cancel()
	<-w.done
	return nil
}

// Err is why the watch ended, once Events is closed: nil after Close or
// when the context ended.
func (w *DirWatch) Err() error {
	select {
	case <-w.done:
		return w.err
	default:
		return nil
	}
}

// WatchDir watches the directory path in the sandbox. It returns once the
// watch is in place: every change after that is reported on Events. The
// caller must read Events (or Close the watch); a reader that stops holds
// the stream, not memory.
func (s *Sandbox) WatchDir(ctx context.Context, path string, opts WatchOptions) (*DirWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := s.fs.WatchDir(ctx, connect.NewRequest(&fspb.WatchDirRequest{Path: path, Recursive: opts.Recursive, IncludeEntry: opts.IncludeEntry}))
	if err != nil {
		cancel()
		return nil, fromConnect(ctx, err)
	}
	for {
		if !stream.Receive() {
			err := stream.Err()
			if err == nil {
				err = fmt.Errorf("watch %s: stream ended before the start event: %w", path, errdefs.ErrUnavailable)
			}
			stream.Close()
			err = fromConnect(ctx, err)
			cancel()
			return nil, err
		}
		if stream.Msg().GetStart() != nil {
			break
		}
	}
	events := make(chan FileEvent)
	w := &DirWatch{Events: events, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer close(events)
		defer stream.Close()
		for stream.Receive() {
			fe := stream.Msg().GetFilesystem()
			if fe == nil {
				continue // keepalive
			}
			ev := FileEvent{Name: fe.GetName(), Type: eventType(fe.GetType())}
			if fe.Entry != nil {
				ev.Entry = entryFrom(fe.GetEntry())
			}
			select {
			case events <- ev:
			case <-ctx.Done():
				return
			}
		}
		if err := stream.Err(); err != nil && ctx.Err() == nil {
			w.err = fromConnect(ctx, err)
		}
	}()
	return w, nil
}

func eventType(t fspb.EventType) string {
	switch t {
	case fspb.EventType_EVENT_TYPE_CREATE:
		return "create"
	case fspb.EventType_EVENT_TYPE_WRITE:
		return "write"
	case fspb.EventType_EVENT_TYPE_REMOVE:
		return "remove"
	case fspb.EventType_EVENT_TYPE_RENAME:
		return "rename"
	case fspb.EventType_EVENT_TYPE_CHMOD:
		return "chmod"
	}
	return ""
}

func ptr[T any](v T) *T { return &v }
