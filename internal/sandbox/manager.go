package sandbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/netpolicy"
)

// Defaults of ManagerConfig.
const (
	DefaultImage        = "host"
	DefaultMemoryBytes  = 1 << 30
	DefaultDiskBytes    = 10 << 30
	DefaultPids         = 1024
	DefaultCPUs         = 1
	DefaultReadyTimeout = 10 * time.Second
	// RecoverReadyTimeout bounds the wait for each agent in Recover.
	RecoverReadyTimeout = 2 * time.Second
	// DefaultOutputBuffer is how many bytes of each command's output a
	// box's agent keeps for replay (corral logs): the agent's default.
	DefaultOutputBuffer = 1 << 20
	// MaxOutputBuffer bounds ManagerConfig.OutputBuffer: the buffers are
	// in the box's memory, counted against its limit.
	MaxOutputBuffer = 64 << 20
)

// Lower bounds of a sandbox's resources. The corral.yaml parser (package
// spec) checks the same minimums, so that a spec that validates never asks
// for a sandbox the Manager refuses; its TestDocumentedMinimums keeps the
// two equal.
const (
	MinMemoryBytes = 8 << 20
	MinDiskBytes   = 16 << 20
	MinPids        = 8
	// MaxTimeout bounds CreateRequest.Timeout.
	MaxTimeout = 365 * 24 * time.Hour
)

// ManagerConfig wires a Manager. Runtimes, DefaultRuntime, Layers, Images,
// Store, Agents and AgentBinary are required.
type ManagerConfig struct {
	// Runtimes are the available runtimes by name ("crun", "runc"). A
	// request for another one fails; it never falls back.
	Runtimes       map[string]Runtime
	DefaultRuntime string
	// Unavailable are the runtimes that are configured or that records
	// name but are not in Runtimes, by name: why (binary missing, version
	// refused) and a Runtime that can still remove their sandboxes
	// without the binary (see UnavailableRuntime). A request for one fails
	// with that reason; Recover keeps their sandboxes in state error.
	Unavailable map[string]UnavailableRuntime
	// Tiers are the isolation tiers by name (TierContainer, TierGVisor):
	// which runtimes implement each. Nil puts every runtime in the
	// container tier and offers no other.
	Tiers  map[string]TierConfig
	Layers LayerStore
	Images ImageStore
	Store  Store
	// Agents reaches the agents in the boxes (the daemon's agent pool).
	Agents Agents
	// IDRanges gives each sandbox of a runtime with user namespaces
	// (UserNSRuntime) its own host ids; nil gives none a user namespace.
	IDRanges IDRanges
	// NSPoolSize is how many network namespaces (each in its user
	// namespace, with its id range, when the runtime uses them) are kept
	// made ahead for the default runtime when it is an NSPreparer, so
	// that a create takes one instead of making it (0: none).
	NSPoolSize int
	// AgentBinary is the host path of the static corral binary.
	AgentBinary string
	// InitBinary is the host path of corral-init (see Spec.InitBinary);
	// empty runs the agent as PID 1.
	InitBinary string
	// AgentIdleExit is Spec.AgentIdleExit of new sandboxes.
	AgentIdleExit time.Duration
	// OutputBuffer is Spec.OutputBuffer of new sandboxes.
	OutputBuffer int
	// IdleCPUPercent: CPU use of a box above this percentage of one CPU,
	// over the last part of its idle period, counts as activity for its
	// idle timeout (0: CPU use does not count).
	IdleCPUPercent float64
	// RunningProcesses, when set, returns how many commands the agent at
	// addr runs: a running one counts as activity for the idle timeout.
	RunningProcesses func(ctx context.Context, addr string) (int, error)
	// DefaultImage is used when a request names none ("host" if empty).
	DefaultImage string
	// DefaultResources fill a request's zero resources (1 CPU, 1 GiB
	// memory, 10 GiB disk, 1024 pids where zero).
	DefaultResources Resources
	// MaxCPUs bounds a request's CPUs (host cores * 4 if zero).
	MaxCPUs float64
	// ReadyTimeout bounds the wait for a new sandbox's agent (10 s if zero).
	ReadyTimeout time.Duration
	// Network serves boxes' egress; nil allows only mode none.
	Network Networker
	// Guard is the egress proxy's guard of addresses no box may reach:
	// an allowlist entry that names only such addresses (loopback, the
	// host's own, ...) is refused. Nil judges with the zero Guard.
	Guard *netpolicy.Guard
	// Secrets checks the secrets a box binds and makes their
	// placeholders; nil refuses boxes with secrets.
	Secrets Secrets
	// ResolvConf is a host file bound read-only at /etc/resolv.conf in every
	// box with its own network namespace (it names the proxy's resolver).
	ResolvConf string
	// StateDir holds checkpoints (memory state of suspended sandboxes and
	// forks), the warm pools' settings and a directory per box (<id>,
	// removed with it); suspend with memory state and fork --memory-state
	// need it.
	StateDir string
	// Snapshots records snapshots; nil disables them.
	Snapshots SnapshotStore
	// RefillQuiet and RefillMaxWait tune when warm pools refill (see
	// DefaultRefillQuiet); zero takes the defaults.
	RefillQuiet, RefillMaxWait time.Duration
	// Volumes resolves named volumes to their host paths; nil refuses
	// sandboxes with volumes.
	Volumes Volumes
	// Quota bounds what all sandboxes hold together; zero: no bound.
	Quota Quota
	// Observe is told how long each Create, Fork and Resume took and how
	// it ended (the daemon's metrics); nil: nobody.
	Observe func(op string, d time.Duration, err error)
	// FreeMemory returns the daemon's free heap to the host; it is called
	// in the background when the sandboxes drop to half of their peak
	// (nil: debug.FreeOSMemory).
	FreeMemory func()
}

// Operations reported to ManagerConfig.Observe.
const (
	OpCreate = "create"
	OpFork   = "fork"
	OpResume = "resume"
)

// observe reports an operation that started at start and ended with *err.
func (m *Manager) observe(op string, start time.Time, err *error) {
	if f := m.cfg.Observe; f != nil {
		f(op, time.Since(start), *err)
	}
}

// UnavailableRuntime is a runtime the daemon does not offer.
type UnavailableRuntime struct {
	// Reason says why: "binary runc not found", "runc 1.1.15 is below the
	// minimum safe version ...".
	Reason string
	// Cleaner stops and removes the runtime's sandboxes without its
	// binary (State and Delete must work); nil when there is none, and
	// then they cannot be removed until the runtime is back.
	Cleaner Runtime
}

