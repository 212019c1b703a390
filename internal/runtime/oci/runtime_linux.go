package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/userns"
)

var (
	_ sandbox.Runtime       = (*Runtime)(nil)
	_ sandbox.Statser       = (*Runtime)(nil)
	_ sandbox.Lister        = (*Runtime)(nil)
	_ sandbox.Pauser        = (*Runtime)(nil)
	_ sandbox.Syncer        = (*Runtime)(nil)
	_ sandbox.Checkpointer  = (*Runtime)(nil)
	_ sandbox.UserNSRuntime = (*Runtime)(nil)
)

// Files in a sandbox's directory <RunDir>/<id>/.
const (
	bundleDir  = "bundle"
	rootfsDir  = "bundle/rootfs"
	configFile = "bundle/config.json"
	agentLog   = "agent.log"
	runtimeLog = "runtime.log"
	pidFile    = "pid"
	mountsFile = "mounts.json"
	maxNoFile  = 1048576
	// agentOOMScoreAdj keeps the OOM killer away from the agent (PID 1).
	agentOOMScoreAdj = "-999"
	killTimeout      = 10 * time.Second
)

// Runtime runs sandboxes as OCI containers with crun or runc. Create
// mounts the root file system, makes the sandbox's network namespace and
// writes the bundle; Start runs the runtime's "run --detach", handing the
// agent its listening socket as fd 3.
//
// The agent's socket. The daemon makes each sandbox's network namespace
// itself (bind-mounted at <RunDir>/<id>/netns, and named in config.json so
// that the runtime joins it instead of making one) and creates the agent's
// listening socket in it, bound to the abstract name "@corral-agent". So the
// socket lives entirely inside the box, which is what CRIU needs to save and
// restore it: a socket bound to a host path outside the box cannot be
// checkpointed. The daemon reaches it by joining the namespace from an OS
// thread (AgentAddr, "unix-abstract://<RunDir>/<id>/netns#corral-agent",
// see agentclient.Dial), and the agent accepts only peers outside its pid
// namespace (internal/agent), so the box's processes, which can reach the
// name, can never drive their agent. A HostNetwork box (builds) joins the
// host's network namespace, but its agent socket still lives in a private
// namespace made for it alone, so every sandbox has the same kind of
// address and nothing on the host can reach a box's agent without
// CAP_SYS_ADMIN. A namespace named in config.json is also what CRIU calls
// external: a checkpoint leaves it alone and a restore puts the processes
// into a fresh one, where the daemon attaches the network again.
type Runtime struct {
	cfg         Config
	binary      string   // absolute path of the OCI runtime
	sealed      *os.File // a sealed copy of binary, run instead; nil if none
	processArgs []string // PID 1 command line; nil means the agent
	ns          *nsThread
	swap        bool         // the host accounts swap
	nofile      uint64       // hard RLIMIT_NOFILE of the boxes (Config.NoFile)
	userns      bool         // new boxes get a user namespace (SetUserNS)
	runsc       *RunscConfig // the gvisor dialect (see RunscConfig); nil: crun, runc

	mu sync.Mutex
	// listeners are the sockets made by Create, until Start hands them to
	// the runtime. Guarded by mu.
	listeners map[string]*os.File
	// programs are the host paths of the programs the PID 1 of sandboxes
	// created but not started runs (see program). Guarded by mu.
	programs map[string]string
	// loopTrim is the pending trim of free loop devices (see
	// trimLoopsSoon); nil when none. Guarded by mu.
	loopTrim *time.Timer
}

// Free loop devices beyond loopReserve are removed loopTrimDelay after a
// sandbox's removal (at most one trim per delay): a device stays in the
// kernel after its disk is unmounted, with about 100 KiB of slab and
// per-CPU memory, for reuse; a burst of a thousand boxes would keep a
// thousand. The reserve covers the usual concurrency, so that a create
// finds a device ready instead of making one.
const (
	loopReserve   = 16
	loopTrimDelay = 2 * time.Second
)

// trimLoopsSoon schedules a trim of the free loop devices, unless one is
// pending.
func (r *Runtime) trimLoopsSoon(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loopTrim != nil {
		return
	}
	ctx = context.WithoutCancel(ctx)
	r.loopTrim = time.AfterFunc(loopTrimDelay, func() {
		r.mu.Lock()
		r.loopTrim = nil
		r.mu.Unlock()
		if n, err := mount.TrimLoops(loopReserve); err != nil {
			log.G(ctx).Debug("free loop devices not trimmed", "error", err)
		} else if n > 0 {
			log.G(ctx).Debug("free loop devices removed", "count", n)
		}
	})
}

