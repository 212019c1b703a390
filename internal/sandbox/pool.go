package sandbox

import (
	"context"
	"crypto/sha256"
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

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
)

// MaxPoolSize bounds PoolSpec.Size.
const MaxPoolSize = 1024

// poolsFile keeps the pools set through the API across restarts.
const poolsFile = "pools.json"

// PoolSpec asks for Size ready sandboxes of one image, runtime and limits.
// Zero limits take the image's and the daemon's defaults, as at create.
type PoolSpec struct {
	Image   string `json:"image"`
	Runtime string `json:"runtime,omitempty"`
	// Tier is the isolation tier; empty means Runtime's (or the default
	// runtime's). Each tier has its own pools.
	Tier      string    `json:"tier,omitempty"`
	Resources Resources `json:"resources,omitzero"`
	Size      int       `json:"size"`
}

// PoolStatus is a pool with its resolved settings and how many sandboxes
// are ready.
type PoolStatus struct {
	PoolSpec
	// Key identifies the pool: a digest of image, runtime and limits.
	Key   string `json:"key"`
	Ready int    `json:"ready"`
	// Error is the last refill failure, "" once a refill succeeds.
	Error string `json:"error,omitempty"`
}

// pool is one warm pool; guarded by Manager.mu.
type pool struct {
	spec  PoolSpec // resolved: image, runtime and resources filled in
	key   string
	ready []*box
	err   string
	// making counts sandboxes being made for the pool.
	making int
}

// poolKey identifies the pool that serves a plan's image, tier, runtime
// and resolved limits. The container tier is left out of the digest, so
// that its pools keep the keys they had before tiers.
func poolKey(image, tier, rt string, r Resources) string {
	if tier != TierContainer {
		rt = tier + "\x00" + rt
	}
	h := sha256.Sum256([]byte(image + "\x00" + rt + "\x00" + strconv.FormatFloat(r.CPUs, 'g', -1, 64) + "\x00" +
		strconv.FormatInt(r.MemoryBytes, 10) + "\x00" + strconv.FormatInt(r.DiskBytes, 10) + "\x00" + strconv.FormatInt(r.Pids, 10)))
	return "pool-" + hex.EncodeToString(h[:6])
}

// SetPool creates, resizes or (with Size 0) removes the warm pool for
// spec's image, runtime and limits, and returns it. The pool fills in the
// background.
func (m *Manager) SetPool(ctx context.Context, spec PoolSpec) (PoolStatus, error) {
	st, err := m.setPool(ctx, spec)
	if err != nil {
		return st, err
	}
	if err := m.savePools(); err != nil {
		return st, err
	}
	return st, nil
}

func (m *Manager) setPool(ctx context.Context, spec PoolSpec) (PoolStatus, error) {
	if spec.Size < 0 || spec.Size > MaxPoolSize {
		return PoolStatus{}, invalid("size %d must be between 0 (remove the pool) and %d", spec.Size, MaxPoolSize)
	}
	if spec.Image == "" {
		return PoolStatus{}, invalid("image is required")
	}
	p, err := m.validate(ctx, CreateRequest{Image: spec.Image, Runtime: spec.Runtime, Tier: spec.Tier, Resources: spec.Resources})
	if err != nil {
		return PoolStatus{}, err
	}
	if len(p.rec.Volumes) > 0 && spec.Size > 0 {
		return PoolStatus{}, invalid("image %s mounts volumes (its spec's volumes): its sandboxes are made at create, never kept ready in a pool", p.rec.Image)
	}
	if p.rec.Network != nil && p.rec.Network.Mode != "" && p.rec.Network.Mode != "none" {
		// Fine: the network is applied at hand-out; pool boxes have none.
		p.rec.Network = nil
	}
	res := PoolSpec{Image: p.rec.Image, Runtime: p.rec.Runtime, Tier: p.rec.TierOf(), Resources: p.rec.Resources, Size: spec.Size}
	key := poolKey(res.Image, res.Tier, res.Runtime, res.Resources)
	var drop []*box
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return PoolStatus{}, fmt.Errorf("manager is closed: %w", errdefs.ErrUnavailable)
	}
	pl := m.pools[key]
	if pl == nil {
		pl = &pool{key: key}
		m.pools[key] = pl
	}
	pl.spec = res
	if n := len(pl.ready) - res.Size; n > 0 {
		drop = slices.Clone(pl.ready[res.Size:])
		pl.ready = pl.ready[:res.Size]
	}
	if res.Size == 0 && pl.making == 0 {
		delete(m.pools, key)
	}
	st := pl.status()
	m.mu.Unlock()
	for _, b := range drop {
		// Pooled boxes are hidden from Delete's lookup: remove them as such.
		if err := m.remove(context.WithoutCancel(ctx), b.rec.ID, true, nil, true); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).Warn("remove pooled sandbox", "sandbox", b.rec.ID, "error", err)
		}
	}
	m.kickPools()
	log.G(ctx).Info("pool set", "pool", key, "image", res.Image, "size", res.Size)
	return st, nil
}