// Manager creates, tracks and removes sandboxes. Every sandbox is recorded
// in the Store before anything is made for it, so that Recover can keep or
// remove what a crashed daemon left. Operations on one sandbox are
// serialized; operations on different sandboxes run in parallel.
type Manager struct {
	cfg ManagerConfig

	// mu guards the index; it is held only briefly, never across I/O.
	mu sync.Mutex
	// boxes are the known sandboxes by ID; guarded by mu.
	boxes map[string]*box
	// closed is set by Close; guarded by mu.
	closed bool
	// volRemoving are the volumes being removed (RemoveVolume); guarded
	// by mu.
	volRemoving map[string]bool

	// timers counts running expiry callbacks, which Close waits for.
	timers sync.WaitGroup

	// pools are the warm pools by key; guarded by mu.
	pools map[string]*pool
	// kick wakes the pool filler.
	kick chan struct{}
	// stop ends the background loops started by Start; bg waits for them.
	stop chan struct{}
	bg   sync.WaitGroup
	// writes counts record writes running after their operation returned.
	writes sync.WaitGroup
	// started is set by Start; guarded by mu.
	started bool
	// lastBusy is when a request last created, used or deleted a sandbox
	// (Unix nanoseconds); pool refills wait for a quiet moment.
	lastBusy atomic.Int64

	// nsPool holds the namespaces made ahead (see nspool.go).
	nsPool nsPool

	// subs are the event subscriptions; guarded by mu.
	subs map[*Subscription]struct{}
	// eventSeq numbers the record writes; guarded by mu.
	eventSeq uint64
	// dropped counts the events subscriptions lost.
	dropped atomic.Uint64
	// peak is the most sandboxes known since the heap was last given
	// back; guarded by mu. freeing is set while FreeMemory runs.
	peak    int
	freeing atomic.Bool
}

// busy records that a request is creating, using or deleting a sandbox.
func (m *Manager) busy() { m.lastBusy.Store(time.Now().UnixNano()) }

// box is one sandbox in the index.
type box struct {
	// op serializes lifecycle operations (create, delete) on the sandbox.
	op sync.Mutex
	// rec is the current record; guarded by Manager.mu. Only the record
	// writes (write, drop in events.go) change it.
	rec Record
	// stored is set while rec is in the Store; guarded by Manager.mu.
	stored bool
	// timer removes the sandbox at its deadline; guarded by Manager.mu.
	timer *time.Timer
	// gone is set once the sandbox is removed; guarded by Manager.mu.
	gone bool
	// active is the time of the last activity (exec, file or network), in
	// Unix nanoseconds; the idle reaper reads it.
	active atomic.Int64
}

// touch records activity now.
func (b *box) touch() { b.active.Store(time.Now().UnixNano()) }

// NewManager checks cfg, fills its defaults and returns a Manager. Call
// Recover before serving requests.
func NewManager(cfg ManagerConfig) (*Manager, error) {
	switch {
	case len(cfg.Runtimes) == 0:
		return nil, fmt.Errorf("manager: no runtime: %w", errdefs.ErrInvalidArgument)
	case cfg.Runtimes[cfg.DefaultRuntime] == nil:
		return nil, fmt.Errorf("manager: default runtime %q is not available (available: %s): %w",
			cfg.DefaultRuntime, names(cfg.Runtimes), errdefs.ErrInvalidArgument)
	case cfg.Layers == nil || cfg.Images == nil || cfg.Store == nil || cfg.Agents == nil:
		return nil, fmt.Errorf("manager: layers, images, store and agents are required: %w", errdefs.ErrInvalidArgument)
	case cfg.AgentBinary == "":
		return nil, fmt.Errorf("manager: agent binary is required: %w", errdefs.ErrInvalidArgument)
	}
	cfg.DefaultImage = cmp.Or(cfg.DefaultImage, DefaultImage)
	d := &cfg.DefaultResources
	d.CPUs = cmp.Or(d.CPUs, DefaultCPUs)
	d.MemoryBytes = cmp.Or(d.MemoryBytes, DefaultMemoryBytes)
	d.DiskBytes = cmp.Or(d.DiskBytes, DefaultDiskBytes)
	d.Pids = cmp.Or(d.Pids, DefaultPids)
	cfg.MaxCPUs = cmp.Or(cfg.MaxCPUs, float64(runtime.NumCPU()*4))
	cfg.ReadyTimeout = cmp.Or(cfg.ReadyTimeout, DefaultReadyTimeout)
	cfg.RefillQuiet = cmp.Or(cfg.RefillQuiet, DefaultRefillQuiet)
	cfg.RefillMaxWait = cmp.Or(cfg.RefillMaxWait, DefaultRefillMaxWait)
	return &Manager{cfg: cfg, boxes: map[string]*box{}, pools: map[string]*pool{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), subs: map[*Subscription]struct{}{},
		nsPool: nsPool{kick: make(chan struct{}, 1)}}, nil
}

// runtime returns the runtime name to run something with, or why it is
// not available (errdefs.ErrFailedPrecondition).
func (m *Manager) runtime(name string) (Runtime, error) {
	if rt, ok := m.cfg.Runtimes[name]; ok {
		return rt, nil
	}
	if u, ok := m.cfg.Unavailable[name]; ok {
		return nil, fmt.Errorf("runtime %q is not available: %s: %w", name, u.Reason, errdefs.ErrFailedPrecondition)
	}
	return nil, fmt.Errorf("runtime %q is not available (available: %s): %w", name, strings.Join(m.Runtimes(), ", "), errdefs.ErrFailedPrecondition)
}

// remover returns what can remove the sandboxes of runtime name: the
// runtime, else its cleaner (see UnavailableRuntime); nil when neither.
func (m *Manager) remover(name string) Runtime {
	if rt, ok := m.cfg.Runtimes[name]; ok {
		return rt
	}
	if u, ok := m.cfg.Unavailable[name]; ok && u.Cleaner != nil {
		return u.Cleaner
	}
	return nil
}

// Runtimes returns the names of the available runtimes, sorted.
func (m *Manager) Runtimes() []string { return slices.Sorted(maps.Keys(m.cfg.Runtimes)) }

// DefaultImage returns the image used when a request names none.
func (m *Manager) DefaultImage() string { return m.cfg.DefaultImage }

