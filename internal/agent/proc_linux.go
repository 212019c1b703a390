package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/log"
)

// chunkSize is the read size of command output: one DataEvent at most.
const chunkSize = 32 << 10

// subscriber is one attached stream (Start or Connect). Events are delivered
// with back-pressure: a slow client slows the command's output down instead
// of growing a buffer. A client that goes away unsubscribes; the command
// keeps running and its output is dropped while nobody listens.
type subscriber struct {
	ch   chan *pb.ProcessEvent // closed by the process after the end event
	done chan struct{}         // closed by unsubscribe
	once sync.Once
}

// proc is one command forked by the agent.
type proc struct {
	pid    int
	tag    string
	config *pb.ProcessConfig
	isPTY  bool

	stdinMu sync.Mutex
	// stdin is the write side of the command's stdin pipe, or the PTY
	// master; nil when stdin was not requested or was closed.
	// guarded by stdinMu
	stdin *os.File

	ptyMaster *os.File // nil without a PTY

	started time.Time

	mu sync.Mutex
	// guarded by mu
	subs []*subscriber
	// guarded by mu
	ended bool
	// out is the output kept for replay; nil when the agent keeps none
	// (or no longer keeps this ended command's).
	// guarded by mu
	out *outputLog
	// end and endedAt say how and when the command ended, once ended.
	// guarded by mu
	end     *pb.ProcessEvent_EndEvent
	endedAt time.Time
	// collected is set once a client received the end event (or the
	// output of an ended command): until then an ended command's record
	// keeps the agent from exiting when idle.
	// guarded by mu
	collected bool

	timedOut chan struct{} // closed when the timeout killed the command
	endedCh  chan struct{} // closed after the end event was delivered

	// oomBefore is the box's OOM kill counter read before the fork (when
	// oomKnown), also sent to the daemon (oomKillsHeader).
	oomBefore uint64
	oomKnown  bool
}

func (p *proc) subscribe() (*subscriber, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil, fmt.Errorf("process %d: %w", p.pid, errNotFound)
	}
	s := &subscriber{ch: make(chan *pb.ProcessEvent, 16), done: make(chan struct{})}
	p.subs = append(p.subs, s)
	return s, nil
}

func (p *proc) unsubscribe(s *subscriber) {
	s.once.Do(func() { close(s.done) })
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.subs {
		if x == s {
			p.subs = append(p.subs[:i], p.subs[i+1:]...)
			break
		}
	}
}

// attach returns what a Connect stream sends: with replay, the output kept
// so far (its last tail lines when tail > 0); then end for a command that
// ended, else, when follow is set, a subscriber for the live output.
// Output is kept and subscribers are taken under one lock, so the replay
// and the live output neither overlap nor leave a gap.
//
// With replay and no tail, only the output from byte offset from on is
// replayed; first is the offset of its first byte (see outputLog.from).
func (p *proc) attach(replay bool, tail int, from uint64, follow bool) (chunks []outChunk, first uint64, sub *subscriber, end *pb.ProcessEvent_EndEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if replay {
		if tail > 0 {
			chunks = p.out.snapshot(tail)
		} else {
			chunks, first = p.out.from(from)
		}
	}
	if p.ended {
		return chunks, first, nil, p.end
	}
	if !follow {
		return chunks, first, nil, nil
	}
	s := &subscriber{ch: make(chan *pb.ProcessEvent, 16), done: make(chan struct{})}
	p.subs = append(p.subs, s)
	return chunks, first, s, nil
}

// markCollected records that a client received the end event.
func (p *proc) markCollected() {
	p.mu.Lock()
	p.collected = true
	p.mu.Unlock()
}

// publishOutput keeps b for replay and delivers it to every subscriber.
func (p *proc) publishOutput(kind outKind, b []byte) {
	p.mu.Lock()
	if p.out != nil {
		p.out.add(kind, b)
	}
	subs := append([]*subscriber(nil), p.subs...)
	p.mu.Unlock()
	if len(subs) == 0 {
		return
	}
	p.deliver(subs, dataEvent(kind, b))
}

// deliver hands ev to each of subs, waiting for each to take it.
func (p *proc) deliver(subs []*subscriber, ev *pb.ProcessEvent) {
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.done:
		}
	}
}

// finish delivers the end event and closes every subscriber.
func (p *proc) finish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	p.ended = true
	p.end = ev.GetEnd()
	p.endedAt = time.Now()
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.done:
		}
		close(s.ch)
	}
	close(p.endedCh)
}

func (p *proc) signal(sig unix.Signal) error {
	// The command leads its own process group (or session, with a PTY).
	if err := unix.Kill(-p.pid, sig); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("signal process %d: %w", p.pid, errNotFound)
		}
		return fmt.Errorf("signal process %d: %w", p.pid, err)
	}
	return nil
}

