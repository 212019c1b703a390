package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/units"
)

var _ sandbox.FilesOnly = (*Runtime)(nil)

// globalArgs returns the runtime's global flags (its state directory, and
// runsc's own) followed by args.
func (r *Runtime) globalArgs(args ...string) []string {
	out := []string{"--root", r.cfg.StateDir}
	if r.runsc != nil {
		out = append(out, r.runsc.globalArgs()...)
	}
	return append(out, args...)
}

// runArgs is the command line that starts sandbox id detached: crun and
// runc get the agent's listening socket as fd 3 (--preserve-fds 1); runsc
// gets none, its agent listens on TCP in the box (see RunscConfig).
func (r *Runtime) runArgs(logPath, pidPath, bundle, id string) []string {
	args := r.globalArgs("--log", logPath, "run", "--detach")
	if r.runsc == nil {
		args = append(args, "--preserve-fds", "1")
	}
	return append(args, "--pid-file", pidPath, "--bundle", bundle, id)
}

// agentListen is the agent's --listen address in a runsc box; "" for
// crun and runc, whose agent takes the socket on fd 3.
func (r *Runtime) agentListen() string {
	if r.runsc == nil {
		return ""
	}
	return fmt.Sprintf("tcp://127.0.0.1:%d", AgentTCPPort)
}

// AgentTokenPath is where the agent of a gvisor box finds its connection
// token when it starts (and removes it).
const AgentTokenPath = "/.corral-agent-token"

// agentToken makes the connection token of runsc box id's agent: 32
// random bytes in hex, written to agentclient.TokenFile beside the box's
// network namespace file (host side, mode 0600), where the daemon's
// dialer reads it and sends it first on every connection. The agent
// serves only connections that do: the box's processes share its network
// namespace but cannot learn the token (see handAgentToken). "" for crun
// and runc, whose agent tells its peers apart by pid, and for a runsc box
// that does not run the agent.
func (r *Runtime) agentToken(id string) (string, error) {
	if r.runsc == nil || r.processArgs != nil {
		return "", nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	token := hex.EncodeToString(b)
	if err := os.WriteFile(filepath.Join(r.Dir(id), agentclient.TokenFile), []byte(token), 0o600); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	return token, nil
}

// handAgentToken writes the token of runsc box id into its root file
// system at AgentTokenPath before each start: the agent reads and removes
// it before it serves anything, so before any process of the box runs.
// The root is mounted in the runtime's mount namespace, reached through
// its thread's root. A no-op for boxes without a token.
func (r *Runtime) handAgentToken(id string) error {
	token, err := os.ReadFile(filepath.Join(r.Dir(id), agentclient.TokenFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("agent token: %w", err)
	}
	p := fmt.Sprintf("/proc/%d/task/%d/root%s", os.Getpid(), r.ns.tid, filepath.Join(r.Dir(id), rootfsDir, AgentTokenPath))
	// The box may have left anything at that path: never follow it.
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("hand the agent its token: %w", err)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("hand the agent its token: %w", err)
	}
	_, err = f.Write(token)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("hand the agent its token: %w", err)
	}
	return nil
}

// runscState are the files runsc keeps for sandbox id in its --root (a
// single-container sandbox: its id is also the sandbox's).
func (r *Runtime) runscState(id string) []string {
	return []string{
		filepath.Join(r.cfg.StateDir, id+"_sandbox:"+id+".state"),
		filepath.Join(r.cfg.StateDir, id+"_sandbox:"+id+".lock"),
		filepath.Join(r.cfg.StateDir, "runsc-"+id+".sock"),
	}
}

// hasState reports whether the runtime keeps state for id: crun and runc
// a directory <StateDir>/<id>, runsc its files (runscState).
func (r *Runtime) hasState(id string) bool {
	if r.runsc == nil {
		_, err := os.Stat(filepath.Join(r.cfg.StateDir, id))
		return !errors.Is(err, fs.ErrNotExist)
	}
	_, err := os.Stat(r.runscState(id)[0])
	return !errors.Is(err, fs.ErrNotExist)
}

// removeState removes what the runtime keeps for id once its processes
// are gone.
func (r *Runtime) removeState(id string) error {
	if r.runsc == nil {
		return os.RemoveAll(filepath.Join(r.cfg.StateDir, id))
	}
	for _, p := range r.runscState(id) {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// boxPids is the pids limit of runsc box id in gVisor's own cgroup: the
// agent's --pids-max in its config.json (see RunscHostPids), 0 when it has
// none.
func (r *Runtime) boxPids(id string) int64 {
	b, err := os.ReadFile(filepath.Join(r.Dir(id), configFile))
	if err != nil {
		return 0
	}
	var cfg specs.Spec
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.Process == nil {
		return 0
	}
	args := cfg.Process.Args
	i := slices.Index(args, "--pids-max")
	if i < 0 || i+1 >= len(args) {
		return 0
	}
	n, _ := strconv.ParseInt(args[i+1], 10, 64)
	return n
}

// runscOOMReason says that the host's OOM killer ended the kernel of
// runsc box id, from the OOM kill counter of its cgroup, which stays until
// Delete; "" when it did not. gVisor's kernel leaves no message in its log
// when it is killed.
func (r *Runtime) runscOOMReason(id string) string {
	s, err := cgroups.Read(cgroups.Root, r.CgroupPath(id))
	if err != nil || s.OOMKills == 0 {
		return ""
	}
	limit := ""
	if s.MemoryLimitBytes > 0 {
		limit = " (memory limit " + units.FormatBytes(int64(s.MemoryLimitBytes)) + ")"
	}
	return "killed: out of memory" + limit + ": the host's OOM killer ended gVisor's kernel, and with it the box (in the gvisor tier the memory limit bounds the whole box)"
}

// errFilesOnly is why a gvisor box's memory cannot be saved.
const errFilesOnly = "the gvisor tier keeps files only: runsc cannot checkpoint a box on the host's network stack (--network=host), which this tier uses, so its memory state cannot be saved (suspend keeps the files, fork copies them)"

// FilesOnly implements sandbox.FilesOnly: runsc boxes keep files only.
func (r *Runtime) FilesOnly() string {
	if r.runsc != nil {
		return errFilesOnly
	}
	return ""
}

// errRunscCheckpoint is what Checkpoint and Restore return for runsc.
func (r *Runtime) errRunscCheckpoint(op, id string) error {
	return fmt.Errorf("%s %s: %s: %w", op, id, errFilesOnly, sandbox.ErrCheckpoint)
}

// waitAgentTCP waits until the agent of runsc box id accepts connections:
// unlike the socket crun and runc boxes get, made by the daemon before the
// box starts, a gvisor box's agent makes its own, a moment after runsc
// returns. It fails with the reason when the box's kernel process exits
// first.
func (r *Runtime) waitAgentTCP(ctx context.Context, id string) error {
	deadline := time.Now().Add(execWait)
	for pause := time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := agentclient.Dial(dctx, r.AgentAddr(id))
		cancel()
		if err == nil {
			c.Close()
			return nil
		}
		p, ok, perr := r.init(id)
		if perr != nil {
			return perr
		}
		if !ok {
			return fmt.Errorf("the sandbox's init exited at start: %s", r.exitReason(id))
		}
		p.close()
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("the agent of gvisor box %s is not listening after %s: %w", id, execWait, err)
		}
		time.Sleep(pause)
	}
}
