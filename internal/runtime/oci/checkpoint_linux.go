package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/osthread"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Files of a checkpoint, in its image directory (CRIU's images sit
// beside them).
const (
	// checkpointInfoFile records what Restore needs besides the images.
	checkpointInfoFile = "corral-checkpoint.json"
	// dumpConfFile is the CRIU configuration of the dump.
	dumpConfFile = "criu-dump.conf"
	// dumpLogFile is CRIU's log of the dump, kept for operators.
	dumpLogFile = "dump.log"
	// restoreLogFile is CRIU's log of a restore (in the work directory).
	restoreLogFile = "restore.log"
)

// criuConf is the part of CRIU's configuration common to dumps and
// restores. "network-lock skip": CRIU would otherwise block the box's
// network with iptables rules while it works (one iptables-restore per
// family and step), which only matters to save established TCP
// connections, which Checkpoint refuses anyway.
const criuConf = "network-lock skip\n"

// restoreLogFD is the descriptor on which a restore hands CRIU the new
// sandbox's log. Not 3: runc starts CRIU with its own socket there (fds
// below it are the log too).
const restoreLogFD = 9

// Files of a restored sandbox, in <RunDir>/<id>/.
const (
	restoreWorkDir  = "criu"
	restoreConfFile = "criu/restore.conf"
)

// criuTimeout bounds a checkpoint or a restore when the context has no
// earlier deadline.
const criuTimeout = 5 * time.Minute

// checkpointAttempts is how many times Checkpoint tries while CRIU finds a
// unix socket connected to the outside: the daemon's connections to the
// agent, which the caller has just closed, may take a moment to go away.
const checkpointAttempts = 5

// checkpointInfo is the content of checkpointInfoFile.
type checkpointInfo struct {
	// Runtime is the base name of the OCI runtime that made the checkpoint.
	Runtime string `json:"runtime"`
	// LogFile is CRIU's key ("file[<mnt_id>:<inode>]", hex) of the agent's
	// log, which the box's processes hold as stdout and stderr. It lives
	// outside the box, so the dump marks it external and a restore hands
	// CRIU the new sandbox's log in its place.
	LogFile string `json:"log_file,omitempty"`
}

// Checkpoint saves the processes of running or paused sandbox id into dir
// with CRIU, through "<runtime> checkpoint". The box's network namespace
// is external (named in config.json): CRIU leaves it alone, and a restore
// puts the processes into a new one. With leaveRunning the box keeps
// running, and in the state it had (a paused box stays frozen); otherwise
// its processes are gone when Checkpoint returns and the caller deletes
// it.
//
// What CRIU cannot save (an established TCP connection, a unix socket
// connected to a process outside the box...) makes an error that wraps
// sandbox.ErrCheckpoint and names the reason in one line; CRIU's whole log
// stays in dir/dump.log. Checkpoint retries a few times, briefly, while the
// reason is a unix socket connected outside the box, which is what a
// connection from the daemon to the agent looks like: the caller must close
// its connections to the agent first (idle ones; a stream in use, such as
// a running command's output, makes the checkpoint fail).
//
// On error the box is as it was: running (Checkpoint freezes it only for
// the dump), or paused if it was. CRIU kills the processes only once the
// dump is complete, so a failed checkpoint without leaveRunning leaves
// them alive too; should they be gone anyway, the error says so and the
// caller treats the box as stopped (Delete it).
func (r *Runtime) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) (retErr error) {
	if r.runsc != nil {
		return r.errRunscCheckpoint("checkpoint", id)
	}
	if r.binary == "" {
		return r.errNoBinary("checkpoint", id)
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return err
	}
	if st.Status != sandbox.StatusRunning && st.Status != sandbox.StatusPaused {
		return fmt.Errorf("checkpoint %s: sandbox is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("checkpoint %s: image directory %q is not absolute: %w", id, dir, errdefs.ErrInvalidArgument)
	}
	if err := r.checkpointable(id); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if err := r.exposeNS(id); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	info := checkpointInfo{Runtime: filepath.Base(r.binary)}
	if info.LogFile, err = fileKey(st.Pid, filepath.Join(r.Dir(id), agentLog)); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	args := []string{"checkpoint", "--image-path", dir, "--work-path", dir, "--file-locks"}
	if leaveRunning {
		args = append(args, "--leave-running")
	}
	args = append(args, id)
	// Freeze the box first: CRIU polls its freezer every 100 ms, so a
	// box it freezes itself costs that much more; one already frozen it
	// takes as it is, and leaves frozen.
	if st.Status == sandbox.StatusRunning {
		if err := r.Pause(ctx, id); err != nil {
			return fmt.Errorf("checkpoint %s: %w", id, err)
		}
		defer func() {
			if err := r.thaw(id); err != nil && retErr == nil {
				retErr = fmt.Errorf("checkpoint %s: %w", id, err)
			}
		}()
	}
	wait := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if err := writeCheckpointFiles(dir, info); err != nil {
			return fmt.Errorf("checkpoint %s: %w", id, err)
		}
		out, err := r.runCRIU(ctx, id, filepath.Join(dir, dumpConfFile), filepath.Join(dir, dumpLogFile), nil, false, args...)
		if err == nil {
			return nil
		}
		reason, external := criuFailure(filepath.Join(dir, dumpLogFile))
		if errors.Is(err, errCRIUKilled) {
			reason = strings.TrimPrefix(reason+"; ", "; ") + err.Error()
			trimLog(filepath.Join(dir, dumpLogFile))
		}
		if reason == "" {
			reason = fmt.Sprintf("%s checkpoint: %v: %s", filepath.Base(r.binary), err, out)
		}
		now, serr := r.State(context.WithoutCancel(ctx), id)
		running := serr == nil && (now.Status == sandbox.StatusRunning || now.Status == sandbox.StatusPaused)
		// What counts is the peer: once the daemon has closed its end, the
		// box's end has no peer, and CRIU saves it even while the box is
		// frozen and cannot see the close.
		if external && running && attempt < checkpointAttempts {
			log.G(ctx).Debug("checkpoint: connection to the outside, retrying", "sandbox", id, "attempt", attempt, "reason", reason)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
				wait *= 2
				continue
			}
		}
		if !running {
			reason += " (and the sandbox's processes are gone)"
		}
		return fmt.Errorf("checkpoint %s: %s: %w", id, reason, sandbox.ErrCheckpoint)
	}
}