// Create validates req, then makes and starts a sandbox and waits for its
// agent, or hands out a ready one from a matching warm pool. On any failure
// everything made so far is removed. ctx bounds the wait only: the sandbox
// does not end with ctx.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (_ Record, err error) {
	defer m.observe(OpCreate, time.Now(), &err)
	m.busy()
	p, err := m.validate(ctx, req)
	if err != nil {
		return Record{}, err
	}
	if !req.NoPool && len(p.rec.Volumes) == 0 {
		if rec, ok, err := m.fromPool(ctx, p); ok {
			return rec, err
		}
	}
	id, err := newID()
	if err != nil {
		return Record{}, err
	}
	return m.build(ctx, p, id, buildOpts{})
}

// buildOpts vary how build makes a sandbox.
type buildOpts struct {
	// mounts, when set, are the root file system of a writable layer that
	// the caller prepared under the sandbox's ID (fork); build removes the
	// layer if it fails.
	mounts []mount.Mount
	// restore, when set, is a checkpoint directory whose processes are
	// resumed instead of starting a new agent.
	restore string
	// pool marks a warm pool's sandbox, hidden until handed out.
	pool string
	// egressUsed is what the sandbox has used of its egress budget
	// already (a fork starts with its parent's count).
	egressUsed int64
}

// build makes and starts sandbox id from the validated plan p.
func (m *Manager) build(ctx context.Context, p plan, id string, o buildOpts) (_ Record, err error) {
	m.nsPool.building.Add(1)
	defer m.nsPool.building.Add(-1)
	rt := m.cfg.Runtimes[p.rec.Runtime]
	rec := p.rec
	rec.ID = id
	rec.State = StateCreating
	rec.Pool = o.pool
	rec.Created = time.Now().UTC().Truncate(time.Millisecond)
	if rec.Timeout > 0 {
		rec.Deadline = rec.Created.Add(rec.Timeout)
	}
	rec.AgentAddr = rt.AgentAddr(id)
	// Every box gets its own token, a fork too (never its source's).
	rec.AccessToken = rand.Text()
	ctx = log.With(ctx, "sandbox", id)

	b := &box{rec: rec}
	b.touch()
	b.op.Lock()
	defer b.op.Unlock()
	if err := m.reserve(b); err != nil {
		if o.mounts != nil {
			_ = m.cfg.Layers.Remove(context.WithoutCancel(ctx), id)
		}
		return Record{}, err
	}

	// Roll back on a context detached from the request: tctx is set when
	// the stack runs.
	var tctx context.Context
	cu := cleanup.Make(func() { m.forget(b) })
	defer func() {
		cleanup.Do(ctx, func(c context.Context) { tctx = c; cu.Clean() })
	}()

	// phases times each step for the "sandbox created" log line.
	phases := make([]any, 0, 12)
	last := time.Now()
	phase := func(name string) {
		now := time.Now()
		phases = append(phases, name, now.Sub(last).Round(time.Microsecond))
		last = now
	}
	spec := p.spec
	spec.Hostname = cmp.Or(rec.Name, id)
	spec.Warm = o.pool != ""
	// A box with a network may need its agent to install its CA
	// certificate: corral-init then starts it while the network is wired.
	spec.StartAgent = spec.InitBinary != "" && rec.Network != nil
	if !spec.HostNetwork && o.restore == "" {
		m.takeNS(ctx, id, rec.Runtime, &spec)
	}
	if spec.Premade != "" {
		// Until Create takes them over, the namespaces are under their key.
		key := spec.Premade
		cu.Add(func() {
			if err := rt.Delete(tctx, key); err != nil {
				log.G(tctx).Error("rollback: delete made-ahead namespaces", "key", key, "error", err)
			}
		})
	} else if err := m.allocateIDs(id, rt, &spec); err != nil {
		if o.mounts != nil {
			_ = m.cfg.Layers.Remove(context.WithoutCancel(ctx), id)
		}
		return Record{}, err
	}
	saved := spec
	saved.Premade = "" // taken over by this create, never again
	rec.Spec = &saved
	if err := m.write(ctx, b, rec, persistFirst, ""); err != nil {
		m.releaseIDs(id)
		if o.mounts != nil {
			_ = m.cfg.Layers.Remove(context.WithoutCancel(ctx), id)
		}
		return Record{}, err
	}
	phase("record")
	cu.Add(func() {
		reason := "create failed"
		if err != nil {
			reason += ": " + err.Error()
		}
		if derr := m.drop(tctx, b, persistAnyway, reason); derr != nil {
			log.G(tctx).Error("rollback: delete record", "error", derr)
			return // the record keeps the range
		}
		m.releaseIDs(id)
	})

	// The layer and the runtime's resources outlive the request.
	lctx := context.WithoutCancel(ctx)
	cu.Add(func() {
		if err := m.cfg.Layers.Remove(tctx, id); err != nil {
			log.G(tctx).Error("rollback: remove layer", "error", err)
		}
	})
	if o.mounts != nil {
		spec.Rootfs = o.mounts
	} else {
		mounts, err := m.cfg.Layers.Prepare(lctx, id, p.image.TopLayer, p.prepare(rec))
		if err != nil {
			return Record{}, fmt.Errorf("prepare root file system: %w", err)
		}
		spec.Rootfs = mounts
		phase("prepare")
	}

	cu.Add(func() {
		if err := rt.Delete(tctx, id); err != nil {
			log.G(tctx).Error("rollback: delete from runtime", "error", err)
		}
	})
	if err := m.run(lctx, rt, id, &spec, rec.Volumes, o.restore); err != nil {
		return Record{}, err
	}
	phase("start")
	var caPEM []byte
	if rec.Network != nil && m.cfg.Network != nil {
		cu.Add(func() {
			if err := m.cfg.Network.Detach(id, true); err != nil {
				log.G(tctx).Error("rollback: detach network", "error", err)
			}
		})
		var err error
		if caPEM, err = m.cfg.Network.Prepare(id, *rec.Network); err != nil {
			return Record{}, fmt.Errorf("prepare network: %w", err)
		}
		if ec, ok := m.cfg.Network.(EgressCounter); ok && o.egressUsed > 0 {
			if err := ec.SetEgressUsed(id, o.egressUsed); err != nil {
				return Record{}, fmt.Errorf("prepare network: %w", err)
			}
		}
		if err := m.attachNetwork(lctx, rec); err != nil {
			return Record{}, fmt.Errorf("attach network: %w", err)
		}
		phase("network")
	}
	// Under corral-init the box is ready once PID 1 runs: the agent starts
	// on the first request (a box created and removed without one never
	// pays for an agent). The daemon waits for it only when it needs it
	// now, or when the agent is PID 1.
	if spec.InitBinary == "" || caPEM != nil {
		rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
		err := m.cfg.Agents.Ready(rctx, rec.AgentAddr)
		cancel()
		if err != nil {
			if st, serr := rt.State(lctx, id); serr == nil && st.Status == StatusStopped {
				return Record{}, fmt.Errorf("wait for agent: the sandbox's init exited: %s", initExitReason(st))
			}
			return Record{}, fmt.Errorf("wait for agent: %w", err)
		}
		phase("agent_ready")
	}
	if caPEM != nil {
		if err := m.installCA(ctx, rec.AgentAddr, caPEM); err != nil {
			return Record{}, fmt.Errorf("install the sandbox's CA certificate: %w", err)
		}
		phase("ca")
	}

	rec.State = StateRunning
	if err := m.write(ctx, b, rec, persistFirst, ""); err != nil {
		return Record{}, err
	}
	cu.Release()
	m.arm(ctx, b)
	phase("commit")
	log.G(ctx).Info("sandbox created", append([]any{"image", rec.Image, "runtime", rec.Runtime, "pool", rec.Pool, "origin", rec.Origin}, phases...)...)
	return rec, nil
}

