package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sync/errgroup"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
)

// Bounds and defaults of the lifecycle operations.
const (
	// MaxForkCount bounds ForkRequest.Count.
	MaxForkCount = 64
	// SuspendGrace is how long a filesystem-only suspend waits for the
	// box's processes after SIGTERM.
	SuspendGrace = 2 * time.Second
	// idleTick is how often the idle reaper looks at the boxes.
	idleTick = 250 * time.Millisecond
	// completeMarker is written into a checkpoint directory once the
	// checkpoint is whole.
	completeMarker = "corral-complete"
)

// SnapshotStore records snapshots as images (implemented by the image
// store): a snapshot is an image whose Disk is a saved disk.
type SnapshotStore interface {
	// AddSnapshot registers img under img.Name; errdefs.ErrAlreadyExists
	// when the name is taken.
	AddSnapshot(ctx context.Context, img Image) error
}

// ForkRequest asks for copies of a sandbox.
type ForkRequest struct {
	// Count is the number of new sandboxes (1 if zero).
	Count int
	// MemoryState also copies the running processes (CRIU): each copy
	// resumes them where the source was.
	MemoryState bool
	// Labels are added to the source's labels on every copy.
	Labels map[string]string
}

// SuspendRequest tunes Suspend.
type SuspendRequest struct {
	// FilesystemOnly keeps only the file system: the processes are stopped
	// and resume starts a fresh agent.
	FilesystemOnly bool
}

// withBox runs fn on the sandbox idOrName with its operation lock held.
// fn returns the new record (stored and indexed by withBox when changed).
func (m *Manager) withBox(ctx context.Context, idOrName string, fn func(ctx context.Context, b *box, rec Record) (Record, error)) (Record, error) {
	b, err := m.lookup(idOrName)
	if err != nil {
		return Record{}, err
	}
	b.op.Lock()
	defer b.op.Unlock()
	m.mu.Lock()
	gone, rec := b.gone, cloneRecord(b.rec)
	m.mu.Unlock()
	if gone {
		return Record{}, fmt.Errorf("sandbox %q: %w", idOrName, errdefs.ErrNotFound)
	}
	return fn(log.With(ctx, "sandbox", rec.ID), b, rec)
}

// save persists rec, makes it b's record and emits the event of the
// change (see write): when the Store fails nothing changes.
func (m *Manager) save(ctx context.Context, b *box, rec Record) error {
	return m.write(ctx, b, rec, persistFirst, "")
}

func errState(rec Record, want string) error {
	return fmt.Errorf("sandbox %s is %s, %s: %w", rec.ID, rec.State, want, errdefs.ErrFailedPrecondition)
}

// Pause freezes the sandbox's processes: they use no CPU and keep their
// memory. Pausing a paused sandbox is success.
func (m *Manager) Pause(ctx context.Context, idOrName string) (Record, error) {
	return m.withBox(ctx, idOrName, func(ctx context.Context, b *box, rec Record) (Record, error) {
		switch rec.State {
		case StatePaused:
			return rec, nil
		case StateRunning:
		default:
			return rec, errState(rec, "only a running sandbox can be paused")
		}
		p, ok := m.cfg.Runtimes[rec.Runtime].(Pauser)
		if !ok {
			return rec, fmt.Errorf("runtime %s cannot pause: %w", rec.Runtime, errdefs.ErrNotImplemented)
		}
		if err := p.Pause(ctx, rec.ID); err != nil {
			return rec, fmt.Errorf("pause %s: %w", rec.ID, err)
		}
		rec.State = StatePaused
		if err := m.save(ctx, b, rec); err != nil {
			return rec, err
		}
		log.G(ctx).Info("sandbox paused")
		return rec, nil
	})
}

// Resume brings a paused or suspended sandbox back to running. Resuming a
// running sandbox is success.
func (m *Manager) Resume(ctx context.Context, idOrName string) (_ Record, err error) {
	defer m.observe(OpResume, time.Now(), &err)
	return m.withBox(ctx, idOrName, func(ctx context.Context, b *box, rec Record) (Record, error) {
		b.touch()
		switch rec.State {
		case StateRunning:
			return rec, nil
		case StatePaused:
			p, ok := m.cfg.Runtimes[rec.Runtime].(Pauser)
			if !ok {
				return rec, fmt.Errorf("runtime %s cannot unpause: %w", rec.Runtime, errdefs.ErrNotImplemented)
			}
			if err := p.Unpause(ctx, rec.ID); err != nil {
				return rec, fmt.Errorf("unpause %s: %w", rec.ID, err)
			}
			rec.State = StateRunning
			if err := m.save(ctx, b, rec); err != nil {
				return rec, err
			}
			log.G(ctx).Info("sandbox unpaused")
			return rec, nil
		case StateSuspended:
			var err error
			cleanup.Do(ctx, func(tctx context.Context) { rec, err = m.resumeSuspended(tctx, b, rec) })
			return rec, err
		default:
			return rec, errState(rec, "it cannot be resumed")
		}
	})
}

