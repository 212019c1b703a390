package sandboxtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// CheckpointFile is the file the fake Runtime's Checkpoint writes into its
// directory.
const CheckpointFile = "fake-checkpoint.json"

// checkpoint is the content of CheckpointFile.
type checkpoint struct {
	ID     string `json:"id"`
	Memory int    `json:"memory"`
}

// WriteCheckpoint writes into dir (made if missing) what the fake
// Runtime's Checkpoint would write for a box of that memory, as if a
// previous daemon had checkpointed it.
func WriteCheckpoint(dir, id string, memory int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(checkpoint{ID: id, Memory: memory})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, CheckpointFile), b, 0o600)
}

// Pause implements sandbox.Pauser: a running or paused box becomes paused.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.setPaused(ctx, id, true)
}

// Unpause implements sandbox.Pauser: a paused or running box becomes
// running.
func (r *Runtime) Unpause(ctx context.Context, id string) error {
	return r.setPaused(ctx, id, false)
}

func (r *Runtime) setPaused(ctx context.Context, id string, paused bool) error {
	if r.PauseFn != nil {
		if err := r.PauseFn(ctx, id, paused); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	switch {
	case !ok:
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	case b.Status != sandbox.StatusRunning && b.Status != sandbox.StatusPaused:
		return fmt.Errorf("sandbox %s is %s: %w", id, b.Status, errdefs.ErrFailedPrecondition)
	}
	b.Status = sandbox.StatusRunning
	if paused {
		b.Status = sandbox.StatusPaused
	}
	return nil
}

// Sync implements sandbox.Syncer; it counts the calls (see Syncs).
func (r *Runtime) Sync(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.boxes[id]; !ok {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	if r.syncs == nil {
		r.syncs = map[string]int{}
	}
	r.syncs[id]++
	return nil
}

// Syncs returns how many times Sync was called for id.
func (r *Runtime) Syncs(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.syncs[id]
}

// Checkpoint implements sandbox.Checkpointer: it writes the box's Memory
// into dir/CheckpointFile and, unless leaveRunning, stops the box. A box
// with NoCheckpoint set fails with an error wrapping sandbox.ErrCheckpoint
// and keeps running.
func (r *Runtime) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error {
	if r.CheckpointFn != nil {
		if err := r.CheckpointFn(ctx, id, dir, leaveRunning); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	switch {
	case !ok:
		return fmt.Errorf("checkpoint %s: %w", id, errdefs.ErrNotFound)
	case b.Status != sandbox.StatusRunning && b.Status != sandbox.StatusPaused:
		return fmt.Errorf("checkpoint %s: sandbox is %s: %w", id, b.Status, errdefs.ErrFailedPrecondition)
	case b.NoCheckpoint != "":
		return fmt.Errorf("checkpoint %s: %s: %w", id, b.NoCheckpoint, sandbox.ErrCheckpoint)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("checkpoint %s: directory %s missing: %w", id, dir, errdefs.ErrInvalidArgument)
	}
	if err := WriteCheckpoint(dir, id, b.Memory); err != nil {
		return fmt.Errorf("checkpoint %s: %w", id, err)
	}
	if !leaveRunning {
		b.Status = sandbox.StatusStopped
	}
	return nil
}

// EndStray implements sandbox.Checkpointer: it calls EndStrayFn if set.
func (r *Runtime) EndStray(ctx context.Context, id string) error {
	if r.EndStrayFn != nil {
		return r.EndStrayFn(ctx, id)
	}
	return nil
}

// Restore implements sandbox.Checkpointer: it creates box id from spec,
// running, with the Memory saved in dir.
func (r *Runtime) Restore(ctx context.Context, id string, spec *sandbox.Spec, dir string) error {
	if r.RestoreFn != nil {
		if err := r.RestoreFn(ctx, id, spec, dir); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, CheckpointFile))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("restore %s: no checkpoint in %s: %w", id, dir, sandbox.ErrCheckpoint)
	} else if err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	var c checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("restore %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if _, ok := r.boxes[id]; ok {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	r.boxes[id] = &Box{Spec: *spec, Status: sandbox.StatusRunning, Memory: c.Memory, Restored: dir}
	return nil
}

// Update calls fn on box id under the Runtime's lock (to change its
// Memory, Status or NoCheckpoint); false when there is no such box.
func (r *Runtime) Update(id string, fn func(b *Box)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	if ok {
		fn(b)
	}
	return ok
}

// SnapshotStore is a sandbox.SnapshotStore that puts snapshots into an
// ImageStore.
type SnapshotStore struct {
	Images *ImageStore
	// AddFn is called first by AddSnapshot.
	AddFn func(ctx context.Context, img sandbox.Image) error
}

var _ sandbox.SnapshotStore = (*SnapshotStore)(nil)

// AddSnapshot implements sandbox.SnapshotStore.
func (s *SnapshotStore) AddSnapshot(ctx context.Context, img sandbox.Image) error {
	if s.AddFn != nil {
		if err := s.AddFn(ctx, img); err != nil {
			return err
		}
	}
	s.Images.mu.Lock()
	defer s.Images.mu.Unlock()
	if _, ok := s.Images.images[img.Name]; ok {
		return fmt.Errorf("image %s: %w", img.Name, errdefs.ErrAlreadyExists)
	}
	s.Images.images[img.Name] = img
	return nil
}

// Networker is an in-memory sandbox.Networker that records the settings
// each box is attached with. Wire it with cfg.Network = n.
type Networker struct {
	// CA is the CA certificate Prepare returns (nil: none, as for a box
	// without secrets).
	CA []byte

	mu sync.Mutex
	// attached holds the settings of attached boxes, netns the network
	// namespace each was attached in; prepared the boxes prepared and not
	// purged. Guarded by mu.
	attached map[string]netpolicy.Settings
	netns    map[string]string
	prepared map[string]bool
	// used is each box's egress count; guarded by mu.
	used map[string]int64
}

var (
	_ sandbox.Networker     = (*Networker)(nil)
	_ sandbox.EgressCounter = (*Networker)(nil)
)

// EgressUsed implements sandbox.EgressCounter.
func (n *Networker) EgressUsed(id string) (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.used[id], nil
}

// SetEgressUsed implements sandbox.EgressCounter.
func (n *Networker) SetEgressUsed(id string, used int64) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.used == nil {
		n.used = map[string]int64{}
	}
	n.used[id] = used
	return nil
}

// Prepare implements sandbox.Networker; it returns n.CA.
func (n *Networker) Prepare(id string, set netpolicy.Settings) ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.prepared == nil {
		n.prepared = map[string]bool{}
	}
	n.prepared[id] = true
	return n.CA, nil
}

