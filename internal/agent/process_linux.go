package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/gen/process/processconnect"
	"github.com/corral-sandbox/corral/internal/agent/execcheck"
	"github.com/corral-sandbox/corral/internal/log"
)

// keepaliveInterval is how often an idle output stream gets a keepalive
// event, so proxies do not close it.
const keepaliveInterval = 30 * time.Second

// processService implements process.Process.
type processService struct {
	cfg    Config
	live   *liveDefaults
	reaper *reaper
	base   context.Context // lifetime of the agent, owns the commands

	mu sync.Mutex
	// procs holds the commands that have not ended yet, by pid.
	// guarded by mu
	procs map[int]*proc
	// ended holds the commands that ended, oldest first: at most
	// cfg.EndedKeep, for at most cfg.EndedTTL (see pruneLocked).
	// guarded by mu
	ended []*proc
	// onEnd, if set, runs after a command ended (the idle clock).
	onEnd func()
}

var _ processconnect.ProcessHandler = (*processService)(nil)

func newProcessService(ctx context.Context, cfg Config, r *reaper) *processService {
	return &processService{cfg: cfg, reaper: r, base: ctx, procs: make(map[int]*proc)}
}

// userFromHeader returns the user an E2B client names in
// "Authorization: Basic base64(user:)", or "".
func userFromHeader(h http.Header) string {
	a := h.Get("Authorization")
	enc, ok := strings.CutPrefix(a, "Basic ")
	if !ok {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u
}

// resolveUser looks up name, the default user, or the agent's own user.
// It returns a nil credential when no switch is needed.
func resolveUser(cfg Config, name string) (*account, *syscall.Credential, error) {
	if name == "" {
		name = cfg.DefaultUser
	}
	if name == "" {
		name = strconv.Itoa(os.Geteuid())
	}
	acc, err := lookupUser(cfg.PasswdPath, cfg.GroupPath, name)
	if err != nil {
		return nil, nil, err
	}
	if int(acc.UID) == os.Geteuid() && int(acc.GID) == os.Getegid() {
		return acc, nil, nil
	}
	return acc, &syscall.Credential{Uid: acc.UID, Gid: acc.GID, Groups: acc.Groups}, nil
}

// defaultEnv is the agent's environment minus its own CORRAL_* variables.
func defaultEnv(cfg Config) []string {
	if cfg.Env != nil {
		return slices.Clone(cfg.Env)
	}
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "CORRAL_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// mergeEnv overlays over on base; later keys win, order is stable.
func mergeEnv(base []string, over map[string]string) []string {
	idx := make(map[string]int, len(base))
	out := make([]string, 0, len(base)+len(over))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	keys := make([]string, 0, len(over))
	for k := range over {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kv := k + "=" + over[k]
		if i, ok := idx[k]; ok {
			out[i] = kv
			continue
		}
		idx[k] = len(out)
		out = append(out, kv)
	}
	return out
}

func envGet(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath finds name on the command's PATH (not the agent's).
func lookPath(name, pathEnv, dir string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("empty command: %w", errInvalidArgument)
	}
	if strings.Contains(name, "/") {
		if !filepath.IsAbs(name) {
			name = filepath.Join(dir, name)
		}
		return name, nil
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		p := filepath.Join(d, name)
		var st unix.Stat_t
		if unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found in PATH: %w", name, errNotFound)
}

func (s *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	msg := req.Msg
	pc := msg.GetProcess()
	if pc == nil || pc.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	userName := pc.GetUser()
	if userName == "" {
		userName = userFromHeader(req.Header())
	}
	cfg := s.live.apply(s.cfg)
	acc, cred, err := resolveUser(cfg, userName)
	if err != nil {
		return connectErr(err)
	}
	home := cfg.Workdir
	if home == "" {
		home = acc.Home
		if st, err := os.Stat(home); err != nil || !st.IsDir() {
			home = "/"
		}
	}
	env := defaultEnv(cfg)
	env = mergeEnv(env, map[string]string{"HOME": acc.Home, "USER": acc.Name, "LOGNAME": acc.Name})
	if envGet(env, "PATH") == "" {
		env = mergeEnv(env, map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
	}
	env = mergeEnv(env, pc.GetEnvs())
	dir := home
	if pc.Cwd != nil && pc.GetCwd() != "" {
		dir = resolvePath(home, pc.GetCwd())
	}
	if err := checkWorkdir(dir); err != nil {
		return connectErr(err)
	}
	path, err := lookPath(pc.GetCmd(), envGet(env, "PATH"), dir)
	if err != nil {
		return connectErr(err)
	}
	argv := append([]string{pc.GetCmd()}, pc.GetArgs()...)
	if err := checkExec(path, argv, env, pc.GetEnvs()); err != nil {
		return connectErr(err)
	}
	var timeout time.Duration
	for _, ms := range []uint64{pc.GetTimeoutMs(), msg.GetTimeoutMs()} {
		if d := time.Duration(ms) * time.Millisecond; ms > 0 && (timeout == 0 || d < timeout) {
			timeout = d
		}
	}
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); timeout == 0 || d < timeout {
			timeout = max(d, time.Millisecond)
		}
	}
	sp := startSpec{
		argv:      argv,
		path:      path,
		env:       env,
		dir:       dir,
		cred:      cred,
		stdin:     msg.Stdin == nil || msg.GetStdin(),
		timeout:   timeout,
		tag:       msg.GetTag(),
		config:    pc,
		cgroup:    cgroupMem{root: s.cfg.CgroupPath},
		grace:     s.cfg.ExitGrace,
		outputMax: max(s.cfg.OutputBuffer, 0),
	}
	if msg.Pty != nil {
		sp.pty = msg.GetPty().GetSize()
		if sp.pty == nil {
			sp.pty = &pb.PTY_Size{Cols: 80, Rows: 24}
		}
		if envGet(env, "TERM") == "" {
			sp.env = append(sp.env, "TERM=xterm-256color")
		}
	}
	sp.onFinish = func(p *proc) {
		s.mu.Lock()
		delete(s.procs, p.pid)
		s.ended = append(s.ended, p)
		s.pruneLocked(time.Now())
		s.mu.Unlock()
		if s.onEnd != nil {
			s.onEnd()
		}
	}

	// The tag check and the registration happen under one lock so two
	// Starts cannot take the same tag.
	s.mu.Lock()
	if sp.tag != "" {
		for _, p := range s.procs {
			if p.tag == sp.tag {
				s.mu.Unlock()
				return connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("tag %q is in use by pid %d", sp.tag, p.pid))
			}
		}
	}
	// The command outlives this request: it runs under the agent's context.
	p, sub, err := startProc(s.base, s.reaper, sp)
	if err != nil {
		s.mu.Unlock()
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			// The chdir or the exec failed, which the error does not
			// say: a directory removed since the check is the former.
			if werr := checkWorkdir(dir); werr != nil {
				return connectErr(werr)
			}
		}
		return connectErr(err)
	}
	s.procs[p.pid] = p
	s.mu.Unlock()
	log.G(ctx).Debug("process started", "pid", p.pid, "cmd", pc.GetCmd(), "tag", sp.tag, "pty", sp.pty != nil)
	if p.oomKnown {
		stream.ResponseHeader().Set(oomKillsHeader, strconv.FormatUint(p.oomBefore, 10))
	}

	return streamEvents(ctx, p, nil, sub, nil, true, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.StartResponse{Event: ev})
	})
}