// checkpointable returns an error wrapping sandbox.ErrCheckpoint when CRIU
// is missing or the sandbox cannot be checkpointed by design.
func (r *Runtime) checkpointable(id string) error {
	if _, err := exec.LookPath("criu"); err != nil {
		return fmt.Errorf("criu is not installed: %w", sandbox.ErrCheckpoint)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir(id), configFile))
	if err != nil {
		return err
	}
	var cfg specs.Spec
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%s: %w", configFile, err)
	}
	if cfg.Linux == nil || !hasNetNS(cfg.Linux.Namespaces) {
		return fmt.Errorf("the sandbox shares the host's network namespace: %w", sandbox.ErrCheckpoint)
	}
	if slices.ContainsFunc(cfg.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.UserNamespace }) {
		return errUserNSCheckpoint
	}
	return nil
}

// errUserNSCheckpoint refuses a memory checkpoint of a box with a user
// namespace, before anything is frozen. CRIU 4.1 cannot restore such a
// box: it clones the restored root process into a new user namespace,
// which does not own the box's (external) network namespace, and moves it
// there first ("Can't setns .../net: Operation not permitted"). It would
// join the box's prepared user namespace ("join-ns user:PATH") only after
// that, and crun passes it none. A new user namespace would also carry the
// dumped mapping, so a fork would share its source's host ids. See
// docs/isolation.md, "User namespaces", for these and the dump's own
// failures.
var errUserNSCheckpoint = fmt.Errorf(`the sandbox has a user namespace, which CRIU cannot restore here `+
	`(for memory checkpoints set userns = "off" in the daemon's configuration: box root is then host root): %w`, sandbox.ErrCheckpoint)

func hasNetNS(ns []specs.LinuxNamespace) bool {
	for _, n := range ns {
		if n.Type == specs.NetworkNamespace {
			return true
		}
	}
	return false
}

// writeCheckpointFiles (re)writes dir's configuration and info files,
// after removing whatever a failed attempt left there.
func writeCheckpointFiles(dir string, info checkpointInfo) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	conf := criuConf
	if info.LogFile != "" {
		conf += "external " + info.LogFile + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, dumpConfFile), []byte(conf), 0o600); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, checkpointInfoFile), info)
}