func (pl *pool) status() PoolStatus {
	return PoolStatus{PoolSpec: pl.spec, Key: pl.key, Ready: len(pl.ready), Error: pl.err}
}

// Pools returns the warm pools, by image then key.
func (m *Manager) Pools() []PoolStatus {
	m.mu.Lock()
	out := make([]PoolStatus, 0, len(m.pools))
	for _, pl := range m.pools {
		if pl.spec.Size > 0 {
			out = append(out, pl.status())
		}
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b PoolStatus) int {
		if a.Image != b.Image {
			return compareStrings(a.Image, b.Image)
		}
		return compareStrings(a.Key, b.Key)
	})
	return out
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *Manager) kickPools() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// fromPool hands out a ready sandbox of the pool matching p, applying the
// request's name, labels, environment, user, working directory, network,
// timeout and idle policy. ok is false when no pool matches or none is
// ready, or when the hand-out failed (the caller then creates a sandbox).
func (m *Manager) fromPool(ctx context.Context, p plan) (Record, bool, error) {
	if p.rec.Ephemeral || p.spec.HostNetwork {
		return Record{}, false, nil
	}
	key := poolKey(p.rec.Image, p.rec.TierOf(), p.rec.Runtime, p.rec.Resources)
	m.mu.Lock()
	pl := m.pools[key]
	var b *box
	if pl != nil && len(pl.ready) > 0 {
		b = pl.ready[0]
		pl.ready = pl.ready[1:]
	}
	m.mu.Unlock()
	if b == nil {
		return Record{}, false, nil
	}
	m.kickPools()
	rec, err := m.handOut(ctx, b, p)
	if err != nil {
		log.G(ctx).Warn("pool hand-out failed, creating a sandbox instead", "sandbox", b.rec.ID, "error", err)
		if derr := m.remove(context.WithoutCancel(ctx), b.rec.ID, true, nil, true); derr != nil {
			log.G(ctx).Warn("remove pooled sandbox", "sandbox", b.rec.ID, "error", derr)
		}
		return Record{}, false, nil
	}
	return rec, true, nil
}

