package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"time"

	"connectrpc.com/connect"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/api/gen/filesystem/filesystemconnect"
	"github.com/corral-sandbox/corral/api/gen/process/processconnect"
	"github.com/corral-sandbox/corral/internal/log"
)

// Server is the agent's HTTP server: Connect services plus REST endpoints.
type Server struct {
	cfg     Config
	proc    *processService
	fs      *fsService
	metrics *metricsState
	handler http.Handler
	// live holds the defaults set through POST /init.
	live *liveDefaults
	// state keeps live (and whether a warm box was used) for the next
	// agent; nil unless cfg.UnderInit.
	state *stateFile
	// idle is closed when the agent has been idle for cfg.IdleExit; nil
	// without an idle exit.
	idle chan struct{}
}

// New builds a Server. ctx is the agent's lifetime: commands run under it.
// It starts the process-wide reaper (and becomes a child subreaper when not
// PID 1).
func New(ctx context.Context, cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	r, err := getReaper()
	if err != nil {
		return nil, fmt.Errorf("start reaper: %w", err)
	}
	s := &Server{
		cfg:     cfg,
		proc:    newProcessService(ctx, cfg, r),
		fs:      newFSService(cfg),
		metrics: &metricsState{cg: cgroupMem{root: cfg.CgroupPath}},
		live:    &liveDefaults{},
	}
	s.proc.live, s.fs.live = s.live, s.live
	if cfg.UnderInit {
		st, err := openState(StateFD)
		if err != nil {
			// The agent still works; a warm pool's defaults are lost
			// when it exits.
			log.G(ctx).Warn("no state for the next agent", "error", err)
		}
		s.state = st
		if d := st.get().Defaults; d != nil {
			s.live.set, s.live.env, s.live.user, s.live.workdir = true, d.Env, d.User, d.Workdir
		}
	}
	mux := http.NewServeMux()
	// The agent is reached over a local socket: compressing every output
	// chunk would only burn the box's CPU (and 1 GB of output would cost
	// seconds of gzip). Compressed requests are still accepted.
	noCompress := connect.WithCompressMinBytes(math.MaxInt32)
	mux.Handle(processconnect.NewProcessHandler(s.proc, noCompress))
	mux.Handle(filesystemconnect.NewFilesystemHandler(s.fs, noCompress))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /metrics", s.metrics.serve)
	mux.HandleFunc("GET /files", s.getFiles)
	mux.HandleFunc("POST /files", s.postFiles)
	mux.HandleFunc("POST /init", s.postInit)
	s.handler = mux
	if cfg.UnderInit && cfg.IdleExit > 0 {
		s.idle = make(chan struct{})
		clock := newIdleClock(cfg.IdleExit, !cfg.Warm || s.state.get().Used, s.busy, func() { close(s.idle) })
		s.proc.onEnd = clock.poke
		s.handler = clock.wrap(mux, func() {
			// Only a later agent reads this, and this one cannot exit
			// before the request ends: keep the write (JSON and two
			// system calls) off the warm box's first request.
			go func() {
				if err := s.state.update(func(st *agentState) { st.Used = true }); err != nil {
					log.G(ctx).Warn("keep state for the next agent", "error", err)
				}
			}()
		})
	}
	if cfg.UnderInit {
		s.handler = withRestarts(s.handler, os.Getenv)
	}
	return s, nil
}

// busy reports whether a command runs, one ended whose end no client
// received yet, or a watcher exists: the agent then does not exit when idle.
func (s *Server) busy() bool {
	if s.proc.uncollected() {
		return true
	}
	s.fs.mu.Lock()
	n := len(s.fs.watchers)
	s.fs.mu.Unlock()
	return n > 0
}

// Handler returns the agent's routes.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves HTTP/1.1 and h2c on ln until ctx ends, then stops the
// commands (SIGTERM, then SIGKILL after StopGrace).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{
		Handler:           s.handler,
		Protocols:         &protos,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errCh := make(chan error, 1)
	go func() { errCh <- srv.Serve(ln) }()
	select {
	case err := <-errCh:
		s.Close()
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	case <-s.idle: // nil, and never ready, without an idle exit
		log.G(ctx).Info("agent exiting: idle", "for", s.cfg.IdleExit)
	}
	s.Close()
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		srv.Close()
	}
	<-errCh
	return nil
}

