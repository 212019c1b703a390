package meta

import (
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
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
