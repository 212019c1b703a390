package sandbox

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/userns"
)

// nsPool keeps ManagerConfig.NSPoolSize network namespaces (with their
// user namespace and id range when the runtime uses them) made ahead for
// the default runtime: making them was the largest step of a cold create
// the daemon does itself (a child process that unshares them, bind
// mounts, the loopback and the agent's socket). A background loop
// refills it after each take.
//
// Nothing of it is recorded: a made-ahead namespace is a directory of the
// runtime under its key, which List reports, so a daemon killed with some
// ready has them removed as orphans by the next daemon's Recover, and
// their id ranges, held in memory only, are free again. Close removes
// them.
type nsPool struct {
	mu    sync.Mutex
	ready []premadeNS
	kick  chan struct{}
	// building counts the sandboxes being built: the filler waits until
	// none is (or the pool runs low), so that its work is not done beside
	// a create's critical path.
	building atomic.Int32
}

// premadeNS is one entry: the runtime's key and the id range it was made
// with (nil without user namespaces).
type premadeNS struct {
	key string
	u   *userns.Range
}

// nsPoolRuntime returns the runtime the pool makes namespaces for, or nil
// when there is no pool.
func (m *Manager) nsPoolRuntime() (string, NSPreparer) {
	if m.cfg.NSPoolSize <= 0 {
		return "", nil
	}
	p, ok := m.cfg.Runtimes[m.cfg.DefaultRuntime].(NSPreparer)
	if !ok {
		return "", nil
	}
	return m.cfg.DefaultRuntime, p
}

// takeNS gives sandbox id, of runtime rtName, made-ahead namespaces when
// the pool has some: it sets spec.Premade and spec.UserNS and moves the
// id range to id. Otherwise it leaves spec alone.
func (m *Manager) takeNS(ctx context.Context, id, rtName string, spec *Spec) {
	name, _ := m.nsPoolRuntime()
	if name == "" || name != rtName {
		return
	}
	m.nsPool.mu.Lock()
	n := len(m.nsPool.ready)
	if n == 0 {
		m.nsPool.mu.Unlock()
		m.kickNS()
		return
	}
	e := m.nsPool.ready[n-1]
	m.nsPool.ready = m.nsPool.ready[:n-1]
	m.nsPool.mu.Unlock()
	m.kickNS()
	if e.u != nil {
		m.cfg.IDRanges.Release(e.key)
		if err := m.cfg.IDRanges.Reserve(id, *e.u); err != nil {
			// Cannot happen (the range was the key's); make new ones.
			log.G(ctx).Warn("namespace pool: take the id range", "key", e.key, "error", err)
			m.dropNS(ctx, e)
			return
		}
	}
	spec.Premade, spec.UserNS = e.key, e.u
}

// kickNS wakes the pool's filler.
func (m *Manager) kickNS() {
	select {
	case m.nsPool.kick <- struct{}{}:
	default:
	}
}

// fillNS keeps the pool full until stop is closed. A failure to make one
// is logged and the pool waits for the next take before it tries again.
func (m *Manager) fillNS(ctx context.Context, stop <-chan struct{}) {
	name, p := m.nsPoolRuntime()
	if p == nil {
		return
	}
	u, _ := m.cfg.Runtimes[name].(UserNSRuntime)
	withUserNS := u != nil && u.UserNS() && m.cfg.IDRanges != nil
	for {
		select {
		case <-stop:
			return
		case <-m.nsPool.kick:
		}
		for {
			m.nsPool.mu.Lock()
			full := len(m.nsPool.ready) >= m.cfg.NSPoolSize
			m.nsPool.mu.Unlock()
			if full {
				break
			}
			if !m.waitBuilds(stop) {
				return
			}
			if withUserNS && !m.rangesToSpare() {
				break // the boxes need them more: wait for the next take
			}
			e, err := m.makeNS(ctx, p, withUserNS)
			if errdefs.IsNotImplemented(err) {
				return // this runtime makes its namespaces itself
			}
			if err != nil {
				log.G(ctx).Warn("namespace pool: make namespaces", "runtime", name, "error", err)
				break
			}
			m.nsPool.mu.Lock()
			m.nsPool.ready = append(m.nsPool.ready, e)
			m.nsPool.mu.Unlock()
		}
	}
}

// waitBuilds waits until no sandbox is being built, the pool is down to a
// quarter of its size, or RefillMaxWait passed. It returns false when
// stop is closed meanwhile.
func (m *Manager) waitBuilds(stop <-chan struct{}) bool {
	deadline := time.Now().Add(m.cfg.RefillMaxWait)
	for m.nsPool.building.Load() > 0 && time.Now().Before(deadline) {
		m.nsPool.mu.Lock()
		low := len(m.nsPool.ready)*4 <= m.cfg.NSPoolSize
		m.nsPool.mu.Unlock()
		if low {
			break
		}
		select {
		case <-stop:
			return false
		case <-time.After(time.Millisecond):
		}
	}
	select {
	case <-stop:
		return false
	default:
		return true
	}
}

// rangesToSpare reports whether the pool may take a user namespace range:
// only while more than NSPoolSize ranges are free, so that it never holds
// the last ranges a create would need (a small userns_pool), and a box
// removed frees its range for the next box.
func (m *Manager) rangesToSpare() bool {
	f, ok := m.cfg.IDRanges.(interface{ Free() int })
	return !ok || f.Free() > m.cfg.NSPoolSize
}

// makeNS makes one entry of the pool.
func (m *Manager) makeNS(ctx context.Context, p NSPreparer, withUserNS bool) (premadeNS, error) {
	id, err := newID()
	if err != nil {
		return premadeNS{}, err
	}
	e := premadeNS{key: premadePrefix + id}
	if withUserNS {
		r, err := m.cfg.IDRanges.Allocate(e.key)
		if err != nil {
			return premadeNS{}, err
		}
		e.u = &r
	}
	if err := p.PrepareNS(ctx, e.key, e.u); err != nil {
		if e.u != nil {
			m.cfg.IDRanges.Release(e.key)
		}
		return premadeNS{}, err
	}
	return e, nil
}

// premadePrefix starts the keys of made-ahead namespaces, so that they
// are told from sandboxes in the runtime's directory.
const premadePrefix = "premade-"

// dropNS removes entry e and frees its id range.
func (m *Manager) dropNS(ctx context.Context, e premadeNS) {
	name, _ := m.nsPoolRuntime()
	if err := m.cfg.Runtimes[name].Delete(ctx, e.key); err != nil {
		log.G(ctx).Warn("namespace pool: remove made-ahead namespaces", "key", e.key, "error", err)
	}
	if e.u != nil {
		m.cfg.IDRanges.Release(e.key)
	}
}

// drainNS removes every ready entry (Close, once the filler stopped).
func (m *Manager) drainNS(ctx context.Context) {
	m.nsPool.mu.Lock()
	ready := m.nsPool.ready
	m.nsPool.ready = nil
	m.nsPool.mu.Unlock()
	for _, e := range ready {
		m.dropNS(ctx, e)
	}
}
