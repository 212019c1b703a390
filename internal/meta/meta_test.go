package meta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
	"github.com/corral-sandbox/corral/internal/volume"
)

func TestSandboxRecords(t *testing.T) {
	ctx := testutil.Context(t)
	root := t.TempDir()
	db, err := Open(ctx, root)
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	recs := []*sandbox.Record{
		{ID: "aaaaaaaaaaa1", Name: "one", Image: "host", Runtime: "crun", State: sandbox.StateRunning,
			Resources: sandbox.Resources{CPUs: 1.5, MemoryBytes: 1 << 30, DiskBytes: 1 << 33, Pids: 64},
			Env:       map[string]string{"A": "1"}, Labels: map[string]string{"team": "x"},
			Created: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Deadline: time.Date(2025, 1, 2, 4, 4, 5, 0, time.UTC),
			AgentAddr: "unix:///run/corral/aaaaaaaaaaa1/agent.sock"},
		{ID: "aaaaaaaaaaa2", Image: "busybox", Runtime: "runc", State: sandbox.StateCreating},
	}
	for _, r := range recs {
		if err := db.PutSandbox(ctx, r); err != nil {
			t.Fatalf("PutSandbox(%s) = %v", r.ID, err)
		}
	}
	if err := db.PutSandbox(ctx, &sandbox.Record{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("PutSandbox(empty id) = %v; want invalid argument", err)
	}
	// Reopen: records are durable.
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = Open(ctx, root)
	if err != nil {
		t.Fatalf("Open() again = %v", err)
	}
	defer db.Close()
	got, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatalf("ListSandboxes() = %v", err)
	}
	if d := cmp.Diff(recs, got); d != "" {
		t.Errorf("ListSandboxes() mismatch (-want +got):\n%s", d)
	}
	one, err := db.GetSandbox(ctx, "aaaaaaaaaaa1")
	if err != nil || one.Name != "one" {
		t.Errorf("GetSandbox(aaaaaaaaaaa1) = %v, %v; want name one", one, err)
	}
	if err := db.DeleteSandbox(ctx, "aaaaaaaaaaa1"); err != nil {
		t.Fatalf("DeleteSandbox() = %v", err)
	}
	if err := db.DeleteSandbox(ctx, "aaaaaaaaaaa1"); err != nil {
		t.Errorf("DeleteSandbox(missing) = %v; want nil", err)
	}
	if _, err := db.GetSandbox(ctx, "aaaaaaaaaaa1"); !errdefs.IsNotFound(err) {
		t.Errorf("GetSandbox(deleted) = %v; want not found", err)
	}
	got, _ = db.ListSandboxes(ctx)
	if len(got) != 1 || got[0].ID != "aaaaaaaaaaa2" {
		t.Errorf("ListSandboxes() after delete = %v; want [aaaaaaaaaaa2]", got)
	}
}

func TestOpenLocked(t *testing.T) {
	ctx := testutil.Context(t)
	root := t.TempDir()
	db, err := Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := Open(ctx, root); !errdefs.IsUnavailable(err) {
		t.Errorf("Open(locked) = %v; want unavailable", err)
	}
}

// TestGroupCommit queues writes while a commit runs: they land in one
// transaction, and a write that bbolt refuses fails alone.
func TestGroupCommit(t *testing.T) {
	ctx, db := openTemp(t)
	if err := db.PutSandbox(ctx, &sandbox.Record{ID: "bbbbbbbbbbb0", Image: "old"}); err != nil {
		t.Fatal(err)
	}
	groups := holdCommits(db)

	const n = 5
	ids := []string{"bbbbbbbbbbb1", "bbbbbbbbbbb2", "bbbbbbbbbbb3", "bbbbbbbbbbb4", "bbbbbbbbbbb5"}
	errc := make(chan error, n+2)
	for _, id := range ids {
		go func() { errc <- db.PutSandbox(ctx, &sandbox.Record{ID: id, Image: "busybox"}) }()
	}
	go func() { errc <- db.DeleteSandbox(ctx, "bbbbbbbbbbb0") }()
	tooLong := strings.Repeat("k", bolt.MaxKeySize+1)
	badErr := make(chan error, 1)
	go func() { badErr <- db.put(bucketSandboxes, tooLong, 1) }()
	releaseWhenQueued(t, db, n+2)

	for range n + 1 {
		if err := <-errc; err != nil {
			t.Errorf("write in a group with a bad one = %v; want nil", err)
		}
	}
	if err := <-badErr; !errors.Is(err, bolt.ErrKeyTooLarge) {
		t.Errorf("put of a too long key = %v; want %v", err, bolt.ErrKeyTooLarge)
	}
	db.w.mu.Lock()
	if got := db.w.groups - groups; got != 1 {
		t.Errorf("%d groups committed for %d queued writes; want 1", got, n+2)
	}
	db.w.mu.Unlock()
	got, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []string
	for _, r := range got {
		gotIDs = append(gotIDs, r.ID)
	}
	if d := cmp.Diff(ids, gotIDs); d != "" {
		t.Errorf("records after the group (-want +got):\n%s", d)
	}
}