// EnsureRunning resumes the sandbox when it is paused or suspended (the
// API calls it before forwarding a request: auto-resume) and records
// activity.
func (m *Manager) EnsureRunning(ctx context.Context, idOrName string) (Record, error) {
	b, err := m.lookup(idOrName)
	if err != nil {
		return Record{}, err
	}
	b.touch()
	m.mu.Lock()
	rec := cloneRecord(b.rec)
	m.mu.Unlock()
	if rec.State != StatePaused && rec.State != StateSuspended {
		return rec, nil
	}
	log.G(ctx).Info("auto-resume", "sandbox", rec.ID, "state", rec.State)
	return m.Resume(withReason(ctx, "auto-resume"), rec.ID)
}

// Touch records activity on the sandbox (it resets its idle timer).
func (m *Manager) Touch(idOrName string) {
	m.busy()
	if b, err := m.lookup(idOrName); err == nil {
		b.touch()
	}
}

// KeepAlive records activity and, when d > 0 or the sandbox was created
// with a timeout, moves its deadline to now + d (or now + that timeout).
func (m *Manager) KeepAlive(ctx context.Context, idOrName string, d time.Duration) (Record, error) {
	if d < 0 || d > MaxTimeout {
		return Record{}, invalid("timeout %s must be between 0 (keep the sandbox's own) and %s", d, MaxTimeout)
	}
	rec, err := m.withBox(ctx, idOrName, func(ctx context.Context, b *box, rec Record) (Record, error) {
		b.touch()
		if d == 0 {
			d = rec.Timeout
		}
		if d == 0 {
			return rec, nil
		}
		rec.Deadline = time.Now().UTC().Add(d).Truncate(time.Millisecond)
		if err := m.save(ctx, b, rec); err != nil {
			return rec, err
		}
		m.stopTimer(b)
		m.arm(ctx, b)
		return rec, nil
	})
	return rec, err
}

// SetDeadline sets when the sandbox's timeout acts (TimeoutAction) to t,
// which may be earlier than the current deadline; zero clears it (the
// sandbox then stays until removed). It does not change the sandbox's
// Timeout.
func (m *Manager) SetDeadline(ctx context.Context, idOrName string, t time.Time) (Record, error) {
	if !t.IsZero() && time.Until(t) > MaxTimeout {
		return Record{}, invalid("deadline %s is more than %s away", t.Format(time.RFC3339), MaxTimeout)
	}
	return m.withBox(ctx, idOrName, func(ctx context.Context, b *box, rec Record) (Record, error) {
		b.touch()
		if !t.IsZero() {
			t = t.UTC().Truncate(time.Millisecond)
		}
		rec.Deadline = t
		if err := m.save(ctx, b, rec); err != nil {
			return rec, err
		}
		m.stopTimer(b)
		m.arm(ctx, b)
		return rec, nil
	})
}

// checkpointDir is where sandbox id's memory state is saved.
func (m *Manager) checkpointDir(id string) string {
	return filepath.Join(m.cfg.StateDir, "checkpoints", id)
}

// Suspend saves the sandbox to disk and frees its memory: its processes
// (with CRIU, unless req.FilesystemOnly) and its writable layer. When the
// processes cannot be saved, Suspend fails with an error that says why,
// the sandbox keeps running, and a filesystem-only suspend remains
// possible. Suspending a suspended sandbox is success.
func (m *Manager) Suspend(ctx context.Context, idOrName string, req SuspendRequest) (Record, error) {
	return m.withBox(ctx, idOrName, func(ctx context.Context, b *box, rec Record) (Record, error) {
		switch rec.State {
		case StateSuspended:
			return rec, nil
		case StateRunning, StatePaused:
		default:
			return rec, errState(rec, "only a running or paused sandbox can be suspended")
		}
		var err error
		cleanup.Do(ctx, func(tctx context.Context) { rec, err = m.suspend(tctx, b, rec, req) })
		return rec, err
	})
}