// New checks cfg, creates the state and run directories and starts the
// thread that runs the OCI runtime (see nsThread). Close releases it.
func New(cfg Config, opts ...Opt) (*Runtime, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	bin, err := exec.LookPath(cfg.Binary)
	if err != nil {
		return nil, fmt.Errorf("oci runtime %q: %w: %w", cfg.Binary, err, errdefs.ErrUnavailable)
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return nil, fmt.Errorf("oci runtime %q: %w", cfg.Binary, err)
	}
	for _, d := range []string{cfg.StateDir, cfg.RunDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	// A box may not have more than the daemon can pass on (the runtime
	// inherits its limit, see hostNoFile).
	if own := hostNoFile(); cfg.NoFile > own {
		return nil, fmt.Errorf("oci: nofile %d is above the daemon's own hard limit of open files %d (capped by fs.nr_open): lower nofile or raise the daemon's limit (LimitNOFILE= in its unit): %w", cfg.NoFile, own, errdefs.ErrInvalidArgument)
	}
	r := &Runtime{
		cfg:       cfg,
		binary:    bin,
		swap:      cgroups.SwapAccounting(cgroups.Root),
		nofile:    cfg.NoFile,
		runsc:     cfg.Runsc,
		listeners: map[string]*os.File{},
		programs:  map[string]string{},
	}
	for _, o := range opts {
		o(r)
	}
	if r.runsc != nil {
		// runsc re-executes itself for its gofer and sandbox processes.
	} else if err := r.useSealedCopy(); err != nil {
		// Still works: the runtime clones itself on every run.
		log.G(context.Background()).Warn("oci runtime: no sealed copy, running it from disk", "binary", bin, "error", err)
	}
	if r.ns, err = newNSThread(); err != nil {
		if r.sealed != nil {
			r.sealed.Close()
		}
		return nil, err
	}
	return r, nil
}

// NewCleaner returns a Runtime that can only inspect and remove the
// sandboxes a runtime with cfg made, without running its binary: for a
// runtime whose binary is missing or refused (its version has a known
// vulnerability) at daemon start, whose boxes may still run. Its Delete
// kills them through their pid file and cgroups, unmounts and removes
// what they own, and removes the runtime's state directly; State, List
// and Usage work as usual; what needs the binary (Create, Start,
// Checkpoint, Restore) fails with errdefs.ErrUnavailable.
func NewCleaner(cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Runtime{cfg: cfg, swap: cgroups.SwapAccounting(cgroups.Root), runsc: cfg.Runsc, listeners: map[string]*os.File{}}
	var err error
	if r.ns, err = newNSThread(); err != nil {
		return nil, err
	}
	return r, nil
}

// errNoBinary is returned by a cleaner (NewCleaner) for what needs the
// runtime's binary.
func (r *Runtime) errNoBinary(op, id string) error {
	return fmt.Errorf("%s %s: runtime %s is not available (its binary is missing or refused): %w", op, id, filepath.Base(r.cfg.Binary), errdefs.ErrUnavailable)
}

// hostNoFile raises the process's RLIMIT_NOFILE to maxNoFile capped by the
// host's fs.nr_open (the runtime inherits it and may not raise it once it
// has dropped CAP_SYS_RESOURCE) and returns the resulting hard limit.
func hostNoFile() uint64 {
	want := uint64(maxNoFile)
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n < want {
			want = n
		}
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	if lim.Max < want {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: lim.Cur, Max: want}); err == nil {
			lim.Max = want
		}
	}
	return min(lim.Max, want)
}

// Close stops the runtime's thread and closes the sockets of sandboxes
// created but not started. Running sandboxes keep running; a new Runtime
// with the same Config manages them.
func (r *Runtime) Close() error {
	r.mu.Lock()
	if r.loopTrim != nil {
		r.loopTrim.Stop()
		r.loopTrim = nil
	}
	for id, l := range r.listeners {
		l.Close()
		delete(r.listeners, id)
	}
	r.mu.Unlock()
	r.ns.close()
	// After the thread: every run of the runtime starts on it, so none
	// can still be about to exec the copy.
	if r.sealed != nil {
		r.sealed.Close()
	}
	return nil
}

// MountInfoPath is the mountinfo file of the namespace that holds the
// sandboxes' root file system mounts (they are invisible in the host's
// /proc/self/mountinfo). For diagnostics and tests.
func (r *Runtime) MountInfoPath() string { return r.ns.mountInfoPath() }

// CgroupPath is the cgroup of sandbox id, relative to the hierarchy roots.
func (r *Runtime) CgroupPath(id string) string { return "/" + r.cfg.CgroupParent + "/" + id }

// Dir is the sandbox's directory <RunDir>/<id>.
func (r *Runtime) Dir(id string) string { return filepath.Join(r.cfg.RunDir, id) }