// fileKey returns CRIU's key "file[<mnt_id>:<inode>]" of the file at p as
// the process pid holds it on stdout or stderr, or "" when it holds
// neither.
func fileKey(pid int, p string) (string, error) {
	var want unix.Stat_t
	if err := unix.Stat(p, &want); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", fmt.Errorf("stat %s: %w", p, err)
	}
	for _, fd := range []int{1, 2} {
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/fd/%d", pid, fd), &st) != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%d", pid, fd))
		if err != nil {
			return "", fmt.Errorf("fdinfo: %w", err)
		}
		for _, l := range strings.Split(string(b), "\n") {
			var mnt uint64
			if _, err := fmt.Sscanf(l, "mnt_id: %d", &mnt); err == nil {
				return fmt.Sprintf("file[%x:%x]", mnt, st.Ino), nil
			}
		}
		return "", fmt.Errorf("fdinfo of pid %d fd %d has no mnt_id", pid, fd)
	}
	return "", nil
}

// runCRIU runs "<runtime> args..." on the runtime's thread with CRIU's
// configuration file conf (CRIU reads CRIU_CONFIG_FILE in its RPC mode,
// which both crun and runc use) and extra inherited files from fd 3 on.
// With inCgroup the runtime starts inside the sandbox's cgroups (see
// startInCgroup). It returns the runtime's output.
//
// The runtime and CRIU run in a process group of their own, which is
// killed when ctx ends or after criuTimeout (CRIU can spin forever on
// damaged images), so the caller can clean up. Their output goes to a file,
// not a pipe, so that a process left holding it cannot block Wait.
func (r *Runtime) runCRIU(ctx context.Context, id, conf, logPath string, extra []*os.File, inCgroup bool, args ...string) (string, error) {
	out, err := os.CreateTemp(r.Dir(id), "criu-out-")
	if err != nil {
		return "", err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	cmd := r.command(context.Background(), append([]string{"--root", r.cfg.StateDir, "--log", filepath.Join(r.Dir(id), runtimeLog)}, args...)...)
	cmd.Env = append(os.Environ(), "CRIU_CONFIG_FILE="+conf)
	cmd.ExtraFiles = extra
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &unix.SysProcAttr{Setpgid: true}
	start := func() error { return r.ns.Do(cmd.Start) }
	if inCgroup && cgroups.DetectMode(cgroups.Root) == cgroups.Legacy {
		start = func() error { return r.startInCgroup(cmd, r.CgroupPath(id)) }
	}
	// A daemon killed from now on leaves the runtime and CRIU running; the
	// next one finds their group through this file and ends it
	// (stopStrayCRIU). Until the group is known the file says so, and
	// the next daemon looks for the group by the runtime's command line.
	groupFile := filepath.Join(r.Dir(id), criuGroupFile)
	if err := atomicfile.Write(groupFile, []byte(criuStarting+"\n"), 0o600); err != nil {
		return "", err
	}
	defer os.Remove(groupFile)
	if err := start(); err != nil {
		return "", err
	}
	if st, err := procStartTime(cmd.Process.Pid); err == nil {
		_ = atomicfile.Write(groupFile, []byte(fmt.Sprintf("%d %d\n", cmd.Process.Pid, st)), 0o600)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(criuTimeout)
	defer timer.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-timer.C:
			err = fmt.Errorf("%w: no result after %s", errCRIUKilled, criuTimeout)
			break wait
		case <-ctx.Done():
			err = fmt.Errorf("%w: %w", errCRIUKilled, ctx.Err())
			break wait
		case <-tick.C:
			// CRIU logs at debug level (the runtime asks for it) and
			// fills its log fast when it loops.
			if fi, serr := os.Stat(logPath); serr == nil && fi.Size() > criuLogLimit {
				err = fmt.Errorf("%w: its log passed %d MiB", errCRIUKilled, criuLogLimit>>20)
				break wait
			}
		}
	}
	if errors.Is(err, errCRIUKilled) {
		_ = unix.Kill(-cmd.Process.Pid, unix.SIGKILL)
		<-done
	}
	b, _ := os.ReadFile(out.Name())
	return strings.TrimSpace(string(b)), err
}

// criuGroupFile, in the sandbox's runtime directory, holds the process
// group id and start time of a checkpoint or restore in flight, or
// criuStarting while it starts.
const criuGroupFile = "criu.group"