func (m *Manager) suspend(ctx context.Context, b *box, rec Record, req SuspendRequest) (Record, error) {
	rt := m.cfg.Runtimes[rec.Runtime]
	ck, why := checkpointer(rt, rec.Runtime)
	if !req.FilesystemOnly && ck == nil {
		return rec, fmt.Errorf("suspend %s: %s; suspend with filesystem only to keep the files: %w", rec.ID, why, errdefs.ErrFailedPrecondition)
	}
	if m.cfg.StateDir == "" && !req.FilesystemOnly {
		return rec, fmt.Errorf("suspend %s: the manager has no state directory: %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	if _, ok := m.cfg.Layers.(LayerMounter); !ok {
		return rec, fmt.Errorf("suspend %s: the layer store cannot mount a writable layer again: %w", rec.ID, errdefs.ErrNotImplemented)
	}
	start := time.Now()
	prev := rec.State
	if prev == StatePaused {
		if err := rt.(Pauser).Unpause(ctx, rec.ID); err != nil {
			return rec, fmt.Errorf("suspend %s: unpause: %w", rec.ID, err)
		}
	}
	rec.State = StateSuspending
	if err := m.save(ctx, b, rec); err != nil {
		return rec, err
	}
	// back returns the sandbox to its previous state after a failure that
	// left it running.
	back := func(cause error) (Record, error) {
		rec.State = StateRunning
		if prev == StatePaused {
			if err := rt.(Pauser).Pause(ctx, rec.ID); err == nil {
				rec.State = StatePaused
			}
		}
		if err := m.write(ctx, b, rec, persistFirst, "suspend failed: "+cause.Error()); err != nil {
			log.G(ctx).Error("record state after failed suspend", "error", err)
		}
		return rec, cause
	}
	sus := &Suspension{Memory: !req.FilesystemOnly}
	if sus.Memory {
		dir := m.checkpointDir(rec.ID)
		if err := os.RemoveAll(dir); err != nil {
			return back(fmt.Errorf("suspend %s: %w", rec.ID, err))
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return back(fmt.Errorf("suspend %s: %w", rec.ID, err))
		}
		m.cfg.Agents.Drop(rec.AgentAddr)
		if err := ck.Checkpoint(ctx, rec.ID, dir, false); err != nil {
			_ = os.RemoveAll(dir)
			if st, serr := rt.State(ctx, rec.ID); serr == nil && st.Status == StatusRunning {
				return back(fmt.Errorf("suspend %s: %w; suspending with filesystem only keeps the files but not the processes", rec.ID, err))
			}
			// The checkpoint failed and took the processes with it: what
			// is left is a filesystem-only suspend.
			log.G(ctx).Error("checkpoint failed and stopped the sandbox: keeping its file system", "error", err)
			sus.Memory = false
		} else {
			// The marker says the checkpoint is whole: its images go to
			// the host's disk first, and the marker with them.
			if err := flushDir(dir); err != nil {
				log.G(ctx).Error("flush the checkpoint to disk: a host crash may lose it", "error", err)
			}
			if err := atomicfile.WriteDurable(filepath.Join(dir, completeMarker), nil, 0o600); err != nil {
				return back(fmt.Errorf("suspend %s: %w", rec.ID, err))
			}
			sus.MemoryBytes = dirSize(dir)
		}
	} else {
		if s, ok := rt.(Syncer); ok {
			if err := s.Sync(ctx, rec.ID); err != nil {
				log.G(ctx).Warn("sync before suspend", "error", err)
			}
		}
		// The agent shuts its server down on SIGTERM and would wait for
		// the daemon's idle connections (1 s) before it exits.
		m.cfg.Agents.Drop(rec.AgentAddr)
		if err := rt.Stop(ctx, rec.ID, SuspendGrace); err != nil {
			return back(fmt.Errorf("suspend %s: stop: %w", rec.ID, err))
		}
	}
	if m.cfg.Network != nil {
		if err := m.cfg.Network.Detach(rec.ID, false); err != nil {
			log.G(ctx).Warn("detach network of suspended sandbox", "error", err)
		}
	}
	if err := rt.Delete(ctx, rec.ID); err != nil {
		// The processes are gone; what is left is retried by rm or resume.
		log.G(ctx).Error("delete suspended sandbox from runtime", "error", err)
	} else if f, ok := m.cfg.Layers.(DiskFlusher); ok {
		// A suspended box's files must survive a host crash, which a
		// running box's need not (its disk is mounted without flushes).
		if err := f.FlushDisk(ctx, rec.ID); err != nil {
			log.G(ctx).Error("flush the suspended sandbox's disk: a host crash may lose its last writes", "error", err)
		}
	}
	sus.Time = time.Now().UTC().Truncate(time.Millisecond)
	rec.State, rec.Suspended = StateSuspended, sus
	if err := m.save(ctx, b, rec); err != nil {
		return rec, err
	}
	log.G(ctx).Info("sandbox suspended", "memory", sus.Memory, "memory_bytes", sus.MemoryBytes, "took", time.Since(start).Round(time.Microsecond))
	return rec, nil
}

// resumeSuspended mounts the writable layer again and restores the saved
// processes or starts a new agent; the caller holds b.op.
func (m *Manager) resumeSuspended(ctx context.Context, b *box, rec Record) (Record, error) {
	start := time.Now()
	rt, err := m.runtime(rec.Runtime)
	if err != nil {
		return rec, fmt.Errorf("resume %s: %w", rec.ID, err)
	}
	if rec.Spec == nil {
		return rec, fmt.Errorf("resume %s: spec missing: %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	lm, ok := m.cfg.Layers.(LayerMounter)
	if !ok {
		return rec, fmt.Errorf("resume %s: layer store cannot mount the layer again: %w", rec.ID, errdefs.ErrNotImplemented)
	}
	saved := rec
	rec.State = StateResuming
	if err := m.save(ctx, b, rec); err != nil {
		return saved, err
	}
	fail := func(err error) (Record, error) {
		if derr := rt.Delete(ctx, rec.ID); derr != nil {
			log.G(ctx).Error("roll back resume", "error", derr)
		}
		err = fmt.Errorf("resume %s: %w", rec.ID, err)
		if serr := m.write(ctx, b, saved, persistFirst, "resume failed: "+err.Error()); serr != nil {
			log.G(ctx).Error("record state after failed resume", "error", serr)
		}
		return saved, err
	}
	mounts, err := lm.Mounts(ctx, rec.ID)
	if err != nil {
		return fail(err)
	}
	spec := *rec.Spec
	spec.Rootfs = mounts
	var dir string
	if rec.Suspended != nil && rec.Suspended.Memory {
		dir = m.checkpointDir(rec.ID)
	}
	var lost *ProcessesLost
	loseProcesses := func(why string, err error) {
		log.G(ctx).Warn(why+": starting a fresh agent on the saved files", "error", err)
		lost = &ProcessesLost{Time: time.Now().UTC().Truncate(time.Millisecond), Reason: fmt.Sprintf("%s: %v", why, err)}
	}
	if dir != "" {
		if _, err := os.Stat(filepath.Join(dir, completeMarker)); err != nil {
			loseProcesses("checkpoint missing", err)
			dir = ""
		}
	}
	if err := m.run(ctx, rt, rec.ID, &spec, rec.Volumes, dir); err != nil {
		if dir == "" {
			return fail(err)
		}
		// The files are intact: a box that cannot get its processes back
		// (a kernel or CRIU change since the checkpoint) starts fresh
		// rather than staying unusable.
		loseProcesses("processes could not be restored", err)
		if derr := rt.Delete(ctx, rec.ID); derr != nil {
			return fail(fmt.Errorf("%w (and cleaning up: %v)", err, derr))
		}
		if mounts, err = lm.Mounts(ctx, rec.ID); err != nil {
			return fail(err)
		}
		spec.Rootfs, dir = mounts, ""
		if err := m.run(ctx, rt, rec.ID, &spec, rec.Volumes, ""); err != nil {
			return fail(err)
		}
	}
	if err := m.attachNetwork(ctx, rec); err != nil {
		return fail(fmt.Errorf("attach network: %w", err))
	}
	rctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	err = m.cfg.Agents.Ready(rctx, rec.AgentAddr)
	cancel()
	if err != nil {
		return fail(fmt.Errorf("wait for agent: %w", err))
	}
	memory := dir != ""
	rec.State, rec.Suspended = StateRunning, nil
	if memory || lost != nil {
		rec.ProcessesLost = lost
	}
	var reason string
	if lost != nil {
		reason = lost.Reason
	}
	if err := m.write(ctx, b, rec, persistFirst, reason); err != nil {
		return rec, err
	}
	if m.cfg.StateDir != "" {
		if err := os.RemoveAll(m.checkpointDir(rec.ID)); err != nil {
			log.G(ctx).Warn("remove checkpoint", "error", err)
		}
	}
	b.touch()
	log.G(ctx).Info("sandbox resumed", "memory", memory, "took", time.Since(start).Round(time.Microsecond))
	return rec, nil
}

// freeze makes the sandbox's writable layer safe to copy: a running box is
// paused and synced (thaw undoes the pause), a paused one synced, a
// suspended one has nothing in flight.
func (m *Manager) freeze(ctx context.Context, rec Record) (thaw func(), err error) {
	rt := m.cfg.Runtimes[rec.Runtime]
	switch rec.State {
	case StateSuspended:
		return func() {}, nil
	case StateRunning, StatePaused:
	default:
		return nil, errState(rec, "it cannot be copied now")
	}
	p, ok := rt.(Pauser)
	s, ok2 := rt.(Syncer)
	if !ok || !ok2 {
		return nil, fmt.Errorf("runtime %s cannot freeze and sync a sandbox: %w", rec.Runtime, errdefs.ErrNotImplemented)
	}
	thaw = func() {}
	if rec.State == StateRunning {
		if err := p.Pause(ctx, rec.ID); err != nil {
			return nil, fmt.Errorf("freeze %s: %w", rec.ID, err)
		}
		thaw = func() {
			if err := p.Unpause(ctx, rec.ID); err != nil {
				log.G(ctx).Error("thaw after copy", "sandbox", rec.ID, "error", err)
			}
		}
	}
	if err := s.Sync(ctx, rec.ID); err != nil {
		thaw()
		return nil, fmt.Errorf("sync %s: %w", rec.ID, err)
	}
	return thaw, nil
}

// Snapshot saves the sandbox's file system (its writable layer, on top of
// its image) as a read-only snapshot named name, which is an image:
// sandboxes created from it start with a copy of the files. The sandbox
// is frozen for the copy, which is a reflink where the store allows it.
func (m *Manager) Snapshot(ctx context.Context, idOrName, name string) (Image, error) {
	if m.cfg.Snapshots == nil {
		return Image{}, fmt.Errorf("snapshots are not available: %w", errdefs.ErrNotImplemented)
	}
	ds, ok := m.cfg.Layers.(DiskSaver)
	if !ok {
		return Image{}, fmt.Errorf("the layer store cannot save disks: %w", errdefs.ErrNotImplemented)
	}
	if err := identifiers.ValidateImageName(name); err != nil {
		return Image{}, invalid("snapshot name: %v", err)
	}
	if _, err := m.cfg.Images.Get(ctx, name); err == nil {
		return Image{}, fmt.Errorf("snapshot name %q is used by an image: %w", name, errdefs.ErrAlreadyExists)
	} else if !errdefs.IsNotFound(err) {
		return Image{}, err
	}
	var img Image
	_, err := m.withBox(ctx, idOrName, func(ctx context.Context, b *box, rec Record) (Record, error) {
		if rec.Spec == nil || rec.Layer == "" {
			return rec, fmt.Errorf("sandbox %s was made by an older daemon and cannot be snapshotted: %w", rec.ID, errdefs.ErrFailedPrecondition)
		}
		start := time.Now()
		thaw, err := m.freeze(ctx, rec)
		if err != nil {
			return rec, err
		}
		disk := "snap-" + randomHex(6)
		sd, err := ds.SaveDisk(ctx, rec.ID, disk)
		thaw()
		if err != nil {
			return rec, fmt.Errorf("snapshot %s: %w", rec.ID, err)
		}
		img = Image{
			Name:                     name,
			TopLayer:                 rec.Layer,
			Env:                      slices.Clone(rec.Spec.Env),
			Workdir:                  rec.Spec.Workdir,
			User:                     rec.Spec.User,
			Binds:                    imageBinds(rec.Spec.Binds),
			Created:                  time.Now().UTC().Truncate(time.Millisecond),
			Size:                     sd.UsedBytes,
			Resources:                rec.Resources,
			Network:                  rec.Network,
			Disk:                     disk,
			DiskBytes:                sd.DiskBytes,
			Origin:                   rec.ID,
			Tier:                     rec.TierOf(),
			AllowPrivilegeEscalation: rec.Spec.AllowPrivilegeEscalation,
		}
		if err := m.cfg.Snapshots.AddSnapshot(ctx, img); err != nil {
			if rerr := ds.RemoveDisk(context.WithoutCancel(ctx), disk); rerr != nil {
				log.G(ctx).Error("remove saved disk of failed snapshot", "error", rerr)
			}
			return rec, err
		}
		log.G(ctx).Info("sandbox snapshotted", "snapshot", name, "reflinked", sd.Reflinked, "took", time.Since(start).Round(time.Microsecond))
		return rec, nil
	})
	return img, err
}

// imageBinds drops the binds that the Manager adds to every box itself.
func imageBinds(bs []Bind) []Bind {
	return slices.DeleteFunc(slices.Clone(bs), func(b Bind) bool { return b.Target == "/etc/resolv.conf" })
}

// Fork makes req.Count new sandboxes with copies of the sandbox's file
// system (and with req.MemoryState, of its processes), its limits, network
// policy, environment and labels, each with its own ID, hostname, address
// and CA. The source is frozen only while its disk is cloned. Either every
// copy is made or none.
func (m *Manager) Fork(ctx context.Context, idOrName string, req ForkRequest) (_ []Record, err error) {
	defer m.observe(OpFork, time.Now(), &err)
	n := req.Count
	if n == 0 {
		n = 1
	}
	if n < 0 || n > MaxForkCount {
		return nil, invalid("count %d must be between 1 and %d", n, MaxForkCount)
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, err
	}
	src, err := m.Get(ctx, idOrName)
	if err != nil {
		return nil, err
	}
	if src.Spec == nil || src.Layer == "" {
		return nil, fmt.Errorf("sandbox %s was made by an older daemon and cannot be forked: %w", src.ID, errdefs.ErrFailedPrecondition)
	}
	if src.Ephemeral {
		return nil, fmt.Errorf("sandbox %s belongs to a build and cannot be forked: %w", src.ID, errdefs.ErrFailedPrecondition)
	}
	rt, err := m.runtime(src.Runtime)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", src.ID, err)
	}
	var ck Checkpointer
	if req.MemoryState {
		var why string
		if ck, why = checkpointer(rt, src.Runtime); ck == nil {
			if _, typed := rt.(Checkpointer); typed {
				return nil, fmt.Errorf("fork %s: %s; fork without memory state to copy the files: %w", src.ID, why, ErrCheckpoint)
			}
			return nil, fmt.Errorf("runtime %s cannot copy memory state: %w", src.Runtime, errdefs.ErrNotImplemented)
		}
		if m.cfg.StateDir == "" {
			return nil, fmt.Errorf("fork: the manager has no state directory: %w", errdefs.ErrFailedPrecondition)
		}
	}
	ids := make([]string, n)
	for i := range ids {
		if ids[i], err = newID(); err != nil {
			return nil, err
		}
	}
	// Phase 1, with the source's lock: copy its disk (and memory).
	mounts := make([][]mount.Mount, n)
	var ckDir string
	var egressUsed int64
	start := time.Now()
	src, err = m.withBox(ctx, src.ID, func(ctx context.Context, b *box, rec Record) (Record, error) {
		if req.MemoryState && rec.State == StateSuspended {
			return rec, errState(rec, "resume it to fork its memory state")
		}
		thaw, err := m.freeze(ctx, rec)
		if err != nil {
			return rec, err
		}
		defer thaw()
		if ec, ok := m.cfg.Network.(EgressCounter); ok && rec.Network != nil {
			// The copies start with what the source has used of its
			// egress budget: a fork is no way around the budget.
			if egressUsed, err = ec.EgressUsed(rec.ID); err != nil {
				return rec, fmt.Errorf("fork %s: egress count: %w", rec.ID, err)
			}
		}
		lctx := context.WithoutCancel(ctx)
		for i, id := range ids {
			mounts[i], err = m.cfg.Layers.Prepare(lctx, id, rec.Layer, PrepareOpts{FromActive: rec.ID})
			if err != nil {
				for _, done := range ids[:i] {
					_ = m.cfg.Layers.Remove(lctx, done)
				}
				return rec, fmt.Errorf("fork %s: copy disk: %w", rec.ID, err)
			}
		}
		if ck != nil {
			ckDir = filepath.Join(m.cfg.StateDir, "checkpoints", "fork-"+ids[0])
			// Not "if err := ...": the checkpoint's error must reach the
			// check below.
			if err = os.MkdirAll(ckDir, 0o700); err == nil {
				m.cfg.Agents.Drop(rec.AgentAddr)
				err = ck.Checkpoint(ctx, rec.ID, ckDir, true)
			}
			if err != nil {
				_ = os.RemoveAll(ckDir)
				for _, id := range ids {
					_ = m.cfg.Layers.Remove(lctx, id)
				}
				return rec, fmt.Errorf("fork %s: %w", rec.ID, err)
			}
		}
		return rec, nil
	})
	if err != nil {
		return nil, err
	}
	copied := time.Since(start)
	if ckDir != "" {
		defer os.RemoveAll(ckDir)
	}
	// Phase 2: start the copies, in parallel.
	out := make([]Record, n)
	var g errgroup.Group
	g.SetLimit(4)
	for i, id := range ids {
		g.Go(func() error {
			p := plan{rec: cloneRecord(src), spec: *src.Spec, image: Image{TopLayer: src.Layer}}
			p.rec.Name, p.rec.Pool, p.rec.Suspended, p.rec.ProcessesLost, p.rec.Origin = "", "", nil, nil, src.ID
			p.rec.Deadline = time.Time{}
			if p.rec.E2B != nil && p.rec.E2B.TrafficToken != "" {
				// Its own, as its access token (build makes that).
				p.rec.E2B.TrafficToken = rand.Text()
			}
			if len(req.Labels) > 0 {
				if p.rec.Labels == nil {
					p.rec.Labels = map[string]string{}
				}
				for k, v := range req.Labels {
					p.rec.Labels[k] = v
				}
			}
			if p.rec.Network != nil {
				set := *p.rec.Network
				p.rec.Network = &set
			}
			rec, err := m.build(ctx, p, id, buildOpts{mounts: mounts[i], restore: ckDir, egressUsed: egressUsed})
			out[i] = rec
			return err
		})
	}
	if err := g.Wait(); err != nil {
		for _, r := range out {
			if r.ID != "" {
				_ = m.Delete(context.WithoutCancel(ctx), r.ID, true)
			}
		}
		return nil, fmt.Errorf("fork %s: %w", src.ID, err)
	}
	log.G(ctx).Info("sandbox forked", "sandbox", src.ID, "count", n, "memory", req.MemoryState, "copy", copied.Round(time.Microsecond), "took", time.Since(start).Round(time.Microsecond))
	return out, nil
}

// reapIdle suspends or removes the sandboxes idle for longer than their
// idle timeout, until stop is closed. Idle means no activity recorded
// (touch), no CPU use over IdleCPUPercent near the end of the idle period
// and no running command (RunningProcesses).
func (m *Manager) reapIdle(ctx context.Context, stop <-chan struct{}) {
	t := time.NewTicker(idleTick)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	busy := map[string]bool{}
	samples := map[string]cpuSample{} // guarded by busyMu
	var busyMu sync.Mutex
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		now := time.Now().UnixNano()
		type check struct {
			rec Record
			box *box
			due bool
		}
		var checks []check
		m.mu.Lock()
		for _, b := range m.boxes {
			r := b.rec
			if r.IdleTimeout <= 0 || r.Pool != "" || b.gone || (r.State != StateRunning && r.State != StatePaused) {
				continue
			}
			idle := now - b.active.Load()
			if due := idle >= int64(r.IdleTimeout); due || m.cfg.IdleCPUPercent > 0 && idle >= int64(r.IdleTimeout-cpuWindow(r.IdleTimeout)) {
				checks = append(checks, check{rec: cloneRecord(r), box: b, due: due})
			}
		}
		m.mu.Unlock()
		busyMu.Lock()
		for id := range samples {
			if _, err := m.lookup(id); err != nil {
				delete(samples, id)
			}
		}
		busyMu.Unlock()
		for _, c := range checks {
			busyMu.Lock()
			if busy[c.rec.ID] {
				busyMu.Unlock()
				continue
			}
			busy[c.rec.ID] = true
			busyMu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { busyMu.Lock(); delete(busy, c.rec.ID); busyMu.Unlock() }()
				sample := func(s *cpuSample, set bool) (cpuSample, bool) {
					busyMu.Lock()
					defer busyMu.Unlock()
					if set {
						if s == nil {
							delete(samples, c.rec.ID)
						} else {
							samples[c.rec.ID] = *s
						}
						return cpuSample{}, false
					}
					old, ok := samples[c.rec.ID]
					return old, ok
				}
				if m.busyInBox(ctx, c.rec, c.box, c.due, sample) || !c.due {
					return
				}
				m.idle(ctx, c.rec)
			}()
		}
	}
}