// run creates sandbox id in rt from spec and starts it, or restores the
// processes checkpointed in restore.
func (m *Manager) run(ctx context.Context, rt Runtime, id string, spec *Spec, vols []VolumeMount, restore string) error {
	if err := m.volumeBinds(spec, vols); err != nil {
		return fmt.Errorf("mount volumes: %w", err)
	}
	if restore != "" {
		c, ok := rt.(Checkpointer)
		if !ok {
			return fmt.Errorf("restore sandbox: runtime cannot restore processes: %w", errdefs.ErrNotImplemented)
		}
		if err := c.Restore(ctx, id, spec, restore); err != nil {
			return fmt.Errorf("restore sandbox: %w", err)
		}
		return nil
	}
	// Not wrapped: a runtime's errors say the operation and the sandbox
	// ("start 1a2b3c4d5e6f: ...").
	if err := rt.Create(ctx, id, spec); err != nil {
		return err
	}
	return rt.Start(ctx, id)
}

// reserve adds b to the index after checking that its name is free and
// that it fits in the quota.
func (m *Manager) reserve(b *box) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return fmt.Errorf("manager is closed: %w", errdefs.ErrUnavailable)
	}
	if _, ok := m.boxes[b.rec.ID]; ok {
		return fmt.Errorf("sandbox id %s: %w", b.rec.ID, errdefs.ErrAlreadyExists)
	}
	if n := b.rec.Name; n != "" {
		for _, o := range m.boxes {
			if o.rec.Name == n {
				return fmt.Errorf("name %q is used by sandbox %s: %w", n, o.rec.ID, errdefs.ErrAlreadyExists)
			}
		}
	}
	if err := m.checkQuotaLocked(b.rec); err != nil {
		return err
	}
	if err := m.checkVolumesLocked(b.rec); err != nil {
		return err
	}
	m.boxes[b.rec.ID] = b
	m.peak = max(m.peak, len(m.boxes))
	return nil
}

// forget drops b from the index and stops its timer.
func (m *Manager) forget(b *box) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked(b)
}

// forgetLocked is forget; the caller holds mu.
func (m *Manager) forgetLocked(b *box) {
	b.gone = true
	m.stopTimerLocked(b)
	if m.boxes[b.rec.ID] == b {
		delete(m.boxes, b.rec.ID)
		m.freeMemoryLocked()
	}
}

// minFreePeak is the fewest sandboxes whose removal gives the heap back.
const minFreePeak = 8

// freeMemoryLocked gives the daemon's free heap back to the host once the
// sandboxes dropped to half of their peak (at least minFreePeak): the Go
// runtime keeps freed heap for reuse and returns it slowly, so the memory
// of a thousand sandboxes' records, watchers and buffers would stay in
// the daemon's RSS long after they were removed. It runs in the
// background, one at a time; the caller holds mu.
func (m *Manager) freeMemoryLocked() {
	if m.peak < minFreePeak || len(m.boxes) > m.peak/2 || m.closed || !m.freeing.CompareAndSwap(false, true) {
		return
	}
	m.peak = len(m.boxes)
	free := m.cfg.FreeMemory
	if free == nil {
		free = debug.FreeOSMemory
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		defer m.freeing.Store(false)
		free()
	}()
}

// arm starts b's deadline timer, if it has a deadline.
func (m *Manager) arm(ctx context.Context, b *box) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.rec.Deadline.IsZero() || b.gone || m.closed {
		return
	}
	id, action := b.rec.ID, b.rec.TimeoutAction
	ctx = context.WithoutCancel(ctx)
	m.timers.Add(1)
	b.timer = time.AfterFunc(time.Until(b.rec.Deadline), func() {
		defer m.timers.Done()
		m.mu.Lock()
		closed := m.closed
		m.mu.Unlock()
		if closed {
			return
		}
		if action == TimeoutPause {
			m.pauseAtDeadline(ctx, id)
			return
		}
		log.G(ctx).Info("sandbox timeout reached, removing")
		if err := m.Delete(withReason(ctx, "timeout"), id, true); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).Error("remove timed-out sandbox", "error", err)
		}
	})
}

