// Package sandboxtest holds in-memory fakes of the interfaces the sandbox
// Manager consumes (Runtime, LayerStore, ImageStore, Store). Each fake keeps
// its state in maps that tests inspect, and has optional function fields
// (XxxFn) that are called first to inject failures: a non-nil error from one
// is returned before the fake changes any state.
package sandboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Runtime is an in-memory sandbox.Runtime that is also a Statser, a
// Lister, a Pauser, a Syncer and a Checkpointer (see lifecycle.go).
type Runtime struct {
	CreateFn func(ctx context.Context, id string, spec *sandbox.Spec) error
	StartFn  func(ctx context.Context, id string) error
	DeleteFn func(ctx context.Context, id string) error
	StateFn  func(ctx context.Context, id string) (sandbox.State, error)
	// PauseFn is called first by Pause and by Unpause (paused tells which).
	PauseFn func(ctx context.Context, id string, paused bool) error
	// CheckpointFn and RestoreFn are called first by Checkpoint and Restore.
	CheckpointFn func(ctx context.Context, id, dir string, leaveRunning bool) error
	RestoreFn    func(ctx context.Context, id string, spec *sandbox.Spec, dir string) error
	// EndStrayFn, when set, is what EndStray does.
	EndStrayFn func(ctx context.Context, id string) error
	// Addr returns the agent address of id ("fake://<id>" if nil).
	Addr func(id string) string

	mu sync.Mutex
	// boxes are the sandboxes by ID; guarded by mu.
	boxes map[string]*Box
	// syncs counts Sync calls by ID; guarded by mu.
	syncs map[string]int
}

// Box is one sandbox of the fake Runtime.
type Box struct {
	Spec   sandbox.Spec
	Status sandbox.Status
	// Memory stands for the state of the box's processes: a fresh Start
	// has 0, Checkpoint saves it and Restore brings it back. Tests change
	// it with Update.
	Memory int
	// NoCheckpoint, when set, makes Checkpoint fail with an error that
	// wraps sandbox.ErrCheckpoint and gives it as the reason; the box keeps
	// running.
	NoCheckpoint string
	// Restored is the checkpoint directory the box was restored from, ""
	// when its agent was started fresh.
	Restored string
	// OOMKills is the Usage's OOM kill counter; tests change it with
	// Update.
	OOMKills uint64
	// BusySince, when set, makes Usage report the CPU time of one CPU
	// fully used since then.
	BusySince time.Time
}

var (
	_ sandbox.Runtime      = (*Runtime)(nil)
	_ sandbox.Statser      = (*Runtime)(nil)
	_ sandbox.Lister       = (*Runtime)(nil)
	_ sandbox.Pauser       = (*Runtime)(nil)
	_ sandbox.Syncer       = (*Runtime)(nil)
	_ sandbox.Checkpointer = (*Runtime)(nil)
)

func (r *Runtime) init() {
	if r.boxes == nil {
		r.boxes = map[string]*Box{}
	}
}

// Create implements sandbox.Runtime.
func (r *Runtime) Create(ctx context.Context, id string, spec *sandbox.Spec) error {
	if r.CreateFn != nil {
		if err := r.CreateFn(ctx, id, spec); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	if _, ok := r.boxes[id]; ok {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	r.boxes[id] = &Box{Spec: *spec, Status: sandbox.StatusCreated}
	return nil
}

// Start implements sandbox.Runtime.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if r.StartFn != nil {
		if err := r.StartFn(ctx, id); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	switch {
	case !ok:
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	case b.Status == sandbox.StatusRunning:
		return fmt.Errorf("sandbox %s is running: %w", id, errdefs.ErrFailedPrecondition)
	}
	b.Status = sandbox.StatusRunning
	return nil
}

// Stop implements sandbox.Runtime.
func (r *Runtime) Stop(ctx context.Context, id string, grace time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	if !ok {
		return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	b.Status = sandbox.StatusStopped
	return nil
}

// Delete implements sandbox.Runtime.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if r.DeleteFn != nil {
		if err := r.DeleteFn(ctx, id); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.boxes, id)
	return nil
}

