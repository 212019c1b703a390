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
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Runtime is an in-memory sandbox.Runtime that is also a Statser and a
// Lister.
type Runtime struct {
	CreateFn func(ctx context.Context, id string, spec *sandbox.Spec) error
	StartFn  func(ctx context.Context, id string) error
	DeleteFn func(ctx context.Context, id string) error
	StateFn  func(ctx context.Context, id string) (sandbox.State, error)
	// Addr returns the agent address of id ("fake://<id>" if nil).
	Addr func(id string) string

	mu sync.Mutex
	// boxes are the sandboxes by ID; guarded by mu.
	boxes map[string]*Box
}

// Box is one sandbox of the fake Runtime.
type Box struct {
	Spec   sandbox.Spec
	Status sandbox.Status
}

var (
	_ sandbox.Runtime = (*Runtime)(nil)
	_ sandbox.Statser = (*Runtime)(nil)
	_ sandbox.Lister  = (*Runtime)(nil)
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
	return sandbox.State{Status: b.Status, Pid: 1}, nil
}

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
	return sandbox.Usage{MemoryBytes: 1 << 20, MemoryLimitBytes: uint64(b.Spec.Resources.MemoryBytes), Pids: 1}, nil
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

// LayerStore is an in-memory sandbox.LayerStore and LayerLister.
type LayerStore struct {
	PrepareFn func(ctx context.Context, key, parent string, opts sandbox.PrepareOpts) error
	RemoveFn  func(ctx context.Context, key string) error

	mu sync.Mutex
	// active maps a writable layer's key to its parent; guarded by mu.
	active map[string]string
}

var (
	_ sandbox.LayerStore  = (*LayerStore)(nil)
	_ sandbox.LayerLister = (*LayerStore)(nil)
)

// Prepare implements sandbox.LayerStore.
func (l *LayerStore) Prepare(ctx context.Context, key, parent string, opts sandbox.PrepareOpts) ([]mount.Mount, error) {
	if l.PrepareFn != nil {
		if err := l.PrepareFn(ctx, key, parent, opts); err != nil {
			return nil, err
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active == nil {
		l.active = map[string]string{}
	}
	if _, ok := l.active[key]; ok {
		return nil, fmt.Errorf("layer %s: %w", key, errdefs.ErrAlreadyExists)
	}
	l.active[key] = parent
	return []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=/fake/" + parent, "upperdir=/fake/" + key}}}, nil
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

// Put adds a writable layer as if a previous daemon had made it.
func (l *LayerStore) Put(key, parent string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active == nil {
		l.active = map[string]string{}
	}
	l.active[key] = parent
}

// Keys returns the writable layers' keys, sorted.
func (l *LayerStore) Keys() []string {
	k, _ := l.Active(context.Background())
	return k
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
// images "host" and "busybox" exist).
type Env struct {
	Runtime *Runtime
	Other   *Runtime
	Layers  *LayerStore
	Images  *ImageStore
	Store   *Store
	// Ready is the agent readiness func; it calls ReadyFn when set.
	ReadyFn func(ctx context.Context, addr string) error
}

// NewEnv returns fresh fakes.
func NewEnv() *Env {
	return &Env{
		Runtime: &Runtime{},
		Other:   &Runtime{},
		Layers:  &LayerStore{},
		Images: NewImageStore(
			sandbox.Image{Name: "host", TopLayer: "host-layer", Builtin: true, Env: []string{"PATH=/usr/bin:/bin"}},
			sandbox.Image{Name: "busybox", TopLayer: "busybox-layer", Builtin: true},
		),
		Store: &Store{},
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
		AgentReady: func(ctx context.Context, addr string) error {
			if e.ReadyFn != nil {
				return e.ReadyFn(ctx, addr)
			}
			return nil
		},
		AgentBinary: "/usr/local/bin/corral",
		MaxCPUs:     8,
	}
}

// Empty reports what is left in the fakes, or "" when nothing is.
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
	if len(left) == 0 {
		return ""
	}
	return fmt.Sprint(left)
}