// cpuSample is a box's CPU time at a moment (unix nanoseconds).
type cpuSample struct {
	at  int64
	cpu uint64
}

// cpuWindow is how long before its idle timeout a box's CPU use starts
// being measured: a quarter of the timeout, at most 30 s.
func cpuWindow(timeout time.Duration) time.Duration {
	return min(timeout/4, 30*time.Second)
}

// busyInBox reports whether the box r is busy inside although nothing
// touched it: CPU use above IdleCPUPercent since the sample taken before
// its idle timeout, or a running command. It records that as activity.
// Before the timeout (due unset) it only takes the sample; a due box
// without a sample gets one and is checked again at a later tick.
func (m *Manager) busyInBox(ctx context.Context, r Record, b *box, due bool, sample func(*cpuSample, bool) (cpuSample, bool)) bool {
	if m.cfg.IdleCPUPercent > 0 {
		now := time.Now().UnixNano()
		old, ok := sample(nil, false)
		fresh := ok && old.at >= b.active.Load()
		switch u, err := m.Usage(ctx, r.ID); {
		case err != nil:
			// No CPU figure (a runtime without one): only the other
			// activity counts.
			log.G(ctx).Debug("idle check: no cpu usage", "sandbox", r.ID, "error", err)
		case !fresh:
			sample(&cpuSample{at: now, cpu: u.CPUNanos}, true)
			return due // measure over a while before deciding
		case !due:
			return false
		case now-old.at < int64(cpuWindow(r.IdleTimeout))/2:
			return true // too short a while to tell: look again
		default:
			sample(nil, true)
			if pct := float64(u.CPUNanos-old.cpu) * 100 / float64(now-old.at); u.CPUNanos >= old.cpu && pct > m.cfg.IdleCPUPercent {
				log.G(ctx).Debug("idle timeout: the box is busy", "sandbox", r.ID, "cpu_percent", pct)
				b.touch()
				return true
			}
		}
	}
	if !due || m.cfg.RunningProcesses == nil || r.State != StateRunning {
		return false // a paused box's agent cannot answer, nor run anything
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := m.cfg.RunningProcesses(actx, r.AgentAddr)
	if err != nil {
		log.G(ctx).Debug("idle check: list the agent's processes", "sandbox", r.ID, "error", err)
		return false
	}
	if n > 0 {
		log.G(ctx).Debug("idle timeout: commands run in the box", "sandbox", r.ID, "processes", n)
		b.touch()
		return true
	}
	return false
}

// idle applies r's idle action.
func (m *Manager) idle(ctx context.Context, r Record) {
	log.G(ctx).Info("sandbox idle", "sandbox", r.ID, "idle_timeout", r.IdleTimeout, "action", r.IdleAction)
	ctx = withReason(ctx, "idle")
	if r.IdleAction == IdleRemove {
		if err := m.Delete(ctx, r.ID, true); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).Error("remove idle sandbox", "sandbox", r.ID, "error", err)
		}
		return
	}
	_, err := m.Suspend(ctx, r.ID, SuspendRequest{})
	if err != nil && (errors.Is(err, ErrCheckpoint) || errdefs.IsFailedPrecondition(err)) {
		log.G(ctx).Warn("idle sandbox: memory state cannot be saved, keeping its file system only", "sandbox", r.ID, "error", err)
		_, err = m.Suspend(ctx, r.ID, SuspendRequest{FilesystemOnly: true})
	}
	if err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).Error("suspend idle sandbox", "sandbox", r.ID, "error", err)
		if b, lerr := m.lookup(r.ID); lerr == nil {
			b.touch() // try again after another idle period
		}
	}
}

// dirSize is the bytes of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// flushDir flushes the regular files directly in dir, then dir itself, to
// the host's disk.
func flushDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		if err := atomicfile.Sync(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return atomicfile.SyncDir(dir)
}

// pauseAtDeadline pauses sandbox id when its deadline comes with
// TimeoutPause, and clears the deadline: a paused box waits until it is
// resumed (whose caller sets a new deadline) or removed.
func (m *Manager) pauseAtDeadline(ctx context.Context, id string) {
	log.G(ctx).Info("sandbox timeout reached, pausing")
	ctx = withReason(ctx, "timeout")
	_, err := m.withBox(ctx, id, func(ctx context.Context, b *box, rec Record) (Record, error) {
		rec.Deadline = time.Time{}
		if err := m.save(ctx, b, rec); err != nil {
			return rec, err
		}
		return rec, nil
	})
	if err == nil {
		_, err = m.Pause(ctx, id)
	}
	if err != nil && !errdefs.IsNotFound(err) {
		log.G(ctx).Error("pause timed-out sandbox", "error", err)
	}
}