// State implements sandbox.Runtime.
func (r *Runtime) State(ctx context.Context, id string) (sandbox.State, error) {
	if r.StateFn != nil {
		return r.StateFn(ctx, id)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	if !ok {
		return sandbox.State{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	st := sandbox.State{Status: b.Status, Pid: 1}
	if b.Status == sandbox.StatusRunning || b.Status == sandbox.StatusPaused {
		st.NetNS = NetNS(id)
	}
	return st, nil
}

// NetNS is the network namespace the fake runtime reports for a running
// or paused sandbox id (State.NetNS).
func NetNS(id string) string { return "/run/sandboxtest/" + id + "/netns" }

// AgentAddr implements sandbox.Runtime.
func (r *Runtime) AgentAddr(id string) string {
	if r.Addr != nil {
		return r.Addr(id)
	}
	return "fake://" + id
}

// Usage implements sandbox.Statser.
func (r *Runtime) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	if !ok {
		return sandbox.Usage{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	u := sandbox.Usage{MemoryBytes: 1 << 20, MemoryLimitBytes: uint64(b.Spec.Resources.MemoryBytes), Pids: 1, OOMKills: b.OOMKills}
	if !b.BusySince.IsZero() {
		u.CPUNanos = uint64(time.Since(b.BusySince))
	}
	return u, nil
}

// List implements sandbox.Lister.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.boxes)), nil
}

// Put adds a sandbox as if a previous daemon had made it.
func (r *Runtime) Put(id string, b Box) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.init()
	r.boxes[id] = &b
}

// Get returns a copy of the sandbox id.
func (r *Runtime) Get(id string) (Box, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, ok := r.boxes[id]
	if !ok {
		return Box{}, false
	}
	return *b, true
}

// IDs returns the sandboxes' IDs, sorted.
func (r *Runtime) IDs() []string {
	ids, _ := r.List(context.Background())
	return ids
}

// LayerStore is an in-memory sandbox.LayerStore, LayerLister,
// LayerMounter and DiskSaver. Each writable layer and saved disk holds a
// map of "files" (name to content) that tests write with WriteFile and read
// with Files: a layer prepared FromDisk or FromActive starts with a copy of
// its source's files and size.
type LayerStore struct {
	PrepareFn func(ctx context.Context, key, parent string, opts sandbox.PrepareOpts) error
	RemoveFn  func(ctx context.Context, key string) error
	// SaveDiskFn is called first by SaveDisk.
	SaveDiskFn func(ctx context.Context, key, name string) error

	mu sync.Mutex
	// active are the writable layers by key; guarded by mu.
	active map[string]*layer
	// disks are the saved disks by name; guarded by mu.
	disks map[string]*savedDisk
	// flushed are the keys FlushDisk was called with, in order; guarded
	// by mu.
	flushed []string
}

// layer is a writable layer of the fake LayerStore.
type layer struct {
	parent    string
	diskBytes int64
	files     map[string]string
}

// savedDisk is a saved disk of the fake LayerStore.
type savedDisk struct {
	info  sandbox.SavedDisk
	files map[string]string
}

var (
	_ sandbox.LayerStore   = (*LayerStore)(nil)
	_ sandbox.LayerLister  = (*LayerStore)(nil)
	_ sandbox.LayerMounter = (*LayerStore)(nil)
	_ sandbox.DiskSaver    = (*LayerStore)(nil)
	_ sandbox.DiskFlusher  = (*LayerStore)(nil)
)

// initLocked makes the maps; the caller holds l.mu.
func (l *LayerStore) initLocked() {
	if l.active == nil {
		l.active = map[string]*layer{}
	}
	if l.disks == nil {
		l.disks = map[string]*savedDisk{}
	}
}

func layerMounts(key, parent string) []mount.Mount {
	return []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=/fake/" + parent, "upperdir=/fake/" + key}}}
}

// Prepare implements sandbox.LayerStore. With opts.FromDisk or
// opts.FromActive the source must exist, sit on parent, and opts.DiskBytes
// must be zero or the source's size.
func (l *LayerStore) Prepare(ctx context.Context, key, parent string, opts sandbox.PrepareOpts) ([]mount.Mount, error) {
	if l.PrepareFn != nil {
		if err := l.PrepareFn(ctx, key, parent, opts); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initLocked()
	if _, ok := l.active[key]; ok {
		return nil, fmt.Errorf("layer %s: %w", key, errdefs.ErrAlreadyExists)
	}
	ly := &layer{parent: parent, diskBytes: opts.DiskBytes, files: map[string]string{}}
	var (
		srcName   string
		srcParent string
		srcBytes  int64
		srcFiles  map[string]string
	)
	switch {
	case opts.FromDisk != "" && opts.FromActive != "":
		return nil, fmt.Errorf("layer %s: both FromDisk and FromActive: %w", key, errdefs.ErrInvalidArgument)
	case opts.FromDisk != "":
		d, ok := l.disks[opts.FromDisk]
		if !ok {
			return nil, fmt.Errorf("saved disk %s: %w", opts.FromDisk, errdefs.ErrNotFound)
		}
		srcName, srcParent, srcBytes, srcFiles = opts.FromDisk, d.info.Parent, d.info.DiskBytes, d.files
	case opts.FromActive != "":
		a, ok := l.active[opts.FromActive]
		if !ok {
			return nil, fmt.Errorf("layer %s: %w", opts.FromActive, errdefs.ErrNotFound)
		}
		srcName, srcParent, srcBytes, srcFiles = opts.FromActive, a.parent, a.diskBytes, a.files
	}
	if srcName != "" {
		if srcParent != parent {
			return nil, fmt.Errorf("layer %s: source %s sits on %q, not %q: %w", key, srcName, srcParent, parent, errdefs.ErrInvalidArgument)
		}
		if opts.DiskBytes != 0 && opts.DiskBytes != srcBytes {
			return nil, fmt.Errorf("layer %s: disk size %d differs from source %s's %d: %w", key, opts.DiskBytes, srcName, srcBytes, errdefs.ErrInvalidArgument)
		}
		ly.diskBytes = srcBytes
		ly.files = maps.Clone(srcFiles)
	}
	l.active[key] = ly
	return layerMounts(key, parent), nil
}

// Remove implements sandbox.LayerStore.
func (l *LayerStore) Remove(ctx context.Context, key string) error {
	if l.RemoveFn != nil {
		if err := l.RemoveFn(ctx, key); err != nil {
			return err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.active, key)
	return nil
}

// Active implements sandbox.LayerLister.
func (l *LayerStore) Active(ctx context.Context) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.active)), nil
}

// Mounts implements sandbox.LayerMounter.
func (l *LayerStore) Mounts(ctx context.Context, key string) ([]mount.Mount, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ly, ok := l.active[key]
	if !ok {
		return nil, fmt.Errorf("layer %s: %w", key, errdefs.ErrNotFound)
	}
	return layerMounts(key, ly.parent), nil
}

// FlushDisk implements sandbox.DiskFlusher: it records key.
func (l *LayerStore) FlushDisk(ctx context.Context, key string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.active[key]; !ok {
		return fmt.Errorf("layer %s: %w", key, errdefs.ErrNotFound)
	}
	l.flushed = append(l.flushed, key)
	return nil
}

// Flushed returns the keys FlushDisk was called with, in order.
func (l *LayerStore) Flushed() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.flushed)
}