// TestConcurrentWrites has many goroutines write and delete at once; each
// one's writes keep their order.
func TestConcurrentWrites(t *testing.T) {
	ctx, db := openTemp(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				id := fmt.Sprintf("c%02d%09d", g, i)
				if err := db.PutSandbox(ctx, &sandbox.Record{ID: id, Image: "one"}); err != nil {
					t.Error(err)
					return
				}
				if err := db.PutSandbox(ctx, &sandbox.Record{ID: id, Image: "two"}); err != nil {
					t.Error(err)
					return
				}
				if i%2 == 1 {
					if err := db.DeleteSandbox(ctx, id); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	got, err := db.ListSandboxes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 8*10 {
		t.Errorf("%d records; want %d", len(got), 8*10)
	}
	for _, r := range got {
		if r.Image != "two" {
			t.Errorf("record %s has image %q; want the later write's %q", r.ID, r.Image, "two")
		}
	}
}

// TestCommitPanic: a commit that panics fails its whole group, with the
// panic in the leader only, and the next write commits as usual.
func TestCommitPanic(t *testing.T) {
	ctx, db := openTemp(t)
	holdCommits(db)
	type result struct {
		err      error
		panicked bool
	}
	results := make(chan result, 2)
	for _, w := range []*write{
		{bucket: bucketSandboxes, key: "ddddddddddd1", val: []byte(`{"id":"ddddddddddd1"}`)},
		{bucket: []byte("no such bucket"), key: "k", val: []byte("v")}, // Put on a nil bucket panics
	} {
		go func() {
			defer func() {
				if recover() != nil {
					results <- result{panicked: true}
				}
			}()
			results <- result{err: db.write(w)}
		}()
	}
	releaseWhenQueued(t, db, 2)
	var panics, failed int
	for range 2 {
		select {
		case r := <-results:
			if r.panicked {
				panics++
			} else if errors.Is(r.err, errCommitPanicked) {
				failed++
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a write of a group whose commit panicked is still waiting")
		}
	}
	if panics != 1 || failed != 1 {
		t.Errorf("%d writes panicked and %d failed with %v; want 1 and 1", panics, failed, errCommitPanicked)
	}
	if err := db.PutSandbox(ctx, &sandbox.Record{ID: "ddddddddddd2"}); err != nil {
		t.Errorf("PutSandbox() after a panicked commit = %v; want nil", err)
	}
}

// openTemp opens a database in a temporary directory, closed at the end of
// the test.
func openTemp(t *testing.T) (context.Context, *DB) {
	t.Helper()
	ctx := testutil.Context(t)
	db, err := Open(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return ctx, db
}

// holdCommits stands in for a leader whose commit is running, so that
// writes queue; it returns the number of groups committed so far.
func holdCommits(db *DB) int {
	db.w.mu.Lock()
	defer db.w.mu.Unlock()
	db.w.busy = true
	return db.w.groups
}

// releaseWhenQueued waits until n writes are queued behind holdCommits,
// then lets one of them lead their group.
func releaseWhenQueued(t *testing.T, db *DB, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		db.w.mu.Lock()
		queued := len(db.w.pending)
		db.w.mu.Unlock()
		if queued == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued; want %d", queued, n)
		}
		time.Sleep(time.Millisecond)
	}
	db.w.mu.Lock()
	db.w.busy = false
	db.w.cond.Broadcast()
	db.w.mu.Unlock()
}

// TestVolumeRecords: volume records survive a reopen, come in name order
// and go with DeleteVolume.
func TestVolumeRecords(t *testing.T) {
	ctx := testutil.Context(t)
	root := t.TempDir()
	db, err := Open(ctx, root)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	want := []*volume.Volume{
		{Name: "a", SizeBytes: 16 << 20, Created: created, State: volume.StateReady, Labels: map[string]string{"k": "v"}},
		{Name: "b", SizeBytes: 1 << 30, Created: created, State: volume.StateCreating},
	}
	for _, v := range []*volume.Volume{want[1], want[0]} {
		if err := db.PutVolume(ctx, v); err != nil {
			t.Fatalf("PutVolume(%s) = %v", v.Name, err)
		}
	}
	if err := db.PutVolume(ctx, &volume.Volume{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("PutVolume(no name) = %v; want invalid argument", err)
	}
	db.Close()
	if db, err = Open(ctx, root); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.ListVolumes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ListVolumes() after reopen (-want +got):\n%s", diff)
	}
	if err := db.DeleteVolume(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, _ := db.ListVolumes(ctx); len(got) != 1 || got[0].Name != "b" {
		t.Errorf("ListVolumes() after DeleteVolume(a) = %v; want b alone", got)
	}
}