// checkWorkdir checks that dir is a directory, so that a bad working
// directory is not reported as the command's failure ("not found").
func checkWorkdir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &workdirError{msg: "working directory " + dir + " does not exist"}
	case errors.Is(err, unix.ENOTDIR):
		return &workdirError{msg: "working directory " + dir + ": a parent is not a directory"}
	case err != nil:
		return nil // the start says what is wrong (permission denied...)
	case !st.IsDir():
		return &workdirError{msg: "working directory " + dir + " is not a directory"}
	}
	return nil
}

// checkExec refuses what execve(2) would refuse with E2BIG ("argument
// list too long"), naming the argument or variable, and variable names
// that are not valid (see execcheck.ValidName) in the request's envs.
func checkExec(path string, argv, env []string, envs map[string]string) error {
	for k := range envs {
		if err := execcheck.ValidName(k); err != nil {
			return fmt.Errorf("process.envs: %w: %w", err, errInvalidArgument)
		}
	}
	if err := execcheck.Check(path, argv, env, execcheck.Limit(), 0); err != nil {
		return fmt.Errorf("%w: %w", err, errInvalidArgument)
	}
	return nil
}

// streamEvents sends the start event, the replayed output, and then end
// (a command that ended) or every event of sub until the end event or until
// the client goes away (the command keeps running). With neither, the
// stream ends after the replay.
//
// Without collect, the end event sent does not count as collected (the
// daemon's copy of the output, which must not let the agent exit when
// idle before a client learned how the command ended).
func streamEvents(ctx context.Context, p *proc, replay []outChunk, sub *subscriber, end *pb.ProcessEvent_EndEvent, collect bool, send func(*pb.ProcessEvent) error) error {
	if sub != nil {
		defer p.unsubscribe(sub)
	}
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}); err != nil {
		return err
	}
	for _, c := range replay {
		ev := dataEvent(c.kind, c.data)
		if c.kind == outGap {
			ev = &pb.ProcessEvent{Event: &pb.ProcessEvent_Gap{Gap: &pb.ProcessEvent_GapEvent{DroppedBytes: c.gap}}}
		}
		if err := send(ev); err != nil {
			return err
		}
	}
	if end != nil {
		if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}); err != nil {
			return err
		}
		if collect {
			p.markCollected()
		}
		return nil
	}
	if sub == nil {
		return nil
	}
	tick := time.NewTicker(keepaliveInterval)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-sub.ch:
			if !ok {
				return nil
			}
			if err := send(ev); err != nil {
				return err
			}
			if ev.GetEnd() != nil && collect {
				p.markCollected()
			}
		case <-tick.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// find returns the running command sel selects or, with ended, the one