// SaveDisk implements sandbox.DiskSaver: the saved disk gets a copy of
// the layer's files.
func (l *LayerStore) SaveDisk(ctx context.Context, key, name string) (sandbox.SavedDisk, error) {
	if l.SaveDiskFn != nil {
		if err := l.SaveDiskFn(ctx, key, name); err != nil {
			return sandbox.SavedDisk{}, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initLocked()
	ly, ok := l.active[key]
	if !ok {
		return sandbox.SavedDisk{}, fmt.Errorf("layer %s: %w", key, errdefs.ErrNotFound)
	}
	if _, ok := l.disks[name]; ok {
		return sandbox.SavedDisk{}, fmt.Errorf("saved disk %s: %w", name, errdefs.ErrAlreadyExists)
	}
	var used int64
	for _, v := range ly.files {
		used += int64(len(v))
	}
	d := &savedDisk{
		info: sandbox.SavedDisk{
			Name: name, Parent: ly.parent, DiskBytes: ly.diskBytes, UsedBytes: used,
			Created: time.Now().UTC(), Reflinked: true,
		},
		files: maps.Clone(ly.files),
	}
	l.disks[name] = d
	return d.info, nil
}

// RemoveDisk implements sandbox.DiskSaver.
func (l *LayerStore) RemoveDisk(ctx context.Context, name string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.disks, name)
	return nil
}

// Disks implements sandbox.DiskSaver.
func (l *LayerStore) Disks(ctx context.Context) ([]sandbox.SavedDisk, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]sandbox.SavedDisk, 0, len(l.disks))
	for _, n := range slices.Sorted(maps.Keys(l.disks)) {
		out = append(out, l.disks[n].info)
	}
	return out, nil
}