func (p *proc) writeInput(b []byte) error {
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return fmt.Errorf("process %d: stdin is closed or not enabled: %w", p.pid, errPrecondition)
	}
	if _, err := p.stdin.Write(b); err != nil {
		return fmt.Errorf("write stdin: %w", err)
	}
	return nil
}

func (p *proc) closeStdin() error {
	if p.isPTY {
		return fmt.Errorf("process %d has a pty; send ctrl-d instead: %w", p.pid, errPrecondition)
	}
	p.stdinMu.Lock()
	defer p.stdinMu.Unlock()
	if p.stdin == nil {
		return nil
	}
	err := p.stdin.Close()
	p.stdin = nil
	return err
}

func (p *proc) resize(size *pb.PTY_Size) error {
	if p.ptyMaster == nil {
		return fmt.Errorf("process %d has no pty: %w", p.pid, errPrecondition)
	}
	return pty.Setsize(p.ptyMaster, &pty.Winsize{Rows: uint16(size.GetRows()), Cols: uint16(size.GetCols())})
}

// startSpec is a resolved Start request.
type startSpec struct {
	argv    []string
	path    string
	env     []string
	dir     string
	cred    *syscall.Credential
	pty     *pb.PTY_Size // nil without a PTY
	stdin   bool
	timeout time.Duration // 0: none
	tag     string
	config  *pb.ProcessConfig
	cgroup  cgroupMem
	grace   time.Duration
	// outputMax bounds the output kept for replay (0: none kept).
	outputMax int
	onFinish  func(*proc)
}

// startProc forks the command and starts the goroutines that stream its
// output, wait for its exit and deliver the end event. first is subscribed
// before any output is read, so the Start stream sees everything.
func startProc(ctx context.Context, r *reaper, sp startSpec) (*proc, *subscriber, error) {
	p := &proc{
		tag:      sp.tag,
		config:   sp.config,
		isPTY:    sp.pty != nil,
		started:  time.Now(),
		timedOut: make(chan struct{}),
		endedCh:  make(chan struct{}),
	}
	attr := &os.ProcAttr{Dir: sp.dir, Env: sp.env, Sys: &syscall.SysProcAttr{Credential: sp.cred}}
	var (
		readers  []*os.File // output sources, closed by their reader
		childEnd []*os.File // closed in the parent after the fork
		kinds    []outKind
	)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			if f != nil {
				f.Close()
			}
		}
	}
	if sp.pty != nil {
		master, tty, err := pty.Open()
		if err != nil {
			return nil, nil, fmt.Errorf("open pty: %w", err)
		}
		if sp.pty.GetCols() > 0 && sp.pty.GetRows() > 0 {
			_ = pty.Setsize(master, &pty.Winsize{Rows: uint16(sp.pty.GetRows()), Cols: uint16(sp.pty.GetCols())})
		}
		attr.Files = []*os.File{tty, tty, tty}
		attr.Sys.Setsid = true
		attr.Sys.Setctty = true
		attr.Sys.Ctty = 0
		childEnd = []*os.File{tty}
		readers = []*os.File{master}
		kinds = []outKind{outPTY}
		p.ptyMaster = master
		p.stdin = master
	} else {
		attr.Sys.Setpgid = true
		var stdinR *os.File
		if sp.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return nil, nil, fmt.Errorf("stdin pipe: %w", err)
			}
			stdinR, p.stdin = r, w
		} else {
			f, err := os.Open(os.DevNull)
			if err != nil {
				return nil, nil, fmt.Errorf("open %s: %w", os.DevNull, err)
			}
			stdinR = f
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{stdinR, p.stdin})
			return nil, nil, fmt.Errorf("stdout pipe: %w", err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{stdinR, p.stdin, outR, outW})
			return nil, nil, fmt.Errorf("stderr pipe: %w", err)
		}
		attr.Files = []*os.File{stdinR, outW, errW}
		childEnd = []*os.File{stdinR, outW, errW}
		readers = []*os.File{outR, errR}
		kinds = []outKind{outStdout, outStderr}
	}

	oomBefore, oomKnown := sp.cgroup.oomKills()
	pid, exitCh, err := r.start(func() (int, error) {
		pr, err := os.StartProcess(sp.path, sp.argv, attr)
		if err != nil {
			return 0, err
		}
		pid := pr.Pid
		// The reaper waits for it; drop the pidfd handle.
		_ = pr.Release()
		return pid, nil
	})
	closeAll(childEnd)
	if err != nil {
		closeAll(readers)
		if !p.isPTY && p.stdin != nil {
			p.stdin.Close()
		}
		// Not prefixed with the command: os.StartProcess's error names
		// its path already ("fork/exec /bin/x: ..."), and clients add
		// the command they asked for.
		return nil, nil, err
	}
	p.pid = pid
	p.oomBefore, p.oomKnown = oomBefore, oomKnown
	if sp.outputMax > 0 {
		p.out = newOutputLog(sp.outputMax)
	}
	// The runtime starts the agent with a low oom_score_adj so the OOM
	// killer picks commands; give commands the neutral score back.
	if err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte("0"), 0); err != nil {
		log.G(ctx).Debug("set oom_score_adj", "pid", pid, "error", err)
	}
	first, _ := p.subscribe()

	var timer *time.Timer
	if sp.timeout > 0 {
		timer = time.AfterFunc(sp.timeout, func() {
			close(p.timedOut)
			_ = unix.Kill(-pid, unix.SIGKILL)
		})
	}

	exited := make(chan struct{})
	var wg sync.WaitGroup
	for i, f := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pump(f, kinds[i], exited, sp.grace)
		}()
	}
	go func() {
		ex := <-exitCh
		ws := ex.WaitStatus
		close(exited)
		if timer != nil {
			timer.Stop()
		}
		wg.Wait()
		p.stdinMu.Lock()
		if p.stdin != nil && !p.isPTY {
			p.stdin.Close()
		}
		p.stdin = nil
		p.stdinMu.Unlock()
		end := endEvent(ws)
		end.CpuTimeUs, end.PeakMemoryBytes = usage(&ex.Rusage)
		select {
		case <-p.timedOut:
			end.TimedOut = true
			end.Error = proto.String("killed: timeout expired")
		default:
			if ws.Signaled() && ws.Signal() == unix.SIGKILL && oomKnown {
				if after, ok := sp.cgroup.oomKills(); ok && after > oomBefore {
					end.OomKilled = true
					end.Error = proto.String(sp.cgroup.oomError())
				}
			}
		}
		if sp.onFinish != nil {
			sp.onFinish(p)
		}
		p.finish(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
	}()
	return p, first, nil
}