// AgentAddr returns "unix-abstract://<RunDir>/<id>/netns#corral-agent": the
// abstract socket "@corral-agent" in the sandbox's network namespace (see
// Runtime and agentclient.Dial). It is the same for every sandbox kind and
// does not change when the sandbox is restored.
func (r *Runtime) AgentAddr(id string) string {
	if r.runsc != nil {
		return agentclient.TCPNetNSAddr(r.netnsPath(id), fmt.Sprintf("127.0.0.1:%d", AgentTCPPort))
	}
	return agentclient.UnixAbstractAddr(r.netnsPath(id), AgentSocketName)
}

// netnsPath is the bind mount of sandbox id's network namespace.
func (r *Runtime) netnsPath(id string) string { return filepath.Join(r.Dir(id), netnsFile) }

// usernsPath is the bind mount of the user namespace that sandbox id
// joins, when it has one and its own network (see newUserNetNS).
func (r *Runtime) usernsPath(id string) string { return filepath.Join(r.Dir(id), usernsFile) }

// makeNetNS makes sandbox id's network namespace, inside a user namespace
// with mapping u when u is set (newUserNetNS), else owned by the host's
// (newNetNS), and exposes them to the runtime's thread. With listen it
// returns the agent's listening socket. On error the caller removes the
// namespaces (removeNS, or Delete).
func (r *Runtime) makeNetNS(id string, u *userns.Range, listen bool) (*os.File, error) {
	var l *os.File
	var err error
	if u != nil {
		l, err = newUserNetNS(r.netnsPath(id), r.usernsPath(id), *u, listen)
	} else {
		l, err = newNetNS(r.netnsPath(id), listen)
	}
	if err != nil {
		return nil, err
	}
	if err := r.exposeNS(id); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	return l, nil
}

// exposeNS exposes sandbox id's network namespace, and the user namespace
// owning it if there is one, to the runtime's thread (exposeNetNS).
func (r *Runtime) exposeNS(id string) error {
	if err := r.exposeNetNS(r.netnsPath(id)); err != nil {
		return err
	}
	up := r.usernsPath(id)
	if _, err := os.Lstat(up); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return r.exposeNSOf(up, unix.CLONE_NEWUSER)
}

// removeNS removes sandbox id's network namespace and the user namespace
// owning it (removeNetNS); missing ones are success.
func (r *Runtime) removeNS(id string) error {
	if err := r.removeNetNS(r.netnsPath(id)); err != nil {
		return err
	}
	return r.removeNetNS(r.usernsPath(id))
}

// joinedUserNS returns the range of the user namespace that sandbox id
// joins (made with its network namespace), from its config.json, or nil
// when it joins none.
func (r *Runtime) joinedUserNS(id string) (*userns.Range, error) {
	b, err := os.ReadFile(filepath.Join(r.Dir(id), configFile))
	if err != nil {
		return nil, err
	}
	var cfg specs.Spec
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", configFile, err)
	}
	if cfg.Linux == nil || !slices.ContainsFunc(cfg.Linux.Namespaces, func(n specs.LinuxNamespace) bool {
		return n.Type == specs.UserNamespace && n.Path != ""
	}) {
		return nil, nil
	}
	var u userns.Range
	a := cfg.Annotations[usernsAnnotation]
	if _, err := fmt.Sscanf(a, "%d:%d", &u.HostID, &u.Size); err != nil || u.Size == 0 {
		return nil, fmt.Errorf("%s: user namespace range %q: %w", configFile, a, errdefs.ErrDataLoss)
	}
	return &u, nil
}

// Create validates spec, mounts its root file system, makes its network
// namespace with the agent's listening socket and writes the bundle. It
// returns errdefs.ErrAlreadyExists when id exists; on error it leaves
// nothing.
func (r *Runtime) Create(ctx context.Context, id string, spec *sandbox.Spec) (retErr error) {
	if r.binary == "" {
		return r.errNoBinary("create", id)
	}
	if err := checkSpec(id, spec); err != nil {
		return err
	}
	st := log.StartSteps(ctx)
	var cu *cleanup.Cleanup
	var err error
	if spec.Premade != "" {
		cu, err = r.takeNS(ctx, spec.Premade, id)
	} else {
		cu, err = r.newDir(ctx, id)
	}
	if err != nil {
		return err
	}
	defer cu.Clean()
	st.Step("dir")
	// prepare keeps the listening socket for Start.
	if _, err := r.prepare(id, spec, true, st); err != nil {
		return fmt.Errorf("create %s: %w", id, err)
	}
	cu.Release()
	st.Done(ctx, "oci create")
	return nil
}