// Put adds a writable layer as if a previous daemon had made it.
func (l *LayerStore) Put(key, parent string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.initLocked()
	l.active[key] = &layer{parent: parent, files: map[string]string{}}
}

// Keys returns the writable layers' keys, sorted.
func (l *LayerStore) Keys() []string {
	k, _ := l.Active(context.Background())
	return k
}

// WriteFile sets file name of writable layer key to data, as a process of
// its sandbox would; errdefs.ErrNotFound when there is no such layer.
func (l *LayerStore) WriteFile(key, name, data string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	ly, ok := l.active[key]
	if !ok {
		return fmt.Errorf("layer %s: %w", key, errdefs.ErrNotFound)
	}
	ly.files[name] = data
	return nil
}

// Files returns a copy of the files of writable layer key, and whether it
// exists.
func (l *LayerStore) Files(key string) (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ly, ok := l.active[key]
	if !ok {
		return nil, false
	}
	return maps.Clone(ly.files), true
}

// DiskBytes returns the disk size writable layer key was prepared with (a
// copy's is its source's), and whether it exists.
func (l *LayerStore) DiskBytes(key string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ly, ok := l.active[key]
	if !ok {
		return 0, false
	}
	return ly.diskBytes, true
}

// DiskFiles returns a copy of the files of saved disk name, and whether it
// exists.
func (l *LayerStore) DiskFiles(name string) (map[string]string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.disks[name]
	if !ok {
		return nil, false
	}
	return maps.Clone(d.files), true
}

// ImageStore is an in-memory image store.
type ImageStore struct {
	mu sync.Mutex
	// images by name; guarded by mu.
	images map[string]sandbox.Image
}

var _ sandbox.ImageStore = (*ImageStore)(nil)

// NewImageStore returns a store holding images.
func NewImageStore(images ...sandbox.Image) *ImageStore {
	s := &ImageStore{images: map[string]sandbox.Image{}}
	for _, i := range images {
		s.images[i.Name] = i
	}
	return s
}

// Get returns the image name.
func (s *ImageStore) Get(ctx context.Context, name string) (sandbox.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.images[name]
	if !ok {
		return sandbox.Image{}, fmt.Errorf("image %s: %w", name, errdefs.ErrNotFound)
	}
	return i, nil
}

// List returns every image, sorted by name.
func (s *ImageStore) List(ctx context.Context) ([]sandbox.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]sandbox.Image, 0, len(s.images))
	for _, n := range slices.Sorted(maps.Keys(s.images)) {
		out = append(out, s.images[n])
	}
	return out, nil
}

// Put adds or replaces an image.
func (s *ImageStore) Put(i sandbox.Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[i.Name] = i
}