// criuStarting is criuGroupFile's content before the group is known.
const criuStarting = "starting"

// strayWait is how long EndStray lets a stray checkpoint or restore run
// to its end before it kills it; a variable for tests.
var strayWait = 10 * time.Second

// EndStray implements sandbox.Checkpointer: it lets a stray checkpoint or
// restore end by itself, for up to strayWait, then kills it (see
// stopStrayCRIU).
//
// Why wait: a CRIU that ends normally leaves the box's processes as it
// found them (a dump that leaves them running detaches from them, a failed
// one resumes them). Killed in the middle, it can leave them stopped for a
// tracer that is gone, for good: a box whose every request hangs (seen
// when the daemon died during "fork --memory-state" on a loaded machine:
// the agent and PID 1 stuck in ptrace_stop after a breakpoint of CRIU's
// injected code, with no tracer). The box is kept or removed by recovery
// as usual afterwards; what the stray CRIU wrote is an orphan checkpoint.
func (r *Runtime) EndStray(ctx context.Context, id string) error {
	if err := identifiers.Validate("sandbox id", id); err != nil {
		return err
	}
	return r.stopStrayCRIU(id, strayWait)
}

// stopStrayCRIU ends the process group of a checkpoint or restore that a
// previous daemon started and did not see end (it was killed): it waits up
// to wait for the group to exit, then kills it and waits for it to be
// gone. Such a CRIU may hold the box's processes seized or frozen, so that
// they could not be killed or thawed.
func (r *Runtime) stopStrayCRIU(id string, wait time.Duration) error {
	groupFile := filepath.Join(r.Dir(id), criuGroupFile)
	b, err := os.ReadFile(groupFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscanf(string(b), "%d %d", &pid, &start); err != nil || pid <= 1 {
		// Killed while the runtime started: find its group, if it
		// started, by the sandbox directory on its command line.
		if pid = r.runtimeGroup(id); pid > 1 {
			start, err = procStartTime(pid)
			if err != nil {
				pid = 0
			}
		}
	}
	if pid > 1 {
		// The start time tells the group's leader from a process that
		// reused its pid; a leader that is gone may still have left
		// members (CRIU), which the group id still reaches.
		if st, err := procStartTime(pid); err != nil || st == start {
			for deadline := time.Now().Add(wait); groupAlive(pid) && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			_ = unix.Kill(-pid, unix.SIGKILL)
			for deadline := time.Now().Add(killTimeout); groupAlive(pid); {
				if time.Now().After(deadline) {
					return fmt.Errorf("the runtime's checkpoint or restore (process group %d) still running after %s: %w", pid, killTimeout, errdefs.ErrUnavailable)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	return os.Remove(groupFile)
}

// runtimeGroup returns the process group of a runtime process whose
// command line names sandbox id's directory (its --log), or 0. A runtime
// started for a checkpoint or restore leads its own group, with CRIU in it.
func (r *Runtime) runtimeGroup(id string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	want := []byte(r.Dir(id) + "/")
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, want) {
			continue
		}
		if f, err := procStat(pid); err == nil && len(f) > 2 {
			if pgid, err := strconv.Atoi(f[2]); err == nil && pgid == pid {
				return pgid
			}
		}
	}
	return 0
}

// groupAlive reports whether process group pgid has a member that is not
// a zombie. (kill(-pgid, 0) counts zombies, and an orphan's zombie waits
// for whatever reaps orphans here, which may be slow or never.)
func groupAlive(pgid int) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return unix.Kill(-pgid, 0) == nil
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := procStat(pid)
		if err != nil || len(f) < 3 {
			continue
		}
		if f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

// procStartTime returns the start time of process pid, in clock ticks
// since boot (field 22 of /proc/pid/stat).
func procStartTime(pid int) (uint64, error) {
	f, err := procStat(pid)
	if err != nil {
		return 0, err
	}
	// f[0] is field 3 (state); field 22 is f[19].
	if len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// procStat returns the fields of /proc/pid/stat after the command name:
// the first is field 3 (state).
func procStat(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name, in parentheses, may itself hold spaces and ")".
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	return strings.Fields(string(b[i+1:])), nil
}

// errCRIUKilled is returned by runCRIU when it killed the runtime.
var errCRIUKilled = errors.New("criu was stopped")

// criuLogLimit is the size of CRIU's log past which runCRIU takes it for
// stuck: the log of a dump or restore of a few GiB is some MiB. A variable
// for tests.
var criuLogLimit int64 = 256 << 20

// startInCgroup starts cmd from a new OS thread that shares the runtime
// thread's mount namespace and belongs to cgroup rel in every cgroup v1
// hierarchy (made if missing). The thread is never unlocked: it ends with
// its goroutine once cmd has started, and so leaves the cgroup.
//
// Why: on a cgroup v1 host, "crun restore" maps the box's cgroup mounts
// (/sys/fs/cgroup/<controller> inside the box, external to CRIU) to the
// cgroups crun itself is in, as /proc/self/cgroup shows them. Started from
// the daemon's cgroup, a restored box would see (read-only) the host's
// cgroups instead of its own, and the agent would read the wrong limits and
// miss its OOM kills. A thread's cgroup v1 membership is its own, and a
// forked child inherits its thread's.
func (r *Runtime) startInCgroup(cmd *exec.Cmd, rel string) error {
	hiers, err := v1Hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hiers {
		if err := makeCgroupV1(h, rel); err != nil {
			return fmt.Errorf("create cgroup %s: %w", filepath.Join(h, rel), err)
		}
	}
	mnt, err := os.Open(r.ns.mountNSPath())
	if err != nil {
		return fmt.Errorf("open the runtime thread's mount namespace: %w", err)
	}
	defer mnt.Close()
	errc := make(chan error, 1)
	osthread.Throwaway(func() {
		if err := joinMountNS(int(mnt.Fd())); err != nil {
			errc <- err
			return
		}
		tid := []byte(strconv.Itoa(unix.Gettid()))
		for _, h := range hiers {
			if err := os.WriteFile(filepath.Join(h, rel, "tasks"), tid, 0); err != nil {
				errc <- fmt.Errorf("join cgroup %s: %w", filepath.Join(h, rel), err)
				return
			}
		}
		errc <- cmd.Start()
	})
	return <-errc
}

// v1Hierarchies lists the mounted cgroup v1 hierarchies under
// cgroups.Root (the cgroup2 one of a hybrid host excluded).
func v1Hierarchies() ([]string, error) {
	ents, err := os.ReadDir(cgroups.Root)
	if err != nil {
		return nil, fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	var hs []string
	for _, e := range ents {
		if !e.IsDir() {
			continue // cpu,cpuacct -> links
		}
		h := filepath.Join(cgroups.Root, e.Name())
		var st unix.Statfs_t
		if unix.Statfs(h, &st) == nil && st.Type == unix.CGROUP_SUPER_MAGIC {
			hs = append(hs, h)
		}
	}
	return hs, nil
}

// makeCgroupV1 makes cgroup rel in hierarchy h, level by level; a new
// cpuset cgroup gets its parent's cpus and mems (it could hold no task
// otherwise).
func makeCgroupV1(h, rel string) error {
	p := h
	for _, part := range strings.Split(strings.Trim(rel, "/"), "/") {
		parent := p
		p = filepath.Join(p, part)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil && len(bytes.TrimSpace(b)) > 0 {
				continue
			}
			v, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(p, f), v, 0); err != nil {
				return err
			}
		}
	}
	return nil
}

// criuFailure reads a CRIU log and returns the reason of its failure in one
// line, and whether that reason is a unix socket connected outside the
// dumped processes.
func criuFailure(logPath string) (reason string, external bool) {
	f, err := os.Open(logPath)
	if err != nil {
		return "", false
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logTail {
		_, _ = f.Seek(fi.Size()-logTail, io.SeekStart) // the errors are at the end
	}
	var errs []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if _, msg, ok := strings.Cut(sc.Text(), "Error ("); ok {
			errs = append(errs, "("+msg)
		}
	}
	return explainCRIU(errs)
}

// explainCRIU picks the most telling of CRIU's error lines ("(file:line):
// message") and says it in words.
func explainCRIU(errs []string) (reason string, external bool) {
	var first string
	for _, e := range errs {
		src, msg, _ := strings.Cut(e, "): ")
		src = strings.TrimPrefix(src, "(")
		msg = strings.TrimSpace(msg)
		if i := strings.Index(strings.ToLower(msg), "consider using --"); i > 0 {
			msg = strings.TrimRight(msg[:i], " ,.") // advice on options callers cannot pass
		}
		switch {
		case strings.Contains(src, "util.c") && strings.Contains(msg, "RLIMIT_NOFILE"):
			continue // harmless: CRIU could not raise its own limit
		case strings.Contains(src, "sk-inet.c") || strings.Contains(src, "sk-tcp.c"):
			return "a TCP connection is established, and CRIU does not save those (" + msg + ")", false
		case strings.Contains(src, "sk-unix.c"):
			return "a unix socket is connected to a process outside the sandbox, such as an open connection from the daemon to the agent (" + msg + ")", true
		case strings.Contains(src, "cr-dump.c") && strings.HasPrefix(msg, "Can't get rlimit") && strings.Contains(msg, "not permitted"):
			// prlimit(pid) of a process whose uids are not the caller's
			// needs CAP_SYS_RESOURCE over it; hosts whose bounding set
			// drops it (some VMs and containers) cannot dump such a one.
			return "a process of the sandbox runs as a user other than root, and the daemon may not read its limits: that takes CAP_SYS_RESOURCE, which the daemon lacks on this host (" + msg + ")", false
		case strings.Contains(msg, "Can't lookup mount") || strings.Contains(src, "files-ext.c"):
			return "a process has a file open outside the sandbox's mounts (" + msg + ")", false
		}
		if first == "" {
			first = "criu: " + msg
		}
	}
	return first, false
}

// Restore creates sandbox id from spec as Create does (root file system,
// network namespace, bundle: the cgroup, limits and hostname are spec's),
// then resumes the processes saved in dir with "<runtime> restore"
// instead of starting an agent. The agent's listening socket comes back
// with it, in the new network namespace, and its stdout and stderr are the
// new sandbox's log. As Start, it sets the agent's oom_score_adj; the pid
// file makes State, Stop, Delete and Usage work as for a started box. The
// restored hostname is the checkpointed box's: Restore sets spec's (or id)
// in the box's UTS namespace. On error it leaves nothing; CRIU's log is
// copied to dir/restore-<id>.log and the error wraps sandbox.ErrCheckpoint
// with the reason.
func (r *Runtime) Restore(ctx context.Context, id string, spec *sandbox.Spec, dir string) error {
	if r.runsc != nil {
		return r.errRunscCheckpoint("restore", id)
	}
	if r.binary == "" {
		return r.errNoBinary("restore", id)
	}
	if err := checkSpec(id, spec); err != nil {
		return err
	}
	if spec.HostNetwork {
		return fmt.Errorf("restore %s: a sandbox on the host's network cannot be restored: %w", id, errdefs.ErrInvalidArgument)
	}
	var info checkpointInfo
	b, err := os.ReadFile(filepath.Join(dir, checkpointInfoFile))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restore %s: no checkpoint in %s: %w", id, dir, errdefs.ErrNotFound)
		}
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return fmt.Errorf("restore %s: %s: %w", id, checkpointInfoFile, err)
	}
	if rt := filepath.Base(r.binary); info.Runtime != rt {
		return fmt.Errorf("restore %s: the checkpoint was made by %s, this runtime is %s: %w", id, info.Runtime, rt, sandbox.ErrCheckpoint)
	}
	if _, err := exec.LookPath("criu"); err != nil {
		return fmt.Errorf("restore %s: criu is not installed: %w", id, sandbox.ErrCheckpoint)
	}
	cu, err := r.newDir(ctx, id)
	if err != nil {
		return err
	}
	defer cu.Clean()
	if _, err := r.prepare(id, spec, false, &log.Steps{}); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	sdir := r.Dir(id)
	work := filepath.Join(sdir, restoreWorkDir)
	if err := os.Mkdir(work, 0o700); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	logf, err := openLog(sdir)
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	defer logf.Close()
	conf := criuConf
	if info.LogFile != "" {
		conf += fmt.Sprintf("inherit-fd fd[%d]:%s\n", restoreLogFD, info.LogFile)
	}
	if err := os.WriteFile(filepath.Join(sdir, restoreConfFile), []byte(conf), 0o600); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	extra := make([]*os.File, restoreLogFD-2) // fds 3..restoreLogFD
	for i := range extra {
		extra[i] = logf
	}
	args := []string{"restore", "--detach", "--image-path", dir, "--work-path", work, "--file-locks",
		"--bundle", filepath.Join(sdir, bundleDir), "--pid-file", filepath.Join(sdir, pidFile)}
	rlog := filepath.Join(work, restoreLogFile)
	out, err := r.runCRIU(ctx, id, filepath.Join(sdir, restoreConfFile), rlog, extra, true, append(args, id)...)
	if err != nil {
		reason, _ := criuFailure(rlog)
		if errors.Is(err, errCRIUKilled) {
			reason = strings.TrimPrefix(reason+"; ", "; ") + err.Error()
		}
		if reason == "" {
			reason = fmt.Sprintf("%s restore: %v: %s", filepath.Base(r.binary), err, out)
		}
		keepTail(rlog, filepath.Join(dir, "restore-"+id+".log"))
		return fmt.Errorf("restore %s: %s: %w", id, reason, sandbox.ErrCheckpoint)
	}
	if err := r.leaveUnified(id); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	p, ok, err := r.init(id)
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if !ok {
		return fmt.Errorf("restore %s: the restored processes exited: %w", id, sandbox.ErrCheckpoint)
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = id
	}
	err = setHostname(p, hostname)
	p.close()
	if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	if err := r.protectAgent(ctx, id); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	cu.Release()
	return nil
}

// leaveUnified moves the processes of restored sandbox id, on a hybrid
// host, out of the cgroup2 hierarchy's <CgroupParent>/<id> (where CRIU puts
// them, whatever its cgroup mode) back into the daemon's cgroup there,
// where the processes of a started box are (the runtime, which does not see
// that hierarchy, leaves them where they were born), and removes those
// cgroups. So a restored box is like a started one, down to where its
// zombies show.
func (r *Runtime) leaveUnified(id string) error {
	if cgroups.DetectMode(cgroups.Root) != cgroups.Legacy {
		return nil
	}
	if ok, _ := isCgroup2Mount(unifiedMount); !ok {
		return nil
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	var own string
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return nil
	}
	box := filepath.Join(unifiedMount, r.CgroupPath(id))
	var dirs []string
	_ = filepath.WalkDir(box, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	dst := filepath.Join(unifiedMount, own, "cgroup.procs")
	for i := len(dirs) - 1; i >= 0; i-- { // children first
		// A process may fork while its siblings move: move until the
		// cgroup is empty and can go.
		for attempt := 0; ; attempt++ {
			procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
			for _, pid := range strings.Fields(string(procs)) {
				if err := os.WriteFile(dst, []byte(pid), 0); err != nil && !errors.Is(err, unix.ESRCH) {
					return fmt.Errorf("move pid %s to cgroup %s: %w", pid, own, err)
				}
			}
			err := unix.Rmdir(dirs[i])
			if err == nil || errors.Is(err, unix.ENOENT) {
				break
			}
			if !errors.Is(err, unix.EBUSY) || attempt == 100 {
				return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
			}
		}
	}
	return nil
}

// logTail is how much of the end of a CRIU log is read or kept.
const logTail = 4 << 20

// keepTail copies the end of the log src to dst, for operators.
func keepTail(src, dst string) {
	f, err := os.Open(src)
	if err != nil {
		return
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logTail {
		_, _ = f.Seek(fi.Size()-logTail, io.SeekStart)
	}
	b, _ := io.ReadAll(io.LimitReader(f, logTail))
	_ = os.WriteFile(dst, b, 0o600)
}

// trimLog keeps only the end of a log that grew too big.
func trimLog(p string) {
	if fi, err := os.Stat(p); err == nil && fi.Size() > logTail {
		keepTail(p, p+".tail")
		_ = os.Rename(p+".tail", p)
	}
}

// setHostname sets the hostname in the UTS namespace of p, from an OS
// thread that joins it and then returns to its own (see osthread.Locked).
func setHostname(p process, name string) error {
	ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/uts", p.pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open uts namespace: %w", err)
	}
	defer unix.Close(ns)
	if p.exited(0) { // the pid could have been reused before the open
		return fmt.Errorf("pid %d exited: %w", p.pid, errdefs.ErrUnavailable)
	}
	return osthread.InNamespace(ns, unix.CLONE_NEWUTS, func() error {
		if err := unix.Sethostname([]byte(name)); err != nil {
			return fmt.Errorf("sethostname: %w", err)
		}
		return nil
	})
}