// checkSpec validates id and the parts of spec that Create relies on.
func checkSpec(id string, spec *sandbox.Spec) error {
	if err := identifiers.Validate("sandbox id", id); err != nil {
		return err
	}
	if spec == nil || !slices.ContainsFunc(spec.Rootfs, func(m mount.Mount) bool { return m.Target == "" }) {
		return fmt.Errorf("create %s: spec has no root file system mount: %w", id, errdefs.ErrInvalidArgument)
	}
	for _, m := range spec.Rootfs {
		if m.Target != "" && !filepath.IsAbs(m.Target) {
			return fmt.Errorf("create %s: mount target %q is not absolute: %w", id, m.Target, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// newDir makes the sandbox's directory (errdefs.ErrAlreadyExists when it
// exists) and returns a cleanup that deletes the sandbox, to release once
// it is whole.
func (r *Runtime) newDir(ctx context.Context, id string) (*cleanup.Cleanup, error) {
	if err := os.Mkdir(r.Dir(id), 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	cu := cleanup.Make(func() {
		cleanup.Do(ctx, func(ctx context.Context) {
			if err := r.Delete(ctx, id); err != nil {
				log.G(ctx).Warn("roll back sandbox", "sandbox", id, "error", err)
			}
		})
	})
	return &cu, nil
}

// prepare mounts the root file system of spec, makes the network namespace
// (with the agent's listening socket when listen is set) and writes the
// bundle of sandbox id, whose directory exists. The caller deletes the
// sandbox on error.
func (r *Runtime) prepare(id string, spec *sandbox.Spec, listen bool, st *log.Steps) (*os.File, error) {
	nsOfBox, usernsOfBox := r.netnsPath(id), ""
	if spec.HostNetwork {
		nsOfBox = "" // the agent's socket only: see Runtime
	} else if spec.UserNS != nil {
		usernsOfBox = r.usernsPath(id)
	}
	token, err := r.agentToken(id)
	if err != nil {
		return nil, err
	}
	cfg, err := buildSpec(specParams{
		agentToken:  token != "",
		id:          id,
		spec:        spec,
		args:        r.processArgs,
		cgroupsPath: r.CgroupPath(id),
		netns:       nsOfBox,
		userns:      usernsOfBox,
		seccomp:     *r.cfg.Seccomp,
		swap:        r.swap,
		nofile:      r.nofile,
		agentListen: r.agentListen(),
		gvisorPids:  r.runsc != nil && r.processArgs == nil,
	})
	if err != nil {
		return nil, err
	}
	configJSON, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	st.Step("spec")
	dir := r.Dir(id)
	rootfs := filepath.Join(dir, rootfsDir)
	if err := os.MkdirAll(rootfs, 0o700); err != nil {
		return nil, err
	}
	steps, err := planRootfs(spec.Rootfs, rootfs, dir, spec.UserNS)
	if err != nil {
		return nil, err
	}
	if spec.UserNS != nil {
		// The runtime opens "rootfs" from the bundle directory inside the
		// box's user namespace: box root, an unprivileged host uid, must
		// get through both, and no more.
		for _, d := range []string{filepath.Join(dir, bundleDir), rootfs} {
			if err := os.Chmod(d, 0o711); err != nil {
				return nil, err
			}
		}
	}
	// Record the targets before mounting, so that Delete (maybe in a
	// restarted daemon) can undo a partial mount. The namespaces need no
	// record: Delete always removes dir/netns and dir/userns.
	targets := make([]string, len(steps))
	for i, st := range steps {
		targets[i] = st.target
	}
	if err := writeJSON(filepath.Join(dir, mountsFile), targets); err != nil {
		return nil, err
	}
	st.Step("mounts_record")
	var u *userns.Range
	if spec.UserNS != nil && !spec.HostNetwork {
		u = spec.UserNS
	}
	var l *os.File
	if spec.Premade != "" {
		// takeNS moved the namespaces and the agent's socket to id.
		r.mu.Lock()
		l = r.listeners[id]
		r.mu.Unlock()
	} else if l, err = r.makeNetNS(id, u, listen && r.runsc == nil); err != nil {
		return nil, err
	}
	st.Step("netns")
	var nsFile *os.File
	if u != nil {
		// The idmapped layers take the box's own user namespace.
		if nsFile, err = os.Open(r.usernsPath(id)); err != nil {
			if l != nil {
				l.Close()
			}
			return nil, fmt.Errorf("open user namespace: %w", err)
		}
		defer nsFile.Close()
	}
	if err := r.ns.Do(func() error { return mountRootfs(steps, spec.UserNS, nsFile) }); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	st.Step("mount_rootfs")
	if err := atomicfile.Write(filepath.Join(dir, configFile), configJSON, 0o600); err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	st.Step("config")
	r.mu.Lock()
	if l != nil && spec.Premade == "" {
		r.listeners[id] = l
	}
	r.programs[id] = program(cfg)
	if r.runsc != nil {
		r.programs[id] = "" // PID 1 is gVisor's kernel process: see RunscConfig
	}
	r.mu.Unlock()
	return l, nil
}

func writeJSON(p string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(p, b, 0o600)
}

// Start runs the sandbox's PID 1 with "<runtime> run --detach
// --preserve-fds 1": the listening socket becomes fd 3 in the box and the
// process's stdout and stderr go to <RunDir>/<id>/agent.log. A stopped
// sandbox can be started again, in a fresh network namespace.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if r.binary == "" {
		return r.errNoBinary("start", id)
	}
	steps := log.StartSteps(ctx)
	st, err := r.State(ctx, id)
	if err != nil {
		return err
	}
	steps.Step("state")
	switch st.Status {
	case sandbox.StatusRunning, sandbox.StatusPaused:
		return fmt.Errorf("start %s: sandbox is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	case sandbox.StatusStopped:
		if err := r.runtimeDelete(ctx, id); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
	}
	dir := r.Dir(id)
	prog := r.programOf(id)
	r.mu.Lock()
	l := r.listeners[id]
	delete(r.listeners, id)
	r.mu.Unlock()
	if l == nil && r.runsc != nil {
		// The agent listens on TCP in the box: a fresh namespace only.
		netns := r.netnsPath(id)
		if err := r.removeNetNS(netns); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		if _, err := newNetNS(netns, false); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
	} else if l == nil {
		// A restarted daemon (the socket was in the old one's memory), or
		// a restart of a stopped sandbox: start over in a new namespace, as
		// the runtime would for a namespace of its own.
		u, err := r.joinedUserNS(id)
		if err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		if err := r.removeNS(id); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
		if l, err = r.makeNetNS(id, u, true); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
	}
	if l != nil {
		defer l.Close() // the box holds its own copy
	}
	if err := r.exposeNS(id); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	steps.Step("netns")

	out, err := openLog(dir)
	if err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	defer out.Close()
	rlog := filepath.Join(dir, runtimeLog)
	pid := filepath.Join(dir, pidFile)
	_ = os.Remove(pid)
	if err := r.handAgentToken(id); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	steps.Step("files")
	cmd := r.command(context.WithoutCancel(ctx), r.runArgs(rlog, pid, filepath.Join(dir, bundleDir), id)...)
	cmd.Stdout, cmd.Stderr = out, out
	if l != nil {
		cmd.ExtraFiles = []*os.File{l}
	}
	if err := r.ns.Do(cmd.Start); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	steps.Step("fork")
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("start %s: %s run: %w: %s", id, filepath.Base(r.binary), err, tail(rlog))
	}
	steps.Step("run")
	if err := r.waitExec(ctx, id, prog); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	steps.Step("exec_pid1")
	if r.runsc != nil && r.processArgs == nil {
		if err := r.waitAgentTCP(ctx, id); err != nil {
			return fmt.Errorf("start %s: %w", id, err)
		}
	}
	if err := r.protectAgent(ctx, id); err != nil {
		return fmt.Errorf("start %s: %w", id, err)
	}
	steps.Step("oom_score")
	steps.Done(ctx, "oci start")
	return nil
}

// openLog opens the agent's log <dir>/agent.log for appending. Not
// O_NOFOLLOW: CRIU reopens the file of a checkpointed descriptor with its
// flags through /proc/self/fd, which O_NOFOLLOW refuses; dir is the
// daemon's own (mode 0700).
func openLog(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, agentLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
}

// protectAgent makes the agent the last thing the OOM killer picks. crun
// sets process.oomScoreAdj after dropping CAP_SYS_RESOURCE, which fails for
// negative values, so the daemon sets it, before anyone can ask the agent
// to fork. The agent resets it to 0 for the commands it runs.
func (r *Runtime) protectAgent(ctx context.Context, id string) error {
	p, ok, err := r.init(id)
	if err != nil || !ok {
		return err
	}
	defer p.close()
	// Best effort: without CAP_SYS_RESOURCE (some nested setups) the
	// write fails with EACCES and the agent keeps the daemon's score.
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", p.pid), []byte(agentOOMScoreAdj), 0); err != nil {
		log.G(ctx).Debug("set agent oom_score_adj", "sandbox", id, "error", err)
	}
	return nil
}

// tail returns the last lines of a runtime log, for error messages.
func tail(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	const max = 1024
	b = bytes.TrimSpace(b)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// runtimeDelete removes what the OCI runtime keeps for id.
//
// Fast path: when the sandbox was started (it has a pid file) and its PID 1
// is gone, which init verified through a pidfd, every process of the box
// has exited with it (they live in its pid namespace), and all the runtime
// has left is its state directory and the cgroup, which Delete removes
// itself. That saves an exec of the runtime, a large part of a sandbox's
// lifecycle. Otherwise, for instance after a crash in the middle
// of "run", "<runtime> delete --force" kills and cleans up whatever is
// there.
func (r *Runtime) runtimeDelete(ctx context.Context, id string) error {
	if !r.hasState(id) {
		return nil
	}
	if r.binary == "" {
		// A cleaner: no runtime to ask. Whatever its state names (a
		// "runc init" waiting to exec, a crashed start's processes) is in
		// the box's cgroup.
		r.killCgroup(id)
		if err := r.removeState(id); err != nil {
			return fmt.Errorf("remove runtime state: %w", err)
		}
		return nil
	}
	if _, err := os.Stat(filepath.Join(r.Dir(id), pidFile)); err == nil {
		if _, alive, err := r.init(id); err == nil && !alive {
			if err := r.removeState(id); err != nil {
				return fmt.Errorf("remove runtime state: %w", err)
			}
			return nil
		}
	}
	cmd := r.command(ctx, r.globalArgs("delete", "--force", id)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := r.ns.Do(cmd.Start); err != nil {
		return fmt.Errorf("%s delete: %w", filepath.Base(r.binary), err)
	}
	if err := cmd.Wait(); err != nil {
		if !r.hasState(id) {
			return nil // gone: "does not exist"
		}
		return fmt.Errorf("%s delete: %w: %s", filepath.Base(r.binary), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// process is a sandbox's running PID 1.
type process struct {
	pid   int
	pidfd int
}

func (p process) close() { unix.Close(p.pidfd) }

// exited reports whether the process has exited (zombies included).
func (p process) exited(timeout time.Duration) bool {
	fds := []unix.PollFd{{Fd: int32(p.pidfd), Events: unix.POLLIN}}
	ms := int(timeout / time.Millisecond)
	for {
		n, err := unix.Poll(fds, ms)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err != nil || n > 0
	}
}

// init returns the sandbox's live PID 1, or ok=false when there is none. The
// pid from the pid file is opened as a pidfd and then checked to be in the
// sandbox's cgroup, so a reused pid is never signalled.
func (r *Runtime) init(id string) (p process, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(r.Dir(id), pidFile))
	if errors.Is(err, fs.ErrNotExist) {
		return process{}, false, nil
	}
	if err != nil {
		return process{}, false, fmt.Errorf("read pid file: %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return process{}, false, nil // partial write of a crashed start
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return process{}, false, nil
	}
	if err != nil {
		return process{}, false, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	p = process{pid: pid, pidfd: fd}
	if !r.inCgroup(pid, id) || p.exited(0) {
		p.close()
		return process{}, false, nil
	}
	return p, true, nil
}

// inCgroup reports whether pid is in the cgroup of sandbox id (any
// hierarchy).
func (r *Runtime) inCgroup(pid int, id string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	want := r.CgroupPath(id)
	for _, l := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && (parts[2] == want || strings.HasPrefix(parts[2], want+"/")) {
			return true
		}
	}
	return false
}

// Stop sends SIGTERM to the sandbox's PID 1, waits up to grace, then
// SIGKILLs it; the kernel then kills every other process of the box's pid
// namespace. Stopping a sandbox that is not running is success.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	if err := identifiers.Validate("sandbox id", id); err != nil {
		return err
	}
	p, ok, err := r.init(id)
	if err != nil || !ok {
		return err
	}
	defer p.close()
	// A paused box would not get the signals until thawed.
	if err := r.thaw(id); err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	if grace > 0 {
		if err := unix.PidfdSendSignal(p.pidfd, unix.SIGTERM, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("stop %s: signal: %w", id, err)
		}
		if waitExit(ctx, p, grace) {
			return nil
		}
	}
	return r.kill(ctx, id, p)
}

// waitExit waits up to d for p to exit or ctx to end.
func waitExit(ctx context.Context, p process, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 || ctx.Err() != nil {
			return p.exited(0)
		}
		if p.exited(min(left, 100*time.Millisecond)) {
			return true
		}
	}
}

func (r *Runtime) kill(ctx context.Context, id string, p process) error {
	if err := unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %s: %w", id, err)
	}
	if !waitExit(context.WithoutCancel(ctx), p, killTimeout) {
		return fmt.Errorf("kill %s: pid %d still running after %s: %w", id, p.pid, killTimeout, errdefs.ErrUnavailable)
	}
	return nil
}

// Delete kills the sandbox's processes, deletes the runtime's state,
// unmounts the root file system, removes the cgroups and the sandbox's
// directory. A missing sandbox is success.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := identifiers.Validate("sandbox id", id); err != nil {
		return err
	}
	st := log.StartSteps(ctx)
	// A checkpoint or restore left by a killed daemon may hold the
	// processes seized or frozen; the box goes, so it need not finish.
	if err := r.stopStrayCRIU(id, 0); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	// A paused box's processes must be able to exit: the v1 freezer keeps
	// even SIGKILLed tasks frozen.
	if err := r.thaw(id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	st.Step("criu_thaw")
	if p, ok, err := r.init(id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	} else if ok {
		err := r.kill(ctx, id, p)
		p.close()
		if err != nil {
			return fmt.Errorf("delete %s: %w", id, err)
		}
	}
	st.Step("kill")
	if err := r.runtimeDelete(ctx, id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	st.Step("runtime_delete")
	r.mu.Lock()
	if l := r.listeners[id]; l != nil {
		l.Close()
		delete(r.listeners, id)
	}
	delete(r.programs, id)
	r.mu.Unlock()

	dir := r.Dir(id)
	if err := r.unmountAll(dir); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	r.trimLoopsSoon(ctx)
	st.Step("unmount")
	if err := r.removeNS(id); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	st.Step("netns")
	// Pages the box's processes read first and others share (the image's
	// files, the agent's binary) stay charged to its memory cgroup, which
	// would linger as a dying cgroup after the rmdir for as long as they
	// stay cached: give them back now (they are clean page cache; whoever
	// needs them next reads them again).
	if err := cgroups.DropCharges(cgroups.Root, r.CgroupPath(id)); err != nil {
		log.G(ctx).Debug("memory charges left to the removed cgroup", "sandbox", id, "error", err)
	}
	// Usually every process is gone with PID 1 (they lived in its pid
	// namespace) and one rmdir per hierarchy does. Only a cgroup that
	// still holds processes, which no pid file leads to (a restore cut
	// short), is walked for them.
	if err := cgroups.Remove(cgroups.Root, r.CgroupPath(id)); err != nil {
		r.killCgroup(id)
		if err := r.removeCgroup(ctx, id); err != nil {
			return fmt.Errorf("delete %s: %w", id, err)
		}
	}
	st.Step("cgroups")
	// The host's view never holds the rootfs mounts (they live in the
	// runtime thread's namespace), and unmountAll checked they are gone
	// there too, so this cannot reach into a sandbox's files.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("delete %s: %w", id, err)
	}
	st.Step("dir")
	st.Done(ctx, "oci delete")
	return nil
}

// unmountAll undoes the mounts recorded in dir/mounts.json, last first, and
// checks that none is left.
func (r *Runtime) unmountAll(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, mountsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read mounts: %w", err)
	}
	var targets []string
	if err := json.Unmarshal(b, &targets); err != nil {
		// Written atomically, so this is damage from outside: fall back to
		// whatever is mounted beneath dir in the runtime's namespace.
		if targets, err = mount.Under(r.ns.mountInfoPath(), dir); err != nil {
			return fmt.Errorf("%s is unreadable and mountinfo failed: %w", mountsFile, err)
		}
	}
	return r.ns.Do(func() error {
		for _, t := range slices.Backward(targets) {
			// Unmount returns nil only once t is no mount point any more
			// (EINVAL), or after detaching it, so nothing is left here.
			if err := mount.Unmount(t); err != nil {
				return err
			}
		}
		return nil
	})
}

// killCgroup SIGKILLs every process left in the sandbox's cgroups, at any
// depth: what has no pid file to be found by, such as the processes of a
// restore that failed halfway or was stopped.
func (r *Runtime) killCgroup(id string) {
	dirs, _ := cgroups.Dirs(cgroups.Root, r.CgroupPath(id))
	for _, d := range dirs {
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil || pid == os.Getpid() {
					continue
				}
				fd, err := unix.PidfdOpen(pid, 0)
				if err != nil {
					continue
				}
				if r.inCgroup(pid, id) { // not a reused pid
					_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
				}
				unix.Close(fd)
			}
			return nil
		})
	}
}