// Close stops every command the agent started and waits for them.
func (s *Server) Close() {
	s.proc.shutdown(s.cfg.StopGrace)
	s.fs.closeWatchers()
}

// Listen opens the listener described by cfg: Listen if set, else ListenFD.
// A listener on an abstract unix socket ("unix://@name", or an inherited one
// such as the OCI runtime's "@corral-agent") accepts only peers outside the
// agent's pid namespace: see guardAbstract. A TCP listener with a
// TokenFile serves only connections that send its token first: see
// tokenOnly.
func Listen(cfg Config) (net.Listener, error) {
	switch {
	case strings.HasPrefix(cfg.Listen, "unix://@"): // abstract: see outsideOnly
		ln, err := net.Listen("unix", strings.TrimPrefix(cfg.Listen, "unix://"))
		if err != nil {
			return nil, err
		}
		return guardAbstract(ln), nil
	case strings.HasPrefix(cfg.Listen, "unix://"):
		p := strings.TrimPrefix(cfg.Listen, "unix://")
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
		return net.Listen("unix", p)
	case strings.HasPrefix(cfg.Listen, "tcp://"): // with a token: see tokenOnly
		ln, err := net.Listen("tcp", strings.TrimPrefix(cfg.Listen, "tcp://"))
		if err != nil {
			return nil, err
		}
		return guardToken(ln, cfg.TokenFile)
	case cfg.Listen != "":
		return nil, fmt.Errorf("listen address %q: want unix:// or tcp://: %w", cfg.Listen, errInvalidArgument)
	case cfg.ListenFD > 0:
		f := os.NewFile(uintptr(cfg.ListenFD), "agent-listener")
		if f == nil {
			return nil, fmt.Errorf("listen fd %d: %w", cfg.ListenFD, errInvalidArgument)
		}
		defer f.Close()
		ln, err := net.FileListener(f)
		if err != nil {
			return nil, fmt.Errorf("listen fd %d: %w", cfg.ListenFD, err)
		}
		return guardAbstract(ln), nil
	}
	return nil, fmt.Errorf("no listen address or fd: %w", errInvalidArgument)
}

// Run is the agent's entry point (`corral agent`): it serves until ctx ends
// or SIGTERM/SIGINT arrives, then signals every child and returns.
func Run(ctx context.Context, cfg Config) error {
	ctx, stop := signal.NotifyContext(ctx, unix.SIGTERM, unix.SIGINT)
	defer stop()
	// Before the threads below, which count against it.
	if err := setPidsMax(cfg.withDefaults().CgroupPath, cfg.PidsMax); err != nil {
		return err
	}
	if os.Getpid() == 1 || cfg.UnderInit {
		// One P: the agent forwards I/O and forks; it never needs two
		// CPUs at once. A single P keeps every hand-off between its
		// goroutines on one thread (no cross-CPU wake-ups, which made an
		// exec round trip faster) and needs fewer threads, each of
		// which costs memory in every box (see reserveThreads). The Go
		// runtime does not see a v1 box's CPU quota and would take one P
		// per host CPU.
		runtime.GOMAXPROCS(1)
		// Before serving: see reserveThreads.
		start := time.Now()
		n := reserveThreads(threadTarget(cfg.withDefaults().CgroupPath))
		log.G(ctx).Debug("threads reserved", "threads", n, "duration", time.Since(start))
	}
	s, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	ln, err := Listen(cfg)
	if err != nil {
		return err
	}
	log.G(ctx).Info("agent listening", "addr", ln.Addr().String(), "pid", os.Getpid(), "idle_exit", cfg.IdleExit)
	err = s.Serve(ctx, ln)
	if os.Getpid() == 1 {
		// As PID 1 of the box, also stop what the commands left behind.
		_ = unix.Kill(-1, unix.SIGKILL)
	}
	return err
}