// Attach implements sandbox.Networker.
func (n *Networker) Attach(ctx context.Context, id, netns string, pid int, set netpolicy.Settings) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.attached == nil {
		n.attached, n.netns = map[string]netpolicy.Settings{}, map[string]string{}
	}
	if _, ok := n.attached[id]; !ok {
		if netns == "" {
			return fmt.Errorf("attach %s: no network namespace given: %w", id, errdefs.ErrInvalidArgument)
		}
		n.netns[id] = netns
	}
	n.attached[id] = set
	return nil
}

// NetNS returns the network namespace box id was attached in, "" when it
// is not attached.
func (n *Networker) NetNS(id string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.attached[id]; !ok {
		return ""
	}
	return n.netns[id]
}

// Detach implements sandbox.Networker.
func (n *Networker) Detach(id string, purge bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.attached, id)
	if purge {
		delete(n.prepared, id)
		delete(n.used, id)
	}
	return nil
}

// Attached implements sandbox.Networker.
func (n *Networker) Attached(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.attached[id]
	return ok
}

// Settings returns the settings box id is attached with, and whether it is.
func (n *Networker) Settings(id string) (netpolicy.Settings, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	set, ok := n.attached[id]
	return set, ok
}

// IDs returns the attached boxes' IDs, sorted.
func (n *Networker) IDs() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(maps.Keys(n.attached))
}
