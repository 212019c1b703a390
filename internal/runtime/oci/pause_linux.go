package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// freezeTimeout bounds how long Pause waits for every task to freeze.
const freezeTimeout = 5 * time.Second

// Pause freezes the sandbox's cgroup through the freezer, directly (no
// runtime exec): freezer.state on a cgroup v1 or hybrid host,
// cgroup.freeze on a unified one. It returns once every task is frozen.
// Pausing a paused sandbox is success; a sandbox that is not running is
// errdefs.ErrFailedPrecondition.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	st, err := r.State(ctx, id)
	if err != nil {
		return err
	}
	switch st.Status {
	case sandbox.StatusPaused:
		return nil
	case sandbox.StatusRunning:
	default:
		return fmt.Errorf("pause %s: sandbox is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	f := r.freezer(id)
	if err := f.set(true); err != nil {
		return fmt.Errorf("pause %s: %w", id, err)
	}
	wait := 100 * time.Microsecond
	for deadline := time.Now().Add(freezeTimeout); ; {
		done, err := f.frozen()
		if err == nil && done {
			return nil
		}
		if err == nil && time.Now().After(deadline) {
			err = fmt.Errorf("tasks still freezing after %s: %w", freezeTimeout, errdefs.ErrUnavailable)
		}
		if err != nil {
			_ = f.set(false)
			return fmt.Errorf("pause %s: %w", id, err)
		}
		if f.v1 {
			// The v1 freezer may need the request again to finish
			// (kernel doc cgroup-v1/freezer-subsystem).
			_ = f.set(true)
		}
		select {
		case <-ctx.Done():
			_ = f.set(false)
			return fmt.Errorf("pause %s: %w", id, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 20*time.Millisecond)
	}
}

// Unpause thaws the sandbox's cgroup. Unpausing a running sandbox is
// success.
func (r *Runtime) Unpause(ctx context.Context, id string) error {
	if _, err := r.State(ctx, id); err != nil {
		return err
	}
	if err := r.thaw(id); err != nil {
		return fmt.Errorf("unpause %s: %w", id, err)
	}
	return nil
}

// thaw thaws the sandbox's cgroup if it is frozen; a missing cgroup is
// success.
func (r *Runtime) thaw(id string) error {
	f := r.freezer(id)
	if !f.requested() {
		return nil
	}
	return f.set(false)
}

// frozen reports whether the sandbox's cgroup is frozen or freezing.
func (r *Runtime) frozen(id string) bool { return r.freezer(id).requested() }

// freezer is a sandbox's freezer: the v1 freezer hierarchy's cgroup, or
// the cgroup v2 one.
type freezer struct {
	dir string
	v1  bool
}

func (r *Runtime) freezer(id string) freezer {
	if cgroups.DetectMode(cgroups.Root) == cgroups.Unified {
		return freezer{dir: filepath.Join(cgroups.Root, r.CgroupPath(id))}
	}
	return freezer{dir: filepath.Join(cgroups.Root, "freezer", r.CgroupPath(id)), v1: true}
}

func (f freezer) set(frozen bool) error {
	file, v := "cgroup.freeze", "0"
	if frozen {
		v = "1"
	}
	if f.v1 {
		file, v = "freezer.state", "THAWED"
		if frozen {
			v = "FROZEN"
		}
	}
	if err := os.WriteFile(filepath.Join(f.dir, file), []byte(v), 0); err != nil {
		if errors.Is(err, fs.ErrNotExist) && !frozen {
			return nil
		}
		return fmt.Errorf("freezer: %w", err)
	}
	return nil
}

// requested reports whether the cgroup is asked to be frozen (frozen or
// still freezing); false when it does not exist.
func (f freezer) requested() bool {
	if f.v1 {
		b, err := os.ReadFile(filepath.Join(f.dir, "freezer.state"))
		s := strings.TrimSpace(string(b))
		return err == nil && (s == "FROZEN" || s == "FREEZING")
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.freeze"))
	return err == nil && strings.TrimSpace(string(b)) == "1"
}

// frozen reports whether every task of the cgroup is frozen.
func (f freezer) frozen() (bool, error) {
	if f.v1 {
		b, err := os.ReadFile(filepath.Join(f.dir, "freezer.state"))
		if err != nil {
			return false, fmt.Errorf("freezer: %w", err)
		}
		return strings.TrimSpace(string(b)) == "FROZEN", nil
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.events"))
	if err != nil {
		return false, fmt.Errorf("freezer: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "frozen 1" {
			return true, nil
		}
	}
	return false, nil
}

// Sync flushes the sandbox's root file system so that a copy of its disk
// is consistent: syncfs(2) on every mount Create made (recorded in
// mounts.json), from the runtime thread's mount namespace where they live.
// That covers the ext4 disk that holds the overlay's upper directory and
// the overlay itself (whose syncfs syncs its upper file system), whether
// or not the box runs. A running box's root is flushed through its PID 1
// as well: a daemon started again after a crash has a new runtime
// namespace, where the recorded targets are plain directories (syncfs of
// them flushes the host's file system, not the box's disk), and the box's
// own mount namespace is the only one that still holds its mounts. Freeze
// the box first (Pause) so that nothing writes after the flush.
func (r *Runtime) Sync(ctx context.Context, id string) error {
	if err := identifiers.Validate("sandbox id", id); err != nil {
		return err
	}
	p, running, err := r.init(id)
	if err != nil {
		return fmt.Errorf("sync %s: %w", id, err)
	}
	if running {
		err := syncRoot(p.pid)
		p.close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", id, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(r.Dir(id), mountsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", id, err)
	}
	var targets []string
	if err := json.Unmarshal(b, &targets); err != nil {
		return fmt.Errorf("sync %s: %s: %w", id, mountsFile, err)
	}
	err = r.ns.Do(func() error {
		for _, t := range targets {
			fd, err := unix.Open(t, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				return fmt.Errorf("open %s: %w", t, err)
			}
			err = unix.Syncfs(fd)
			unix.Close(fd)
			if err != nil {
				return fmt.Errorf("syncfs %s: %w", t, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sync %s: %w", id, err)
	}
	return nil
}

// syncRoot flushes the file system at the root of process pid (a box's
// overlay, whose syncfs flushes its upper file system: the box's disk),
// from whatever mount namespace the caller is in.
func syncRoot(pid int) error {
	root := fmt.Sprintf("/proc/%d/root", pid)
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(fd)
	if err := unix.Syncfs(fd); err != nil {
		return fmt.Errorf("syncfs %s: %w", root, err)
	}
	return nil
}