// that ended last among those kept. Without ended, a command that ended is
// not found, with an error that says so.
func (s *processService) find(sel *pb.ProcessSelector, ended bool) (*proc, error) {
	var match func(*proc) bool
	var what string
	switch x := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		match, what = func(p *proc) bool { return p.pid == int(x.Pid) }, fmt.Sprintf("pid %d", x.Pid)
	case *pb.ProcessSelector_Tag:
		match, what = func(p *proc) bool { return p.tag == x.Tag }, fmt.Sprintf("tag %q", x.Tag)
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector is required"))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if x, ok := sel.GetSelector().(*pb.ProcessSelector_Pid); ok {
		if p, ok := s.procs[int(x.Pid)]; ok {
			return p, nil
		}
	} else {
		for _, p := range s.procs {
			if match(p) {
				return p, nil
			}
		}
	}
	s.pruneLocked(time.Now())
	for i := len(s.ended) - 1; i >= 0; i-- {
		if p := s.ended[i]; match(p) {
			if ended {
				return p, nil
			}
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s has ended", what))
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found", what))
}

// pruneLocked drops the ended commands over cfg.EndedKeep or older than
// cfg.EndedTTL, and the kept output of the oldest ended ones beyond
// endedOutputBuffers times the output buffer.
func (s *processService) pruneLocked(now time.Time) {
	drop := max(len(s.ended)-s.cfg.EndedKeep, 0)
	for drop < len(s.ended) {
		p := s.ended[drop]
		p.mu.Lock()
		old := !p.endedAt.IsZero() && now.Sub(p.endedAt) > s.cfg.EndedTTL
		p.mu.Unlock()
		if !old {
			break
		}
		drop++
	}
	if drop > 0 {
		clear(s.ended[:drop])
		s.ended = s.ended[drop:]
	}
	budget := endedOutputBuffers * max(s.cfg.OutputBuffer, 0)
	for i := len(s.ended) - 1; i >= 0; i-- {
		p := s.ended[i]
		p.mu.Lock()
		if budget -= p.out.memory(); budget < 0 {
			p.out = nil
		}
		p.mu.Unlock()
	}
}

// endedOutputBuffers bounds the output kept of ended commands, in output
// buffers (Config.OutputBuffer): the newest keep theirs.
const endedOutputBuffers = 4

// uncollected reports whether a command runs, or one ended whose end no
// client received yet (and that is kept): the agent then does not exit
// when idle, which would lose its exit status and output.
func (s *processService) uncollected() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.procs) > 0 {
		return true
	}
	s.pruneLocked(time.Now())
	for _, p := range s.ended {
		p.mu.Lock()
		c := p.collected
		p.mu.Unlock()
		if !c {
			return true
		}
	}
	return false
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	// As envd, a command that ended recently is found: the stream then
	// has its start and end events (and the replay, if asked).
	p, err := s.find(req.Msg.GetProcess(), true)
	if err != nil {
		return err
	}
	if n, ok := (cgroupMem{root: s.cfg.CgroupPath}).oomKills(); ok {
		stream.ResponseHeader().Set(oomKillsHeader, strconv.FormatUint(n, 10))
	}
	follow := req.Msg.Follow == nil || req.Msg.GetFollow()
	replay, first, sub, end := p.attach(req.Msg.GetReplay(), int(req.Msg.GetTailLines()), req.Msg.GetFromOffset(), follow)
	if req.Msg.GetReplay() && req.Msg.GetTailLines() == 0 {
		stream.ResponseHeader().Set(outputOffsetHeader, strconv.FormatUint(first, 10))
	}
	// A replay from an offset is the daemon's copy of the output: it
	// collects no end.
	return streamEvents(ctx, p, replay, sub, end, req.Msg.FromOffset == nil, func(ev *pb.ProcessEvent) error {
		return stream.Send(&pb.ConnectResponse{Event: ev})
	})
}