// Import makes image name from the bytes of r (not parsed: the fake only
// records the size); errdefs.ErrAlreadyExists when name exists.
func (s *ImageStore) Import(ctx context.Context, name string, r io.Reader) (sandbox.Image, error) {
	n, err := io.Copy(io.Discard, r)
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("read image %s: %w", name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.images[name]; ok {
		return sandbox.Image{}, fmt.Errorf("image %s: %w", name, errdefs.ErrAlreadyExists)
	}
	i := sandbox.Image{Name: name, TopLayer: name + "-layer", Size: n, Created: time.Now().UTC()}
	s.images[name] = i
	return i, nil
}

// Remove deletes the image name; NotFound when missing, FailedPrecondition
// for a built-in image.
func (s *ImageStore) Remove(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.images[name]
	switch {
	case !ok:
		return fmt.Errorf("image %s: %w", name, errdefs.ErrNotFound)
	case i.Builtin:
		return fmt.Errorf("image %s is built in: %w", name, errdefs.ErrFailedPrecondition)
	}
	delete(s.images, name)
	return nil
}

// Store is an in-memory sandbox.Store that stores JSON copies, as the real
// one does.
type Store struct {
	PutFn    func(ctx context.Context, rec *sandbox.Record) error
	DeleteFn func(ctx context.Context, id string) error

	mu sync.Mutex
	// recs are JSON records by ID; guarded by mu.
	recs map[string][]byte
}

var _ sandbox.Store = (*Store)(nil)

// PutSandbox implements sandbox.Store.
func (s *Store) PutSandbox(ctx context.Context, rec *sandbox.Record) error {
	if s.PutFn != nil {
		if err := s.PutFn(ctx, rec); err != nil {
			return err
		}
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recs == nil {
		s.recs = map[string][]byte{}
	}
	s.recs[rec.ID] = b
	return nil
}

// DeleteSandbox implements sandbox.Store.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	if s.DeleteFn != nil {
		if err := s.DeleteFn(ctx, id); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.recs, id)
	return nil
}

// ListSandboxes implements sandbox.Store.
func (s *Store) ListSandboxes(ctx context.Context) ([]*sandbox.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sandbox.Record
	for _, id := range slices.Sorted(maps.Keys(s.recs)) {
		var r sandbox.Record
		if err := json.Unmarshal(s.recs[id], &r); err != nil {
			return nil, err
		}
		out = append(out, &r)
	}
	return out, nil
}

// IDs returns the recorded IDs, sorted.
func (s *Store) IDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.recs))
}

// Env is a ready-to-use set of fakes plus the sandbox.ManagerConfig that
// wires them ("fake" is the default runtime, "other" a second one; the
// images "host" and "busybox" exist; snapshots go into Images).
type Env struct {
	Runtime   *Runtime
	Other     *Runtime
	Layers    *LayerStore
	Images    *ImageStore
	Store     *Store
	Snapshots *SnapshotStore
	// Agents answers the Manager's calls to agents.
	Agents *Agents
	// StateDir becomes ManagerConfig.StateDir: set it (to t.TempDir())
	// to allow suspend with memory state and fork --memory-state.
	StateDir string
}

// Agents is an in-memory sandbox.Agents. It records the Init calls, the
// drops and the files written, keeps those files for ReadFile, and calls
// the XxxFn fields when set (their error is returned).
type Agents struct {
	ReadyFn     func(ctx context.Context, addr string) error
	InitFn      func(ctx context.Context, addr string, env []string, user, workdir string) error
	ReadFileFn  func(ctx context.Context, addr, path string) ([]byte, error)
	WriteFileFn func(ctx context.Context, addr, path string, data []byte) error
	WarmFn      func(ctx context.Context, addr string) error

	mu sync.Mutex
	// inits are the Init calls, drops the Drop addresses, in order;
	// files the files written by address and path. Guarded by mu.
	inits []InitCall
	drops []string
	files map[[2]string][]byte
}

var _ sandbox.Agents = (*Agents)(nil)

// InitCall is one call of Agents.Init.
type InitCall struct {
	Addr    string
	Env     []string
	User    string
	Workdir string
}

func (a *Agents) Ready(ctx context.Context, addr string) error {
	if a.ReadyFn != nil {
		return a.ReadyFn(ctx, addr)
	}
	return nil
}

