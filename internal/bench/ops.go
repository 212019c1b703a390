package bench

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/client"
)

// Result names of the operations measured through the Go SDK.
const (
	NamePause           = "corral pause"
	NameUnpause         = "corral resume (paused)"
	NameSuspend         = "corral suspend"
	NameResume          = "corral resume (suspended)"
	NameSuspendFS       = "corral suspend --filesystem-only"
	NameResumeFS        = "corral resume (filesystem-only)"
	NameForkMemoryState = "corral fork --memory-state (1 MiB written)"
)

// ForkName is the name of the fork series of a sandbox that wrote n bytes.
func ForkName(n int64) string { return fmt.Sprintf("corral fork (%s written)", sizeName(n)) }

// ForkUnsyncedName is the name of the fork series of a sandbox that has
// just written n bytes without syncing them, before each fork.
func ForkUnsyncedName(n int64) string {
	return fmt.Sprintf("corral fork (%s written, not synced)", sizeName(n))
}

// unsyncedForkBytes returns n for a name made by ForkUnsyncedName(n).
func unsyncedForkBytes(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "corral fork (")
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, " written, not synced)"); !ok {
		return 0, false
	}
	var n int64
	var unit string
	if _, err := fmt.Sscanf(s, "%d %s", &n, &unit); err != nil || n <= 0 {
		return 0, false
	}
	shift, ok := map[string]uint{"B": 0, "KiB": 10, "MiB": 20, "GiB": 30}[unit]
	if !ok {
		return 0, false
	}
	return n << shift, ForkUnsyncedName(n<<shift) == name
}

// SuspendSize is what suspended sandboxes keep on disk.
type SuspendSize struct {
	// MemoryBytes is the median size of the saved memory state of an idle
	// sandbox suspended with its processes (0 when that failed).
	MemoryBytes int64 `json:"memory_bytes"`
	// Samples is how many suspensions MemoryBytes is the median of.
	Samples int `json:"samples"`
}

// ops measures, through the SDK, the warm pool's create -> first exec,
// fork, pause, and suspend and resume.
func (r *run) ops(ctx context.Context) {
	r.pool(ctx)
	for _, n := range r.cfg.ForkBytes {
		r.progress("%s x%d", ForkName(n), r.cfg.Forks)
		r.addResult(GroupFork, ForkName(n), func() ([]time.Duration, error) { return r.fork(ctx, n, false, true) })
	}
	if n := r.cfg.ForkUnsyncedBytes; n > 0 {
		r.progress("%s x%d", ForkUnsyncedName(n), r.cfg.Forks)
		r.addResult(GroupFork, ForkUnsyncedName(n), func() ([]time.Duration, error) { return r.fork(ctx, n, false, false) })
	}
	r.progress("%s x%d", NameForkMemoryState, r.cfg.Forks)
	r.addResult(GroupFork, NameForkMemoryState, func() ([]time.Duration, error) { return r.fork(ctx, 1<<20, true, true) })
	r.suspend(ctx)
}

func (r *run) addResult(group, name string, fn func() ([]time.Duration, error)) {
	s, err := fn()
	res := summarize(name, s, err)
	res.Group = group
	r.rep.Results = append(r.rep.Results, res)
}

// newBox creates one of this run's sandboxes (never from a pool) and
// returns its ID.
func (r *run) newBox(ctx context.Context) (string, error) {
	req := r.createRequest()
	sb, err := r.cfg.Client.CreateSandbox(ctx, req)
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

func (r *run) exec(ctx context.Context, id string, cmd ...string) error {
	var stderr limitedBuffer
	res, err := r.cfg.Client.Sandbox(id).Exec(ctx, client.ExecOptions{Cmd: cmd, Stderr: &stderr})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%s exited %d: %s", cmd[0], res.ExitCode, stderr.String())
	}
	return nil
}

func (r *run) remove(ctx context.Context, id string) {
	_ = r.cfg.Client.RemoveSandbox(context.WithoutCancel(ctx), id, client.RemoveOptions{Force: true})
}

// fork times Fork (one copy) of a sandbox that wrote n bytes of random
// data, and removes each copy (untimed). With synced the box writes once
// and flushes its file system; without, it writes the data again before
// each fork and does not flush it, as an agent forking right after a
// package install would.
func (r *run) fork(ctx context.Context, n int64, memory, synced bool) ([]time.Duration, error) {
	c := r.cfg.Client
	id, err := r.newBox(ctx)
	if err != nil {
		return nil, err
	}
	defer r.remove(ctx, id)
	// sync -f flushes the box's own file system (syncfs), as an agent's
	// fsync would: its data is then on the box's disk image, and what the
	// host still holds of the image in its page cache is not flushed. A
	// plain sync (sync(2)) would also flush the host's file systems, in an
	// order that decides how much of the image stays dirty.
	write := fmt.Sprintf("head -c %d /dev/urandom > /fork.data", n)
	if synced {
		if err := r.exec(ctx, id, "sh", "-c", write+" && sync -f /fork.data"); err != nil {
			return nil, fmt.Errorf("write %s: %w", sizeName(n), err)
		}
	}
	var s []time.Duration
	for i := range r.cfg.Forks {
		if !synced {
			if err := r.exec(ctx, id, "sh", "-c", write); err != nil {
				return s, fmt.Errorf("write %s: %w", sizeName(n), err)
			}
		}
		start := time.Now()
		copies, err := c.Fork(ctx, id, client.ForkOptions{Count: 1, MemoryState: memory})
		d := time.Since(start)
		if err == nil && len(copies) != 1 {
			err = fmt.Errorf("fork made %d copies; want 1", len(copies))
		}
		if err == nil && i == 0 {
			// Once: the copy has the source's data.
			if err = r.exec(ctx, copies[0].ID, "sh", "-c", fmt.Sprintf("test $(wc -c < /fork.data) -eq %d", n)); err != nil {
				err = fmt.Errorf("check the copy: %w", err)
			}
		}
		for _, cp := range copies {
			r.remove(ctx, cp.ID)
		}
		if err != nil {
			return s, err
		}
		s = append(s, d)
	}
	return s, nil
}