// info describes p for List.
func (p *proc) info() *pb.ProcessInfo {
	info := &pb.ProcessInfo{Config: p.config, Pid: uint32(p.pid), StartedAtMs: p.started.UnixMilli(), Pty: p.isPTY}
	if p.tag != "" {
		info.Tag = &p.tag
	}
	p.stdinMu.Lock()
	info.Stdin = p.stdin != nil
	p.stdinMu.Unlock()
	p.mu.Lock()
	info.OutputBytes, info.OutputDroppedBytes = p.out.held()
	if p.ended {
		info.End = p.end
		info.EndedAtMs = p.endedAt.UnixMilli()
	}
	p.mu.Unlock()
	return info
}

func (s *processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &pb.ListResponse{}
	for _, p := range s.procs {
		out.Processes = append(out.Processes, p.info())
	}
	slices.SortFunc(out.Processes, func(a, b *pb.ProcessInfo) int { return int(a.Pid) - int(b.Pid) })
	if req.Msg.GetIncludeEnded() {
		s.pruneLocked(time.Now())
		for _, p := range s.ended {
			out.Processes = append(out.Processes, p.info())
		}
	}
	return connect.NewResponse(out), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if err := p.resize(size); err != nil {
			return nil, connectErr(err)
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

func inputBytes(in *pb.ProcessInput) []byte {
	switch x := in.GetInput().(type) {
	case *pb.ProcessInput_Stdin:
		return x.Stdin
	case *pb.ProcessInput_Pty:
		return x.Pty
	}
	return nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.writeInput(inputBytes(req.Msg.GetInput())); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			found, err := s.find(ev.Start.GetProcess(), false)
			if err != nil {
				return nil, err
			}
			p = found
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("first message must select the process"))
			}
			if err := p.writeInput(inputBytes(ev.Data.GetInput())); err != nil {
				return nil, connectErr(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (s *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	var sig unix.Signal
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL:
		sig = unix.SIGKILL
	case pb.Signal_SIGNAL_SIGTERM:
		sig = unix.SIGTERM
	default:
		// Any other Linux signal number is accepted too.
		n := int(req.Msg.GetSignal())
		if n <= 0 || n >= 65 {
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("invalid signal %d", n))
		}
		sig = unix.Signal(n)
	}
	if err := p.signal(sig); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.find(req.Msg.GetProcess(), false)
	if err != nil {
		return nil, err
	}
	if err := p.closeStdin(); err != nil {
		return nil, connectErr(err)
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// stopAll signals every command's group with sig.
func (s *processService) stopAll(sig unix.Signal) []*proc {
	s.mu.Lock()
	ps := make([]*proc, 0, len(s.procs))
	for _, p := range s.procs {
		ps = append(ps, p)
	}
	s.mu.Unlock()
	for _, p := range ps {
		_ = p.signal(sig)
	}
	return ps
}

// shutdown sends SIGTERM to every command, waits up to grace, then SIGKILLs
// what is left and waits for the end events.
func (s *processService) shutdown(grace time.Duration) {
	ps := s.stopAll(unix.SIGTERM)
	deadline := time.After(grace)
	for _, p := range ps {
		select {
		case <-p.endedCh:
		case <-deadline:
			s.stopAll(unix.SIGKILL)
		}
	}
	for _, p := range ps {
		<-p.endedCh
	}
}