// handOut turns pooled box b into the sandbox that p asks for.
func (m *Manager) handOut(ctx context.Context, b *box, p plan) (Record, error) {
	b.op.Lock()
	defer b.op.Unlock()
	m.mu.Lock()
	rec := cloneRecord(b.rec)
	if n := p.rec.Name; n != "" {
		for _, o := range m.boxes {
			if o.rec.Name == n {
				m.mu.Unlock()
				return Record{}, fmt.Errorf("name %q is used by sandbox %s: %w", n, o.rec.ID, errdefs.ErrAlreadyExists)
			}
		}
	}
	m.mu.Unlock()
	if b.gone || rec.State != StateRunning {
		return Record{}, fmt.Errorf("pooled sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	ctx = log.With(ctx, "sandbox", rec.ID)
	start := time.Now()
	spec := *rec.Spec
	if !slices.Equal(spec.Env, p.spec.Env) || spec.User != p.spec.User || spec.Workdir != p.spec.Workdir {
		if err := m.cfg.Agents.Init(ctx, rec.AgentAddr, p.spec.Env, p.spec.User, p.spec.Workdir); err != nil {
			return Record{}, fmt.Errorf("set environment: %w", err)
		}
		spec.Env, spec.User, spec.Workdir = slices.Clone(p.spec.Env), p.spec.User, p.spec.Workdir
	}
	rec.Spec = &spec
	rec.Pool = ""
	rec.Name, rec.Labels, rec.Env, rec.Workdir, rec.User = p.rec.Name, p.rec.Labels, p.rec.Env, p.rec.Workdir, p.rec.User
	rec.Timeout, rec.IdleTimeout, rec.IdleAction, rec.Network = p.rec.Timeout, p.rec.IdleTimeout, p.rec.IdleAction, p.rec.Network
	rec.TimeoutAction, rec.E2B = p.rec.TimeoutAction, p.rec.E2B.Clone()
	rec.Created = time.Now().UTC().Truncate(time.Millisecond)
	rec.Deadline = time.Time{}
	if rec.Timeout > 0 {
		rec.Deadline = rec.Created.Add(rec.Timeout)
	}
	if rec.Network != nil && m.cfg.Network != nil {
		caPEM, err := m.cfg.Network.Prepare(rec.ID, *rec.Network)
		if err != nil {
			return Record{}, fmt.Errorf("prepare network: %w", err)
		}
		if err := m.attachNetwork(ctx, rec); err != nil {
			return Record{}, fmt.Errorf("attach network: %w", err)
		}
		if caPEM != nil {
			if err := m.installCA(ctx, rec.AgentAddr, caPEM); err != nil {
				return Record{}, fmt.Errorf("install the sandbox's CA certificate: %w", err)
			}
		}
	}
	_ = m.write(ctx, b, rec, persistLater, "") // cannot fail: no Store write
	b.touch()
	m.arm(ctx, b)
	// The record is written after the hand-out returns, and not while the
	// sandbox's first requests run: an fsync costs more than the rest of
	// the hand-out, and its I/O competes with the first exec for the CPUs
	// (see handOutWriteQuiet). The writer takes the box's operation lock
	// and writes the record current then, so a later operation's record is
	// never overwritten by an older one; a box removed meanwhile needs no
	// write. A daemon killed before the write finds a pool box and removes
	// it.
	m.writes.Add(1)
	go func() {
		defer m.writes.Done()
		m.waitQuiet(handOutWriteQuiet, handOutWriteMaxDelay, nil) // at once when closing
		b.op.Lock()
		defer b.op.Unlock()
		if err := m.flush(context.WithoutCancel(ctx), b); err != nil {
			log.G(ctx).Error("record handed-out sandbox", "error", err)
		}
	}()
	log.G(ctx).Info("sandbox created", "image", rec.Image, "runtime", rec.Runtime, "from_pool", true, "took", time.Since(start).Round(time.Microsecond))
	return cloneRecord(rec), nil
}

// fillPools keeps every pool full until stop is closed, making one sandbox
// at a time so that requests keep most of the CPU.
func (m *Manager) fillPools(ctx context.Context, stop <-chan struct{}) {
	failures := 0
	for {
		select {
		case <-stop:
			return
		case <-m.kick:
		case <-time.After(5 * time.Second):
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			m.mu.Lock()
			var pl *pool
			for _, q := range m.pools {
				if len(q.ready)+q.making < q.spec.Size {
					pl = q
					break
				}
			}
			if pl != nil {
				pl.making++
			}
			m.mu.Unlock()
			if pl == nil {
				break
			}
			if !m.waitRefill(pl) {
				m.mu.Lock()
				pl.making--
				m.mu.Unlock()
				return
			}
			err := m.fillOne(ctx, pl)
			m.mu.Lock()
			pl.making--
			if pl.spec.Size == 0 && pl.making == 0 && len(pl.ready) == 0 {
				delete(m.pools, pl.key)
			}
			m.mu.Unlock()
			if err != nil {
				failures++
				select { // back off, then try again
				case <-stop:
					return
				case <-time.After(time.Duration(min(failures, 30)) * time.Second):
				}
				continue
			}
			failures = 0
		}
	}
}

// Refill policy. Making a sandbox costs as much CPU as a create from
// scratch, so a refill that runs while requests are served slows them
// down (a hand-out followed by its first exec, on a host with few cores).
// A refill therefore waits until
// no request has created, used or deleted a sandbox for
// DefaultRefillQuiet, but not once the pool is down to a quarter of its
// size, and never longer than DefaultRefillMaxWait, so a pool under steady
// load still refills.
const (
	DefaultRefillQuiet   = 50 * time.Millisecond
	DefaultRefillMaxWait = time.Second
)

// A pooled sandbox's record is written once no request has created, used
// or deleted a sandbox for handOutWriteQuiet, and at most
// handOutWriteMaxDelay after the hand-out. Written at once, its fsync ran
// beside the create's answer and the box's first exec (a trace showed
// the daemon's fdatasyncs running while the agent ran the exec); waiting
// made pooled create -> first exec faster, and the create itself. The
// figures are in the commit that made this. A box removed within the
// delay (a short task) is never written.
const (
	handOutWriteQuiet    = 5 * time.Millisecond
	handOutWriteMaxDelay = 100 * time.Millisecond
)

// waitRefill waits, by the refill policy, before a sandbox is made for pl.
// It returns false when the manager closes meanwhile.
func (m *Manager) waitRefill(pl *pool) bool {
	return m.waitQuiet(m.cfg.RefillQuiet, m.cfg.RefillMaxWait, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(pl.ready)*4 <= pl.spec.Size
	})
}

// waitQuiet waits until no request has created, used or deleted a sandbox
// for quiet, maxWait has passed, or now (when set) reports true. It returns
// false at once when the manager closes (m.stop).
func (m *Manager) waitQuiet(quiet, maxWait time.Duration, now func() bool) bool {
	deadline := time.Now().Add(maxWait)
	for {
		if now != nil && now() {
			return true
		}
		t := time.Now()
		idle := t.Sub(time.Unix(0, m.lastBusy.Load()))
		if idle >= quiet || !t.Before(deadline) {
			return true
		}
		select {
		case <-m.stop:
			return false
		case <-time.After(min(quiet-idle, deadline.Sub(t))):
		}
	}
}

// fillOne makes one sandbox for pl.
func (m *Manager) fillOne(ctx context.Context, pl *pool) error {
	m.mu.Lock()
	spec := pl.spec
	m.mu.Unlock()
	p, err := m.validate(ctx, CreateRequest{Image: spec.Image, Runtime: spec.Runtime, Tier: spec.Tier, Resources: spec.Resources, NoPool: true})
	if err == nil && len(p.rec.Volumes) > 0 {
		// Rebuilt with volumes since the pool was set: its boxes could
		// never be handed out.
		err = fmt.Errorf("image %s mounts volumes now: a pool cannot keep its sandboxes ready: %w", p.rec.Image, errdefs.ErrFailedPrecondition)
	}
	if err == nil {
		p.rec.Network = nil // applied at hand-out
		var id string
		if id, err = newID(); err == nil {
			var rec Record
			if rec, err = m.build(ctx, p, id, buildOpts{pool: pl.key}); err == nil {
				b, lerr := m.lookupAny(rec.ID)
				if lerr == nil {
					wctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
					if werr := m.cfg.Agents.Warm(wctx, rec.AgentAddr); werr != nil {
						lerr = fmt.Errorf("warm up the agent: %w", werr) // b is removed below
					}
					cancel()
				}
				m.mu.Lock()
				switch {
				case lerr != nil:
					err = lerr
				case m.pools[pl.key] == pl && len(pl.ready) < pl.spec.Size:
					pl.ready = append(pl.ready, b)
					pl.err = ""
					b = nil
				}
				m.mu.Unlock()
				if b != nil { // the pool shrank meanwhile
					_ = m.remove(context.WithoutCancel(ctx), rec.ID, true, nil, true)
				}
			}
		}
	}
	if err != nil {
		m.mu.Lock()
		pl.err = err.Error()
		m.mu.Unlock()
		log.G(ctx).Warn("fill pool", "pool", pl.key, "image", spec.Image, "error", err)
	}
	return err
}

// lookupAny finds a sandbox by ID, pooled ones included.
func (m *Manager) lookupAny(id string) (*box, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.boxes[id]; ok {
		return b, nil
	}
	return nil, fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
}

// savePools writes the pools' settings to StateDir.
func (m *Manager) savePools() error {
	if m.cfg.StateDir == "" {
		return nil
	}
	specs := []PoolSpec{}
	for _, s := range m.Pools() {
		specs = append(specs, s.PoolSpec)
	}
	b, err := json.MarshalIndent(specs, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("save pools: %w", err)
	}
	p := filepath.Join(m.cfg.StateDir, poolsFile)
	if err := os.WriteFile(p+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("save pools: %w", err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("save pools: %w", err)
	}
	return nil
}

// loadPools reads the pools saved in StateDir; the daemon's configured
// pools (extra) are applied on top.
func (m *Manager) loadPools(ctx context.Context, extra []PoolSpec) error {
	var specs []PoolSpec
	if m.cfg.StateDir != "" {
		b, err := os.ReadFile(filepath.Join(m.cfg.StateDir, poolsFile))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("load pools: %w", err)
		}
		if err == nil {
			if err := json.Unmarshal(b, &specs); err != nil {
				log.G(ctx).Warn("ignoring unreadable pools file", "error", err)
				specs = nil
			}
		}
	}
	for _, s := range append(specs, extra...) {
		if _, err := m.setPool(ctx, s); err != nil {
			log.G(ctx).Warn("pool not set", "image", s.Image, "error", err)
		}
	}
	return nil
}

// Start begins the background work: the warm pools (those saved by earlier
// runs, then pools) and the idle reaper. Call it once, after Recover; Close
// stops it.
func (m *Manager) Start(ctx context.Context, pools []PoolSpec) error {
	m.mu.Lock()
	if m.started || m.closed {
		m.mu.Unlock()
		return fmt.Errorf("manager already started or closed: %w", errdefs.ErrFailedPrecondition)
	}
	m.started = true
	m.mu.Unlock()
	ctx = context.WithoutCancel(ctx)
	if err := m.loadPools(ctx, pools); err != nil {
		return err
	}
	m.bg.Add(3)
	go func() { defer m.bg.Done(); m.fillNS(ctx, m.stop) }()
	go func() { defer m.bg.Done(); m.fillPools(ctx, m.stop) }()
	go func() { defer m.bg.Done(); m.reapIdle(ctx, m.stop) }()
	m.kickNS()
	m.kickPools()
	return nil
}