// lookup finds a sandbox by ID, name or ID prefix, in that order (as
// docker does): an exact ID is a map hit, the fast path of every request;
// a name is an exact match only; a prefix must match one sandbox's ID,
// else the error lists the candidates (invalid argument).
func (m *Manager) lookup(idOrName string) (*box, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if b, ok := m.boxes[idOrName]; ok && b.rec.Pool == "" {
		return b, nil
	}
	if idOrName == "" {
		return nil, fmt.Errorf("sandbox %q: %w", idOrName, errdefs.ErrNotFound)
	}
	if b := m.byNameLocked(idOrName); b != nil {
		return b, nil
	}
	var found []*box
	for id, b := range m.boxes {
		if b.rec.Pool == "" && strings.HasPrefix(id, idOrName) {
			found = append(found, b)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("sandbox %q: %w", idOrName, errdefs.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return nil, errAmbiguous(idOrName, found)
}

// byNameLocked returns the (unpooled) sandbox named name, or nil; the
// caller holds mu.
func (m *Manager) byNameLocked(name string) *box {
	for _, b := range m.boxes {
		if b.rec.Name == name && b.rec.Pool == "" {
			return b
		}
	}
	return nil
}

// maxCandidates bounds the sandboxes an ambiguous prefix's error names.
const maxCandidates = 10

// errAmbiguous is the error of a prefix that matches the IDs of several
// sandboxes: it names them (with their names), so that the caller can
// type a longer prefix.
func errAmbiguous(prefix string, found []*box) error {
	slices.SortFunc(found, func(a, b *box) int { return strings.Compare(a.rec.ID, b.rec.ID) })
	var c []string
	for i, b := range found {
		if i == maxCandidates {
			c = append(c, fmt.Sprintf("and %d more", len(found)-maxCandidates))
			break
		}
		if b.rec.Name != "" {
			c = append(c, b.rec.ID+" ("+b.rec.Name+")")
		} else {
			c = append(c, b.rec.ID)
		}
	}
	return fmt.Errorf("sandbox ID prefix %q is ambiguous: it matches %d sandboxes: %s; give more of the ID: %w",
		prefix, len(found), strings.Join(c, ", "), errdefs.ErrInvalidArgument)
}

// Get returns the record of the sandbox with that ID or name.
func (m *Manager) Get(ctx context.Context, idOrName string) (Record, error) {
	b, err := m.lookup(idOrName)
	if err != nil {
		return Record{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return cloneRecord(b.rec), nil
}

// List returns every sandbox, oldest first.
func (m *Manager) List(ctx context.Context) ([]Record, error) {
	m.mu.Lock()
	out := make([]Record, 0, len(m.boxes))
	for _, b := range m.boxes {
		if b.rec.Pool == "" {
			out = append(out, cloneRecord(b.rec))
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// ImageInUse reports the IDs of the sandboxes made from image name.
func (m *Manager) ImageInUse(name string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for _, b := range m.boxes {
		if b.rec.Image == name {
			ids = append(ids, b.rec.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// Usage reads the sandbox's resource use from its runtime;
// errdefs.ErrNotImplemented when the runtime cannot.
func (m *Manager) Usage(ctx context.Context, idOrName string) (Usage, error) {
	rec, err := m.Get(ctx, idOrName)
	if err != nil {
		return Usage{}, err
	}
	if rec.State != StateRunning && rec.State != StatePaused {
		return Usage{}, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	s, ok := m.cfg.Runtimes[rec.Runtime].(Statser)
	if !ok {
		return Usage{}, fmt.Errorf("runtime %s cannot report usage: %w", rec.Runtime, errdefs.ErrNotImplemented)
	}
	u, err := s.Usage(ctx, rec.ID)
	if err != nil {
		return Usage{}, fmt.Errorf("usage of %s: %w", rec.ID, err)
	}
	return u, nil
}

// ResumeAgent resumes the agent of running sandbox idOrName when it is
// stopped (SIGSTOP from inside the box) and reports whether it was; false
// when the runtime cannot tell (AgentResumer). The data-plane proxy calls
// it when an agent does not answer.
func (m *Manager) ResumeAgent(ctx context.Context, idOrName string) (bool, error) {
	rec, err := m.Get(ctx, idOrName)
	if err != nil {
		return false, err
	}
	if rec.State != StateRunning {
		return false, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	r, ok := m.cfg.Runtimes[rec.Runtime].(AgentResumer)
	if !ok {
		return false, nil
	}
	resumed, err := r.ResumeAgent(ctx, rec.ID)
	if resumed {
		log.G(ctx).Warn("agent was stopped: resumed it", "sandbox", rec.ID)
	}
	return resumed, err
}

// Delete stops and removes the sandbox with that ID or name and everything
// it owns. Sandboxes are always running, so Delete does not need force to
// remove a running one (unlike docker rm). force also removes a half-broken
// sandbox: teardown errors are logged and the record is dropped anyway;
// without force the first error stops the teardown, leaves the sandbox in
// state "error" and is returned. Teardown runs on a context detached from
// ctx.
func (m *Manager) Delete(ctx context.Context, idOrName string, force bool) error {
	m.busy()
	return m.remove(ctx, idOrName, force, nil, false)
}

// remove tears the sandbox idOrName down (see teardown).
func (m *Manager) remove(ctx context.Context, idOrName string, force bool, beforeRemove func(context.Context, Record), pooled bool) error {
	lookup := m.lookup
	if pooled {
		lookup = m.lookupAny
	}
	b, err := lookup(idOrName)
	if err != nil {
		return err
	}
	b.op.Lock()
	defer b.op.Unlock()
	m.mu.Lock()
	gone, rec := b.gone, b.rec
	m.mu.Unlock()
	if gone {
		return fmt.Errorf("sandbox %q: %w", idOrName, errdefs.ErrNotFound)
	}
	ctx = log.With(ctx, "sandbox", rec.ID)
	var hook func(context.Context)
	if beforeRemove != nil {
		// The hook is part of the caller's request: it ends with ctx.
		hook = func(context.Context) { beforeRemove(ctx, rec) }
	}
	cleanup.Do(ctx, func(tctx context.Context) {
		err = m.teardown(tctx, b, rec, force, hook)
	})
	if err != nil {
		return err
	}
	log.G(ctx).Info("sandbox removed")
	return nil
}

// Commit removes the sandbox idOrName like Delete and, once its
// processes are gone and its root file system is unmounted, and before its
// writable layer is removed, calls commit with the key of that writable
// layer, so that its changes can be kept as a committed layer (builds do).
// The sandbox is gone when Commit returns, whatever commit returned (that
// error is returned), unless the teardown itself fails: then, as with
// Delete, the sandbox is left in state "error" and commit is not called.
func (m *Manager) Commit(ctx context.Context, idOrName string, commit func(ctx context.Context, layerKey string) error) error {
	var cerr error
	if err := m.remove(ctx, idOrName, false, func(ctx context.Context, rec Record) {
		cerr = commit(ctx, rec.ID)
	}, false); err != nil {
		return err
	}
	return cerr
}

// teardown removes what rec owns; the caller holds b.op.
// beforeRemove, when set, runs after the runtime deleted the sandbox and
// before its writable layer is removed.
func (m *Manager) teardown(ctx context.Context, b *box, rec Record, force bool, beforeRemove func(context.Context)) error {
	fail := func(err error) error {
		if force {
			log.G(ctx).Warn("forced removal: ignoring error", "error", err)
			return nil
		}
		rec.State, rec.Error = StateError, err.Error()
		if perr := m.write(ctx, b, rec, persistAnyway, ""); perr != nil {
			log.G(ctx).Error("record error state", "error", perr)
		}
		return err
	}
	rt := m.remover(rec.Runtime)
	if rt == nil && rec.State != StateSuspended {
		// Its processes may run: dropping the record (and its disk
		// under them) would leave them where nothing can reach them,
		// even with force.
		err := fmt.Errorf("sandbox %s: runtime %q is not available and nothing can stop its processes; bring the runtime back and remove it again: %w", rec.ID, rec.Runtime, errdefs.ErrFailedPrecondition)
		if rec.State != StateError {
			rec.ErrorFrom = rec.State
		}
		rec.State, rec.Error = StateError, err.Error()
		if perr := m.write(ctx, b, rec, persistAnyway, ""); perr != nil {
			log.G(ctx).Error("record error state", "error", perr)
		}
		return err
	}
	m.stopTimer(b)
	st := log.StartSteps(ctx)
	// A removal asked for: a failure leaves an error to remove, never a
	// box to recover.
	rec.State, rec.ErrorFrom = StateDeleting, ""
	if err := m.write(ctx, b, rec, persistAnyway, ""); err != nil {
		if err := fail(err); err != nil {
			return err
		}
	}
	st.Step("record")
	if m.cfg.Network != nil {
		if err := m.cfg.Network.Detach(rec.ID, true); err != nil {
			if err := fail(fmt.Errorf("detach network of %s: %w", rec.ID, err)); err != nil {
				return err
			}
		}
	}
	st.Step("network")
	if rt != nil {
		if err := rt.Delete(ctx, rec.ID); err != nil {
			if err := fail(fmt.Errorf("delete sandbox %s from runtime: %w", rec.ID, err)); err != nil {
				return err
			}
		}
	}
	st.Step("runtime")
	if beforeRemove != nil {
		beforeRemove(ctx)
	}
	if m.cfg.StateDir != "" {
		if err := os.RemoveAll(m.checkpointDir(rec.ID)); err != nil {
			if err := fail(fmt.Errorf("remove checkpoint of %s: %w", rec.ID, err)); err != nil {
				return err
			}
		}
		// The box's own state (the daemon's log files of its commands'
		// output).
		if err := os.RemoveAll(filepath.Join(m.cfg.StateDir, rec.ID)); err != nil {
			if err := fail(fmt.Errorf("remove state of %s: %w", rec.ID, err)); err != nil {
				return err
			}
		}
	}
	if err := m.cfg.Layers.Remove(ctx, rec.ID); err != nil {
		if err := fail(fmt.Errorf("remove layer of %s: %w", rec.ID, err)); err != nil {
			return err
		}
	}
	st.Step("layer")
	how := persistFirst
	if force {
		how = persistAnyway // a failed delete is ignored: drop the box
	}
	if err := m.drop(ctx, b, how, ""); err != nil {
		if err := fail(err); err != nil {
			return err
		}
	} else {
		m.releaseIDs(rec.ID)
	}
	st.Step("drop")
	st.Done(ctx, "sandbox teardown")
	return nil
}

// allocateIDs gives sandbox id a user namespace range in spec when its
// runtime runs sandboxes in user namespaces.
func (m *Manager) allocateIDs(id string, rt Runtime, spec *Spec) error {
	if u, ok := rt.(UserNSRuntime); !ok || !u.UserNS() || m.cfg.IDRanges == nil {
		spec.UserNS = nil
		return nil
	}
	r, err := m.cfg.IDRanges.Allocate(id)
	if err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	spec.UserNS = &r
	return nil
}

// releaseIDs frees sandbox id's user namespace range, once its record is
// gone.
func (m *Manager) releaseIDs(id string) {
	if m.cfg.IDRanges != nil {
		m.cfg.IDRanges.Release(id)
	}
}

func (m *Manager) stopTimer(b *box) {
	m.mu.Lock()
	m.stopTimerLocked(b)
	m.mu.Unlock()
}

// stopTimerLocked stops b's timer; the caller holds m.mu.
func (m *Manager) stopTimerLocked(b *box) {
	if b.timer != nil && b.timer.Stop() {
		m.timers.Done() // the callback will never run
	}
	b.timer = nil
}

// Recover is called once at daemon start, before serving. It keeps every
// recorded sandbox whose runtime reports it running and whose agent answers
// within RecoverReadyTimeout, or whose PID 1 is corral-init (it starts an
// agent on demand; see alive), re-arming its timeout, and removes the others
// completely. Then it removes what no record owns: runtime sandboxes (from
// runtimes that are Listers) and writable layers (when the layer store is a
// LayerLister).
func (m *Manager) Recover(ctx context.Context) error {
	recs, err := m.cfg.Store.ListSandboxes(ctx)
	if err != nil {
		return fmt.Errorf("recover: list records: %w", err)
	}
	owned := map[string]bool{}
	var kept, removed int
	ctx = withReason(ctx, "recover")
	// Every recorded range first: nothing below may hand one out again.
	for _, rec := range recs {
		if rec.Spec == nil || rec.Spec.UserNS == nil || m.cfg.IDRanges == nil {
			continue
		}
		if err := m.cfg.IDRanges.Reserve(rec.ID, *rec.Spec.UserNS); err != nil {
			// Outside the pool (it was changed) or held twice: the box
			// keeps its ids; the allocator never hands out the former,
			// and Recover removes neither.
			log.G(ctx).Warn("recover: user namespace range", "sandbox", rec.ID, "error", err)
		}
	}
	for _, rec := range recs {
		owned[rec.ID] = true
		rctx := log.With(ctx, "sandbox", rec.ID)
		b := &box{rec: *rec, stored: true}
		m.mu.Lock()
		m.boxes[rec.ID] = b
		m.mu.Unlock()
		keep, reason := m.recoverOne(rctx, b, *rec)
		if !keep {
			log.G(rctx).Info("recover: removing sandbox", "reason", reason)
			rctx = withReason(rctx, "recover: "+reason)
			b.op.Lock()
			cleanup.Do(rctx, func(c context.Context) { _ = m.teardown(c, b, b.rec, true, nil) }) // force: never fails
			b.op.Unlock()
			removed++
			continue
		}
		log.G(rctx).Info("recover: sandbox kept", "runtime", rec.Runtime, "state", b.rec.State)
		kept++
		b.touch()
		m.arm(rctx, b)
	}
	var orphans int
	for _, name := range slices.Sorted(maps.Keys(m.cfg.Runtimes)) {
		l, ok := m.cfg.Runtimes[name].(Lister)
		if !ok {
			continue
		}
		ids, err := l.List(ctx)
		if err != nil {
			return fmt.Errorf("recover: list %s sandboxes: %w", name, err)
		}
		for _, id := range ids {
			if owned[id] {
				continue
			}
			log.G(ctx).Info("recover: removing orphan sandbox", "sandbox", id, "runtime", name)
			if err := m.cfg.Runtimes[name].Delete(ctx, id); err != nil {
				return fmt.Errorf("recover: delete orphan %s: %w", id, err)
			}
			orphans++
		}
	}
	if l, ok := m.cfg.Layers.(LayerLister); ok {
		keys, err := l.Active(ctx)
		if err != nil {
			return fmt.Errorf("recover: list layers: %w", err)
		}
		for _, k := range keys {
			if owned[k] {
				continue
			}
			log.G(ctx).Info("recover: removing orphan layer", "layer", k)
			if err := m.cfg.Layers.Remove(ctx, k); err != nil {
				return fmt.Errorf("recover: remove orphan layer %s: %w", k, err)
			}
			orphans++
		}
	}
	if m.cfg.StateDir != "" {
		dir := filepath.Join(m.cfg.StateDir, "checkpoints")
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if !owned[e.Name()] {
				log.G(ctx).Info("recover: removing orphan checkpoint", "checkpoint", e.Name())
				if err := removeSettled(ctx, filepath.Join(dir, e.Name()), orphanCheckpointWait); err != nil {
					// Not worth refusing to start over: the next start
					// tries again.
					log.G(ctx).Error("recover: orphan checkpoint left", "checkpoint", e.Name(), "error", err)
					continue
				}
				orphans++
			}
		}
	}
	log.G(ctx).Info("recovered sandboxes", "kept", kept, "removed", removed, "orphans_removed", orphans)
	return nil
}

// orphanCheckpointWait bounds how long recovery keeps removing an orphan
// checkpoint that something still writes into.
const orphanCheckpointWait = 10 * time.Second

// removeSettled removes dir like os.RemoveAll, trying again for up to wait
// while it fails: something may still write into an orphan checkpoint and
// add files as they are removed ("directory not empty"). Recovery ends the
// CRIU of every recorded box before it gets here (Checkpointer.EndStray,
// which since finds even one started just before the daemon died); this is
// the safety net for a writer it could not end, which ends by itself.
func removeSettled(ctx context.Context, dir string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := os.RemoveAll(dir)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// recoverOne decides the fate of recorded sandbox rec at daemon start and
// brings its record up to date: keep is false (with the reason) when it
// must be removed.
func (m *Manager) recoverOne(ctx context.Context, b *box, rec Record) (keep bool, reason string) {
	rt, ok := m.cfg.Runtimes[rec.Runtime]
	if ok && rec.State == StateError && rec.ErrorFrom != "" {
		// Kept by a daemon that started without the runtime: it is back.
		log.G(ctx).Info("recover: runtime available again", "runtime", rec.Runtime, "state", rec.ErrorFrom)
		rec.State, rec.ErrorFrom, rec.Error = rec.ErrorFrom, "", ""
		if err := m.save(ctx, b, rec); err != nil {
			log.G(ctx).Error("recover: record state", "error", err)
		}
	}
	if rec.Pool != "" {
		return false, "warm pool sandbox: the pool refills"
	}
	if !rec.Deadline.IsZero() && !time.Now().Before(rec.Deadline) {
		return false, "timeout reached"
	}
	if !ok {
		return m.strand(ctx, b, rec)
	}
	if c, ok := rt.(Checkpointer); ok {
		if err := c.EndStray(ctx, rec.ID); err != nil {
			return false, "cannot end an interrupted checkpoint or restore: " + err.Error()
		}
	}
	status := StatusStopped
	if st, err := rt.State(ctx, rec.ID); err == nil {
		status = st.Status
	}
	set := func(state RecordState, sus *Suspension) {
		rec.State, rec.Suspended = state, sus
		if err := m.save(ctx, b, rec); err != nil {
			log.G(ctx).Error("recover: record state", "error", err)
		}
	}
	switch rec.State {
	case StatePaused:
		if status == StatusPaused {
			// The new daemon's network service knows nothing of the box:
			// wire it now, or it has no egress once unpaused.
			if err := m.attachNetwork(ctx, rec); err != nil {
				log.G(ctx).Error("recover: network not attached: the box has no egress", "error", err)
			}
			return true, ""
		}
		if status == StatusRunning {
			set(StateRunning, nil)
		}
	case StateRunning:
		if status == StatusPaused {
			// Frozen for a snapshot or fork that the crash interrupted.
			if p, ok := rt.(Pauser); ok {
				if err := p.Unpause(ctx, rec.ID); err != nil {
					return false, "cannot thaw: " + err.Error()
				}
			}
		}
	case StateSuspended:
		return m.recoverSuspended(ctx, rt, rec)
	case StateExited:
		// Kept for its owner to see why (inspect) until removed.
		return true, ""
	case StateSuspending, StateResuming:
		if status == StatusRunning || status == StatusPaused {
			if reason := m.alive(ctx, Record{ID: rec.ID, Runtime: rec.Runtime, State: StateRunning}); reason == "" {
				if m.cfg.StateDir != "" {
					_ = os.RemoveAll(m.checkpointDir(rec.ID))
				}
				set(StateRunning, nil)
				break
			}
		}
		// The processes are gone: the files remain, and the memory if
		// the checkpoint completed.
		if err := rt.Delete(ctx, rec.ID); err != nil {
			return false, "cannot clean the runtime: " + err.Error()
		}
		sus := &Suspension{Time: time.Now().UTC().Truncate(time.Millisecond)}
		// Without a state directory there is no checkpoint (and
		// checkpointDir would be relative to the working directory).
		if m.cfg.StateDir != "" {
			if _, err := os.Stat(filepath.Join(m.checkpointDir(rec.ID), completeMarker)); err == nil {
				sus.Memory, sus.MemoryBytes = true, dirSize(m.checkpointDir(rec.ID))
			} else {
				_ = os.RemoveAll(m.checkpointDir(rec.ID))
			}
		}
		set(StateSuspended, sus)
		return m.recoverSuspended(ctx, rt, rec)
	}
	if reason := m.alive(ctx, b.rec); reason != "" {
		return false, reason
	}
	if err := m.attachNetwork(ctx, b.rec); err != nil {
		log.G(ctx).Error("recover: network not attached: the box keeps running without egress", "error", err)
	}
	return true, ""
}

// strand decides the fate at daemon start of sandbox rec, whose runtime is
// missing or refused. Its processes may still run, and only its runtime
// could bring it back into service, so it is kept in state error with the
// reason (ls, inspect show it; rm removes it through the runtime's
// cleaner, which kills its processes through its cgroups) and ErrorFrom,
// the state a daemon with the runtime recovers it from. What would be
// removed anyway (a create or removal cut short, a build's box) is
// removed through the cleaner, if there is one; a suspended box, which
// has no process, waits as it is for its runtime.
func (m *Manager) strand(ctx context.Context, b *box, rec Record) (keep bool, reason string) {
	why := "runtime " + rec.Runtime + " unavailable"
	if u, ok := m.cfg.Unavailable[rec.Runtime]; ok {
		why += ": " + u.Reason
	}
	switch {
	case rec.State == StateSuspended && !rec.Ephemeral:
		log.G(ctx).Warn("recover: suspended sandbox kept; it cannot resume until its runtime is back", "reason", why)
		return true, ""
	case rec.State == StateCreating || rec.State == StateDeleting || rec.Ephemeral || rec.State == StateSuspended:
		if m.remover(rec.Runtime) != nil {
			return false, why
		}
	}
	if rec.State != StateError {
		rec.ErrorFrom = rec.State
	}
	rec.State, rec.Error = StateError, why
	if err := m.save(ctx, b, rec); err != nil {
		log.G(ctx).Error("recover: record state", "error", err)
	}
	log.G(ctx).Warn("recover: sandbox kept in state error: its processes may still run; remove it with rm, or restart the daemon with the runtime to recover it", "reason", why, "was", rec.ErrorFrom)
	return true, ""
}

// recoverSuspended keeps a suspended sandbox whose writable layer exists.
func (m *Manager) recoverSuspended(ctx context.Context, rt Runtime, rec Record) (bool, string) {
	if rec.Ephemeral {
		return false, "ephemeral"
	}
	if l, ok := m.cfg.Layers.(LayerLister); ok {
		keys, err := l.Active(ctx)
		if err == nil && !slices.Contains(keys, rec.ID) {
			return false, "writable layer missing"
		}
	}
	// Nothing of it may be left in the runtime (a crash mid-suspend).
	if err := rt.Delete(ctx, rec.ID); err != nil {
		return false, "cannot clean the runtime: " + err.Error()
	}
	return true, ""
}

// alive returns why rec cannot be kept, or "" when it can.
func (m *Manager) alive(ctx context.Context, rec Record) string {
	if rec.State != StateRunning {
		return "record state " + string(rec.State)
	}
	if rec.Ephemeral {
		return "ephemeral: its owner (a build) ended with the daemon"
	}
	if !rec.Deadline.IsZero() && !time.Now().Before(rec.Deadline) {
		return "timeout reached"
	}
	rt, ok := m.cfg.Runtimes[rec.Runtime]
	if !ok {
		return "runtime " + rec.Runtime + " is not available"
	}
	st, err := rt.State(ctx, rec.ID)
	if err != nil {
		return "runtime state: " + err.Error()
	}
	if st.Status != StatusRunning {
		return "runtime status " + string(st.Status)
	}
	if rec.Spec != nil && rec.Spec.InitBinary != "" {
		// PID 1 is corral-init, alive: it holds the agent's socket and
		// starts an agent for the next request. Asking an agent here
		// would start one in every idle box at each daemon restart (1000
		// boxes: 1000 agents, all holding memory for agent_idle_exit).
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, RecoverReadyTimeout)
	defer cancel()
	if err := m.cfg.Agents.Ready(rctx, rt.AgentAddr(rec.ID)); err != nil {
		return "agent does not answer: " + err.Error()
	}
	return ""
}

// Close stops the deadline timers and waits for running expiries. It does
// not stop sandboxes: they keep running for the next daemon to recover.
func (m *Manager) Close() error {
	m.mu.Lock()
	wasClosed := m.closed
	m.closed = true
	m.mu.Unlock()
	if !wasClosed {
		close(m.stop)
	}
	m.bg.Wait()
	m.writes.Wait()
	m.drainNS(context.Background())
	// Ready pool boxes are not worth keeping for the next daemon, which
	// would remove them anyway: remove them now.
	m.mu.Lock()
	var pooled []string
	for _, b := range m.boxes {
		if b.rec.Pool != "" && !b.gone {
			pooled = append(pooled, b.rec.ID)
		}
	}
	m.mu.Unlock()
	for _, id := range pooled {
		if err := m.remove(context.Background(), id, true, nil, true); err != nil && !errdefs.IsNotFound(err) {
			log.G(context.Background()).Warn("remove pooled sandbox at close", "sandbox", id, "error", err)
		}
	}
	m.mu.Lock()
	for _, b := range m.boxes {
		m.stopTimerLocked(b)
	}
	m.mu.Unlock()
	m.timers.Wait()
	m.mu.Lock()
	m.closeSubsLocked()
	m.mu.Unlock()
	return nil
}

// newID returns 12 random lowercase hex digits.
func newID() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("random id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

func cloneRecord(r Record) Record {
	r.Env = maps.Clone(r.Env)
	r.Labels = maps.Clone(r.Labels)
	r.E2B = r.E2B.Clone()
	r.Volumes = slices.Clone(r.Volumes)
	return r
}

func names[V any](m map[string]V) string {
	s := slices.Sorted(maps.Keys(m))
	if len(s) == 0 {
		return "none"
	}
	return fmt.Sprint(s)
}

// errNotFoundImage builds the error for an unknown image, naming the known
// ones.
func (m *Manager) errNotFoundImage(ctx context.Context, name string, cause error) error {
	if !errdefs.IsNotFound(cause) {
		return fmt.Errorf("image %q: %w", name, cause)
	}
	imgs, err := m.cfg.Images.List(ctx)
	if err != nil {
		return fmt.Errorf("image %q: %w", name, cause)
	}
	known := make([]string, 0, len(imgs))
	for _, i := range imgs {
		known = append(known, i.Name)
	}
	slices.Sort(known)
	return fmt.Errorf("image %q not found (known images: %s): %w", name, joinOr(known), errdefs.ErrNotFound)
}
