package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// execWait bounds how long Start waits for the sandbox's PID 1 to run its
// program after the OCI runtime returned.
const execWait = 10 * time.Second

// program returns the host path of the program that PID 1 of the bundle
// cfg runs: the source of the bind mount at its args[0] (corral-init or
// the agent), or "" when args[0] is not bound from the host.
func program(cfg *specs.Spec) string {
	if cfg.Process == nil || len(cfg.Process.Args) == 0 {
		return ""
	}
	for _, m := range cfg.Mounts {
		if m.Type == "bind" && m.Destination == cfg.Process.Args[0] {
			return m.Source
		}
	}
	return ""
}

// programOf returns program of sandbox id: remembered by Create, or read
// from its bundle (a sandbox created by an earlier daemon).
func (r *Runtime) programOf(id string) string {
	r.mu.Lock()
	prog, ok := r.programs[id]
	delete(r.programs, id)
	r.mu.Unlock()
	if ok {
		return prog
	}
	b, err := os.ReadFile(filepath.Join(r.Dir(id), configFile))
	if err != nil {
		return ""
	}
	var cfg specs.Spec
	if json.Unmarshal(b, &cfg) != nil {
		return ""
	}
	return program(&cfg)
}

// waitExec waits until PID 1 of sandbox id runs prog: the OCI runtime
// forks PID 1 and returns, and PID 1 execs the sandbox's program a moment
// later, or fails to (the kernel refusing the exec, for instance), which
// the runtime does not report. It returns an error with the reason when
// PID 1 exited instead. Without prog (a test's command line, see
// WithProcessArgs) there is nothing to wait for.
func (r *Runtime) waitExec(ctx context.Context, id, prog string) error {
	if prog == "" {
		return nil
	}
	p, ok, err := r.init(id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("the sandbox's init exited at start: %s", r.exitReason(id))
	}
	defer p.close()
	var want unix.Stat_t
	if err := unix.Stat(prog, &want); err != nil {
		return fmt.Errorf("stat %s: %w", prog, err)
	}
	exe := "/proc/" + strconv.Itoa(p.pid) + "/exe"
	deadline := time.Now().Add(execWait)
	for pause := 50 * time.Microsecond; ; pause = min(2*pause, 5*time.Millisecond) {
		var st unix.Stat_t
		if unix.Stat(exe, &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino {
			return nil
		}
		if p.exited(0) {
			return fmt.Errorf("the sandbox's init exited at start: %s", r.exitReason(id))
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("the sandbox's init did not start %s within %s", prog, execWait)
		}
		time.Sleep(pause)
	}
}

// maxReason bounds the log line that exitReason quotes.
const maxReason = 512

// exitReason says why sandbox id's PID 1 ended, from the last line of its
// log (agent.log, where the runtime, corral-init and the agent write), for
// example `exec container process "/.corral/init": Argument list too long`.
// PID 1's exit status is not known: its parent is the OCI runtime, which
// has exited, not the daemon. A gvisor box the OOM killer ended says so
// (runscOOMReason).
func (r *Runtime) exitReason(id string) string {
	if r.runsc != nil {
		if why := r.runscOOMReason(id); why != "" {
			return why
		}
	}
	line := lastLine(filepath.Join(r.Dir(id), agentLog))
	if line == "" {
		return "it left no message in its log (killed by a signal?)"
	}
	return "its log ends with: " + line
}

// lastLine returns the last non-empty line of the file at p, at most
// maxReason bytes of it, or "".
func lastLine(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	const tail = 4096
	if fi, err := f.Stat(); err == nil && fi.Size() > tail {
		if _, err := f.Seek(fi.Size()-tail, io.SeekStart); err != nil {
			return ""
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, tail))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	if len(b) > maxReason {
		b = append(b[:maxReason:maxReason], "..."...)
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}
