package oci

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/runtime/runtimetest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestPrepareNS: namespaces made ahead are listed, removed by Delete of
// their key, and taken over whole by a Create that names them (the box
// runs in that very network namespace).
func TestPrepareNS(t *testing.T) {
	ctx := testutil.Context(t)
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sleep", "1000000"))
	id := runtimetest.ID(t)
	key, drop := "premade-"+id, "premade-drop-"+id
	for _, k := range []string{key, drop} {
		if err := r.PrepareNS(ctx, k, nil); err != nil {
			t.Fatalf("PrepareNS(%q) = %v", k, err)
		}
		t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), k) })
	}
	var st unix.Stat_t
	if err := unix.Stat(r.netnsPath(key), &st); err != nil {
		t.Fatalf("stat the made-ahead netns: %v", err)
	}
	if ids, err := r.List(ctx); err != nil || !slices.Contains(ids, key) {
		t.Fatalf("List() = %v, %v; want it to hold %q (a restart removes orphans it lists)", ids, err, key)
	}

	dropDir := r.Dir(drop)
	if err := r.Delete(ctx, drop); err != nil {
		t.Fatalf("Delete(%q) = %v", drop, err)
	}
	if _, err := os.Stat(dropDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Delete(%q): %v; want its directory gone", drop, err)
	}
	if m, err := mount.Under(r.MountInfoPath(), dropDir); err != nil || len(m) > 0 {
		t.Errorf("after Delete(%q): mounts %v, %v; want none", drop, m, err)
	}

	spec := testSpec(t, defaultResources)
	spec.Premade = key
	if err := r.Create(ctx, id, spec); err != nil {
		t.Fatalf("Create with Premade = %v", err)
	}
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), id) })
	if _, err := os.Stat(r.Dir(key)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after Create: %s: %v; want it renamed to the box's", r.Dir(key), err)
	}
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("Start = %v", err)
	}
	s, err := r.State(ctx, id)
	if err != nil || s.Pid == 0 {
		t.Fatalf("State = %+v, %v; want running", s, err)
	}
	var boxNS unix.Stat_t
	if err := unix.Stat(filepath.Join("/proc", strconv.Itoa(s.Pid), "ns", "net"), &boxNS); err != nil {
		t.Fatal(err)
	}
	if boxNS.Ino != st.Ino || boxNS.Dev != st.Dev {
		t.Errorf("box's network namespace = %d:%d; want the made-ahead %d:%d", boxNS.Dev, boxNS.Ino, st.Dev, st.Ino)
	}
	dir := r.Dir(id)
	if err := r.Delete(ctx, id); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if m, err := mount.Under(r.MountInfoPath(), dir); err != nil || len(m) > 0 {
		t.Errorf("after Delete: mounts %v, %v; want none", m, err)
	}
}
