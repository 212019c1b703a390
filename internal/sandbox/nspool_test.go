package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
	"github.com/corral-sandbox/corral/internal/userns"
)

// nsRuntime is the fake runtime with user namespaces that makes
// namespaces ahead (sandbox.NSPreparer).
type nsRuntime struct {
	*sandboxtest.Runtime
	mu      sync.Mutex
	ready   map[string]*userns.Range // made ahead, not taken
	taken   map[string]string        // sandbox id -> key
	removed []string                 // keys deleted untaken
	// hold, when set, blocks every PrepareNS after the first until it
	// is closed.
	hold  chan struct{}
	calls int
}

func (r *nsRuntime) UserNS() bool { return true }

func (r *nsRuntime) PrepareNS(ctx context.Context, key string, u *userns.Range) error {
	r.mu.Lock()
	r.calls++
	block := r.hold != nil && r.calls > 1
	r.mu.Unlock()
	if block {
		<-r.hold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready[key] = u
	return nil
}

func (r *nsRuntime) Create(ctx context.Context, id string, spec *sandbox.Spec) error {
	if key := spec.Premade; key != "" {
		r.mu.Lock()
		u, ok := r.ready[key]
		if !ok || u == nil || spec.UserNS == nil || *u != *spec.UserNS {
			r.mu.Unlock()
			return fmt.Errorf("create %s with made-ahead %s: ready %v, range %v; spec range %v", id, key, ok, u, spec.UserNS)
		}
		delete(r.ready, key)
		r.taken[id] = key
		r.mu.Unlock()
	}
	return r.Runtime.Create(ctx, id, spec)
}

func (r *nsRuntime) Delete(ctx context.Context, id string) error {
	r.mu.Lock()
	if _, ok := r.ready[id]; ok {
		delete(r.ready, id)
		r.removed = append(r.removed, id)
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	return r.Runtime.Delete(ctx, id)
}

// readyKeys returns the keys made ahead and not taken.
func (r *nsRuntime) readyKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.ready))
}

// waitReady waits until n namespaces are ready.
func (r *nsRuntime) waitReady(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if k := r.readyKeys(); len(k) == n {
			return k
		} else if time.Now().After(deadline) {
			t.Fatalf("ready namespaces = %v; want %d", k, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestNSPool(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	rt := &nsRuntime{Runtime: env.Runtime, ready: map[string]*userns.Range{}, taken: map[string]string{}}
	ids := userns.NewAllocator(userns.Pool{Start: 1 << 20, Count: 16 * userns.Size})
	cfg := env.Config()
	cfg.Runtimes["fake"] = rt
	cfg.IDRanges = ids
	cfg.NSPoolSize = 2
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatalf("NewManager() = %v", err)
	}
	defer m.Close()
	if err := m.Start(ctx, nil); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	before := rt.waitReady(t, 2)
	if got := ids.InUse(); !slices.Equal(got, before) {
		t.Fatalf("id ranges in use = %v; want the made-ahead keys %v", got, before)
	}

	rec, err := m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatalf("Create() = %v", err)
	}
	key := rt.taken[rec.ID]
	if !slices.Contains(before, key) {
		t.Fatalf("Create() took %q; want one of %v", key, before)
	}
	if rec.Spec == nil || rec.Spec.UserNS == nil {
		t.Fatalf("Create().Spec.UserNS = nil; want the made-ahead range")
	}
	if rec.Spec.Premade != "" {
		t.Errorf("Create().Spec.Premade = %q; want it cleared (a resume or fork from the record must not take it again)", rec.Spec.Premade)
	}
	// A filesystem-only resume runs the box again from its record.
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: true}); err != nil {
		t.Fatalf("Suspend(filesystem only) = %v", err)
	}
	if _, err := m.Resume(ctx, rec.ID); err != nil {
		t.Fatalf("Resume() = %v", err)
	}
	after := rt.waitReady(t, 2) // refilled
	if got, want := ids.InUse(), slices.Sorted(slices.Values(append([]string{rec.ID}, after...))); !slices.Equal(got, want) {
		t.Fatalf("id ranges in use after create = %v; want %v (the range moved to the box)", got, want)
	}

	// Another runtime makes its own.
	other, err := m.Create(ctx, sandbox.CreateRequest{Runtime: "other"})
	if err != nil {
		t.Fatalf("Create(other) = %v", err)
	}
	if _, ok := rt.taken[other.ID]; ok {
		t.Errorf("Create(other) took made-ahead namespaces of runtime fake")
	}

	// A create that fails before the runtime takes them over removes
	// them and frees their range.
	env.Layers.PrepareFn = func(ctx context.Context, key, parent string, opts sandbox.PrepareOpts) error {
		return errors.New("no disk")
	}
	ready := rt.waitReady(t, 2)
	if _, err := m.Create(ctx, sandbox.CreateRequest{}); err == nil {
		t.Fatalf("Create() with a failing layer store = nil; want an error")
	}
	env.Layers.PrepareFn = nil
	rt.mu.Lock()
	removed := slices.Clone(rt.removed)
	rt.mu.Unlock()
	if len(removed) != 1 || !slices.Contains(ready, removed[0]) {
		t.Fatalf("after a failed create, removed = %v; want one of %v", removed, ready)
	}
	for _, o := range ids.InUse() {
		if o == removed[0] {
			t.Errorf("after a failed create, %s still holds an id range", o)
		}
	}

	if err := m.Delete(ctx, rec.ID, false); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if k := rt.readyKeys(); len(k) > 0 {
		t.Errorf("after Close, ready namespaces = %v; want none", k)
	}
	if got := ids.InUse(); len(got) > 0 {
		t.Errorf("after Close, id ranges in use = %v; want none", got)
	}
}

// TestNSPoolSparesRanges: with few id ranges left the pool takes none, so
// that every range can still go to a box (here: a made-ahead namespace
// that is slow to make would otherwise hold one of the last three).
func TestNSPoolSparesRanges(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	rt := &nsRuntime{Runtime: env.Runtime, ready: map[string]*userns.Range{}, taken: map[string]string{}, hold: make(chan struct{})}
	ids := userns.NewAllocator(userns.Pool{Start: 1 << 20, Count: 3 * userns.Size})
	cfg := env.Config()
	cfg.Runtimes["fake"] = rt
	cfg.IDRanges = ids
	cfg.NSPoolSize = 2
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatalf("NewManager() = %v", err)
	}
	defer m.Close()
	defer close(rt.hold)
	if err := m.Start(ctx, nil); err != nil {
		t.Fatalf("Start() = %v", err)
	}
	rt.waitReady(t, 1)
	for i := range 3 {
		if _, err := m.Create(ctx, sandbox.CreateRequest{}); err != nil {
			t.Fatalf("Create() #%d of 3 with 3 id ranges = %v; want the pool to leave them to the boxes", i+1, err)
		}
	}
}