// pump streams one output source until EOF. After the command exited it
// keeps reading for grace (a background child may still hold the pipe),
// then drains what is buffered without blocking and stops.
func (p *proc) pump(f *os.File, kind outKind, exited <-chan struct{}, grace time.Duration) {
	defer f.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-exited:
		case <-stop:
			return
		}
		select {
		case <-time.After(grace):
			if err := f.SetReadDeadline(time.Now()); err != nil {
				f.Close() // not pollable: unblock the read the hard way
			}
		case <-stop:
		}
	}()
	for {
		buf := make([]byte, chunkSize)
		n, err := f.Read(buf)
		if n > 0 {
			p.publishOutput(kind, buf[:n])
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			p.drain(f, kind)
			return
		}
		if err != nil {
			// io.EOF for pipes, EIO for a PTY master whose slave is gone.
			return
		}
	}
}

// drain reads what is left in a pollable pipe without waiting.
func (p *proc) drain(f *os.File, kind outKind) {
	_ = f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		buf := make([]byte, chunkSize)
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return true
		})
		if err != nil || rerr != nil || n <= 0 {
			return
		}
		p.publishOutput(kind, buf[:n])
	}
}

func dataEvent(kind outKind, b []byte) *pb.ProcessEvent {
	d := &pb.ProcessEvent_DataEvent{}
	switch kind {
	case outStdout:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}
	case outStderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: b}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// usage returns the CPU time (user and system, microseconds) and the peak
// resident set size (bytes) of ru.
func usage(ru *unix.Rusage) (cpuUS, peakBytes uint64) {
	us := func(t unix.Timeval) int64 { return t.Sec*1e6 + t.Usec }
	cpu := us(ru.Utime) + us(ru.Stime)
	return uint64(max(cpu, 0)), uint64(max(ru.Maxrss, 0)) * 1024 // Maxrss is in KiB
}

// endEvent describes a wait status the way os.ProcessState does.
func endEvent(ws unix.WaitStatus) *pb.ProcessEvent_EndEvent {
	e := &pb.ProcessEvent_EndEvent{ExitCode: -1}
	switch {
	case ws.Exited():
		e.Exited = true
		e.ExitCode = int32(ws.ExitStatus())
		e.Status = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		e.Status = "signal: " + ws.Signal().String()
		if ws.CoreDump() {
			e.Status += " (core dumped)"
		}
	default:
		e.Status = fmt.Sprintf("wait status %#x", uint32(ws))
	}
	return e
}