func (a *Agents) Init(ctx context.Context, addr string, env []string, user, workdir string) error {
	a.mu.Lock()
	a.inits = append(a.inits, InitCall{Addr: addr, Env: slices.Clone(env), User: user, Workdir: workdir})
	a.mu.Unlock()
	if a.InitFn != nil {
		return a.InitFn(ctx, addr, env, user, workdir)
	}
	return nil
}

func (a *Agents) ReadFile(ctx context.Context, addr, path string) ([]byte, error) {
	if a.ReadFileFn != nil {
		return a.ReadFileFn(ctx, addr, path)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.files[[2]string{addr, path}]
	if !ok {
		return nil, fmt.Errorf("read %s: %w", path, errdefs.ErrNotFound)
	}
	return slices.Clone(b), nil
}

func (a *Agents) WriteFile(ctx context.Context, addr, path string, data []byte) error {
	if a.WriteFileFn != nil {
		if err := a.WriteFileFn(ctx, addr, path, data); err != nil {
			return err
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.files == nil {
		a.files = map[[2]string][]byte{}
	}
	a.files[[2]string{addr, path}] = slices.Clone(data)
	return nil
}

func (a *Agents) Warm(ctx context.Context, addr string) error {
	if a.WarmFn != nil {
		return a.WarmFn(ctx, addr)
	}
	return nil
}

func (a *Agents) Drop(addr string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.drops = append(a.drops, addr)
}

// File returns the file written at path in the box of the agent at addr.
func (a *Agents) File(addr, path string) ([]byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b, ok := a.files[[2]string{addr, path}]
	return b, ok
}

// InitCalls returns the Init calls so far, in order.
func (a *Agents) InitCalls() []InitCall {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.inits)
}

// Drops returns the addresses given to Drop so far, in order.
func (a *Agents) Drops() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.drops)
}

// NewEnv returns fresh fakes.
func NewEnv() *Env {
	images := NewImageStore(
		sandbox.Image{Name: "host", TopLayer: "host-layer", Builtin: true, Env: []string{"PATH=/usr/bin:/bin"}},
		sandbox.Image{Name: "busybox", TopLayer: "busybox-layer", Builtin: true},
	)
	return &Env{
		Runtime:   &Runtime{},
		Other:     &Runtime{},
		Layers:    &LayerStore{},
		Images:    images,
		Store:     &Store{},
		Snapshots: &SnapshotStore{Images: images},
		Agents:    &Agents{},
	}
}

// Config returns a ManagerConfig that uses the fakes.
func (e *Env) Config() sandbox.ManagerConfig {
	return sandbox.ManagerConfig{
		Runtimes:       map[string]sandbox.Runtime{"fake": e.Runtime, "other": e.Other},
		DefaultRuntime: "fake",
		Layers:         e.Layers,
		Images:         e.Images,
		Store:          e.Store,
		Agents:         e.Agents,
		AgentBinary:    "/usr/local/bin/corral",
		MaxCPUs:        8,
		StateDir:       e.StateDir,
		Snapshots:      e.Snapshots,
	}
}

// Empty reports what is left in the fakes (and in StateDir's checkpoints),
// or "" when nothing is. Saved disks are not counted: snapshots outlive
// their sandboxes.
func (e *Env) Empty() string {
	var left []string
	if ids := e.Runtime.IDs(); len(ids) > 0 {
		left = append(left, fmt.Sprintf("runtime sandboxes %v", ids))
	}
	if ids := e.Other.IDs(); len(ids) > 0 {
		left = append(left, fmt.Sprintf("other runtime sandboxes %v", ids))
	}
	if k := e.Layers.Keys(); len(k) > 0 {
		left = append(left, fmt.Sprintf("layers %v", k))
	}
	if ids := e.Store.IDs(); len(ids) > 0 {
		left = append(left, fmt.Sprintf("records %v", ids))
	}
	if e.StateDir != "" {
		ents, _ := os.ReadDir(filepath.Join(e.StateDir, "checkpoints"))
		var names []string
		for _, d := range ents {
			names = append(names, d.Name())
		}
		if len(names) > 0 {
			left = append(left, fmt.Sprintf("checkpoints %v", names))
		}
	}
	if len(left) == 0 {
		return ""
	}
	return fmt.Sprint(left)
}