// removeCgroup removes the sandbox's cgroups, retrying with a short backoff
// while the killed processes leave them (rmdir fails with EBUSY).
func (r *Runtime) removeCgroup(ctx context.Context, id string) error {
	var err error
	wait := time.Millisecond
	for range 20 {
		if err = cgroups.Remove(cgroups.Root, r.CgroupPath(id)); err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
	return err
}

// State reports whether the sandbox is created (never started), running,
// paused (its cgroup frozen) or stopped, from its pid file, a liveness check
// of that pid and the freezer.
func (r *Runtime) State(ctx context.Context, id string) (sandbox.State, error) {
	if err := identifiers.Validate("sandbox id", id); err != nil {
		return sandbox.State{}, err
	}
	dir := r.Dir(id)
	if _, err := os.Stat(filepath.Join(dir, configFile)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return sandbox.State{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
		}
		return sandbox.State{}, fmt.Errorf("state %s: %w", id, err)
	}
	if _, err := os.Stat(filepath.Join(dir, pidFile)); errors.Is(err, fs.ErrNotExist) {
		return sandbox.State{Status: sandbox.StatusCreated}, nil
	}
	p, ok, err := r.init(id)
	if err != nil {
		return sandbox.State{Status: sandbox.StatusUnknown}, fmt.Errorf("state %s: %w", id, err)
	}
	if !ok {
		return sandbox.State{Status: sandbox.StatusStopped, Reason: r.exitReason(id)}, nil
	}
	p.close()
	st := sandbox.State{Status: sandbox.StatusRunning, Pid: p.pid, NetNS: r.netnsOf(id, p.pid)}
	if r.frozen(id) {
		st.Status = sandbox.StatusPaused
	}
	return st, nil
}

// netnsOf returns the network namespace that sandbox id, whose PID 1 is
// pid, lives in: the bind mount in its directory when its PID 1 is in it
// (every box with a network of its own, in every dialect), else PID 1's
// own (a box on the host's network: builds).
func (r *Runtime) netnsOf(id string, pid int) string {
	own := fmt.Sprintf("/proc/%d/ns/net", pid)
	p := r.netnsPath(id)
	var a, b unix.Stat_t
	if unix.Stat(p, &a) == nil && unix.Stat(own, &b) == nil && a.Dev == b.Dev && a.Ino == b.Ino {
		return p
	}
	return own
}

// List returns the ids the runtime knows (its state directory) and those
// with a directory in RunDir, so that orphans of a crash can be deleted.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	var ids []string
	for _, d := range []string{r.cfg.StateDir, r.cfg.RunDir} {
		ents, err := os.ReadDir(d)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		for _, e := range ents {
			name := e.Name()
			if !e.IsDir() && r.runsc != nil && d == r.cfg.StateDir {
				name, _, _ = strings.Cut(name, "_sandbox:") // see hasState
			} else if !e.IsDir() {
				continue
			}
			if identifiers.Validate("sandbox id", name) == nil {
				ids = append(ids, name)
			}
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// Usage reads the sandbox's cgroup. It returns errdefs.ErrNotFound for an
// unknown sandbox and errdefs.ErrFailedPrecondition when it has no cgroup
// (not started or deleted).
func (r *Runtime) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	if _, err := r.State(ctx, id); err != nil {
		return sandbox.Usage{}, err
	}
	s, err := cgroups.Read(cgroups.Root, r.CgroupPath(id))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return sandbox.Usage{}, fmt.Errorf("usage %s: no cgroup: %w", id, errdefs.ErrFailedPrecondition)
		}
		return sandbox.Usage{}, fmt.Errorf("usage %s: %w", id, err)
	}
	u := sandbox.Usage{
		CPUNanos:         s.CPUNanos,
		MemoryBytes:      s.MemoryBytes,
		MemoryPeakBytes:  s.MemoryPeakBytes,
		MemoryLimitBytes: s.MemoryLimitBytes,
		Pids:             s.Pids,
		PidsLimit:        s.PidsLimit,
		OOMKills:         s.OOMKills,
		Time:             time.Now(),
	}
	if r.runsc != nil {
		if n := r.boxPids(id); n > 0 {
			// The box's own limit, not the host's headroom above it.
			u.PidsLimit = uint64(n)
		}
	}
	if used, total, err := r.DiskUsage(id); err == nil { // a box on a plain directory has no disk
		u.DiskBytes, u.DiskLimitBytes = used, total
	}
	return u, nil
}

// RunRaw runs "<runtime> run --bundle bundle id" in the foreground on the
// runtime's thread and waits for it: the plain OCI path with no Corral on
// top, used by `corral bench` as the baseline. The runtime removes the
// container when its process exits.
func (r *Runtime) RunRaw(ctx context.Context, bundle, id string) error {
	if r.binary == "" {
		return r.errNoBinary("run", id)
	}
	args := []string{"--root", r.cfg.StateDir}
	if r.runsc != nil {
		args = append(args, r.runsc.globalArgs()...)
	}
	cmd := r.command(ctx, append(args, "run", "--bundle", bundle, id)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := r.ns.Do(cmd.Start); err != nil {
		return fmt.Errorf("raw run %s: %w", id, err)
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("raw run %s: %w: %s", id, err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Binary is the path of the OCI runtime binary in use.
func (r *Runtime) Binary() string { return r.binary }