// suspend times pause/resume, suspend/resume with memory and
// filesystem-only suspend/resume of idle sandboxes; each resumed sandbox
// must answer an exec (untimed).
func (r *run) suspend(ctx context.Context) {
	c := r.cfg.Client
	type pair struct{ first, second string }
	cycle := func(p pair, down func(ctx context.Context, id string) (*client.SandboxInfo, error)) {
		r.progress("%s / %s x%d", p.first, p.second, r.cfg.Forks)
		var downs, ups []time.Duration
		var sizes []int64
		err := func() error {
			id, err := r.newBox(ctx)
			if err != nil {
				return err
			}
			defer r.remove(ctx, id)
			for range r.cfg.Forks {
				start := time.Now()
				sb, err := down(ctx, id)
				if err != nil {
					return err
				}
				downs = append(downs, time.Since(start))
				if sb.Suspended != nil && sb.Suspended.Memory {
					sizes = append(sizes, sb.Suspended.MemoryBytes)
				}
				start = time.Now()
				if _, err := c.Resume(ctx, id); err != nil {
					return fmt.Errorf("resume: %w", err)
				}
				ups = append(ups, time.Since(start))
				if err := r.exec(ctx, id, "true"); err != nil {
					return fmt.Errorf("exec after resume: %w", err)
				}
			}
			return nil
		}()
		d, u := summarize(p.first, downs, err), summarize(p.second, ups, err)
		d.Group, u.Group = GroupSuspend, GroupSuspend
		r.rep.Results = append(r.rep.Results, d, u)
		if len(sizes) > 0 && p.first == NameSuspend {
			r.rep.Suspend = &SuspendSize{MemoryBytes: medianInt(sizes), Samples: len(sizes)}
		}
	}
	cycle(pair{NamePause, NameUnpause}, c.Pause)
	cycle(pair{NameSuspend, NameResume}, func(ctx context.Context, id string) (*client.SandboxInfo, error) {
		return c.Suspend(ctx, id, client.SuspendOptions{})
	})
	cycle(pair{NameSuspendFS, NameResumeFS}, func(ctx context.Context, id string) (*client.SandboxInfo, error) {
		return c.Suspend(ctx, id, client.SuspendOptions{FilesystemOnly: true})
	})
}

// maxPoolSize is the daemon's largest pool (sandbox.MaxPoolSize).
const maxPoolSize = 1024

// pool times create -> first exec (-> remove) with a warm pool of the
// run's image ready, a pool large enough that every timed create can take
// a ready sandbox (up to maxPoolSize of them).
func (r *run) pool(ctx context.Context) {
	c := r.cfg.Client
	r.progress("%s x%d", NamePoolExec, r.cfg.Lifecycles)
	full, toExec, err := func() ([]time.Duration, []time.Duration, error) {
		size := min(r.cfg.Lifecycles, maxPoolSize)
		p, err := c.SetPool(ctx, client.PoolSpec{Image: r.cfg.Image, Runtime: r.cfg.Runtime, Size: size})
		if err != nil {
			return nil, nil, fmt.Errorf("set pool: %w", err)
		}
		defer c.RemovePool(context.WithoutCancel(ctx), p.Key)
		if err := r.waitPool(ctx, p.Key, size); err != nil {
			return nil, nil, err
		}
		req := r.createRequest()
		req.NoPool = false
		return r.corralLifecycle(ctx, req)
	}()
	life := summarize(NamePoolLifecycle, full, err)
	ce := summarize(NamePoolExec, toExec, err)
	life.Group, ce.Group = GroupLifecycle, GroupLifecycle
	r.rep.Results = append(r.rep.Results, ce, life)
}

// waitPool waits until the pool key has n sandboxes ready.
func (r *run) waitPool(ctx context.Context, key string, n int) error {
	deadline := time.Now().Add(time.Duration(n)*time.Second + time.Minute)
	for {
		pools, err := r.cfg.Client.Pools(ctx)
		if err != nil {
			return err
		}
		ready, last := 0, ""
		for _, p := range pools {
			if p.Key == key {
				ready, last = p.Ready, p.Error
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pool has %d of %d sandboxes ready after waiting (last error: %q)", ready, n, last)
		}
		sleep(ctx, 200*time.Millisecond)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func medianInt(v []int64) int64 {
	d := make([]time.Duration, len(v))
	for i, x := range v {
		d[i] = time.Duration(x)
	}
	m, _ := medianP90(d)
	return int64(m)
}

// sizeName is n as "1 MiB", "1 GiB", "512 KiB" or "N B".
func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
