package sandbox_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// fakeVolumes resolves the volumes it lists to a path each; the path
// carries a generation, as the volume store's does per daemon process.
type fakeVolumes struct {
	names []string
	gen   int
}

func (f *fakeVolumes) Path(name string) (string, error) {
	if !slices.Contains(f.names, name) {
		return "", fmt.Errorf("volume %q not found: %w", name, errdefs.ErrNotFound)
	}
	return fmt.Sprintf("/proc/1/fd/%d-%s", f.gen, name), nil
}

func newVolumeManager(t *testing.T, env *sandboxtest.Env, vols *fakeVolumes) *sandbox.Manager {
	t.Helper()
	cfg := env.Config()
	cfg.Volumes = vols
	m, err := sandbox.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestCreateWithVolumes(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	env.StateDir = t.TempDir()
	vols := &fakeVolumes{names: []string{"data", "cache"}, gen: 1}
	m := newVolumeManager(t, env, vols)
	rec, err := m.Create(ctx, sandbox.CreateRequest{Volumes: []sandbox.VolumeMount{
		{Name: "data", Target: "/data"}, {Name: "cache", Target: "/var/cache/x", Readonly: true},
	}})
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	hasBinds := func(id string, gen int) {
		t.Helper()
		b, ok := env.Runtime.Get(id)
		if !ok {
			t.Fatalf("no runtime box %s", id)
		}
		want := []sandbox.Bind{
			{Source: fmt.Sprintf("/proc/1/fd/%d-data", gen), Target: "/data"},
			{Source: fmt.Sprintf("/proc/1/fd/%d-cache", gen), Target: "/var/cache/x", Readonly: true},
		}
		for _, w := range want {
			if !slices.ContainsFunc(b.Spec.Binds, func(b sandbox.Bind) bool {
				return b.Source == w.Source && b.Target == w.Target && b.Readonly == w.Readonly
			}) {
				t.Errorf("box %s binds = %+v; want %+v among them", id, b.Spec.Binds, w)
			}
		}
	}
	hasBinds(rec.ID, 1)
	if len(rec.Volumes) != 2 {
		t.Errorf("record volumes = %+v; want both", rec.Volumes)
	}
	// The recorded spec holds no volume path: a resume under a new
	// daemon resolves the volumes again.
	got, _ := m.Get(ctx, rec.ID)
	for _, b := range got.Spec.Binds {
		if strings.HasPrefix(b.Source, "/proc/1/fd/") {
			t.Errorf("recorded spec binds %s", b.Source)
		}
	}
	if _, err := m.Suspend(ctx, rec.ID, sandbox.SuspendRequest{FilesystemOnly: true}); err != nil {
		t.Fatal(err)
	}
	vols.gen = 2
	if _, err := m.Resume(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	hasBinds(rec.ID, 2)

	// A fork mounts the same volumes.
	forks, err := m.Fork(ctx, rec.ID, sandbox.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hasBinds(forks[0].ID, 2)
	users := m.VolumeUsers()
	if want := []string{forks[0].ID, rec.ID}; !slices.Equal(users["data"], sortedIDs(want)) {
		t.Errorf("VolumeUsers()[data] = %v; want %v", users["data"], sortedIDs(want))
	}

	// Removal is refused while a sandbox mounts the volume.
	removed := false
	rm := func(context.Context) error { removed = true; return nil }
	err = m.RemoveVolume(ctx, "data", rm)
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), rec.ID) || removed {
		t.Errorf("RemoveVolume(used) = %v (removed %v); want failed precondition naming %s", err, removed, rec.ID)
	}
	for _, id := range []string{rec.ID, forks[0].ID} {
		if err := m.Delete(ctx, id, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.RemoveVolume(ctx, "data", rm); err != nil || !removed {
		t.Errorf("RemoveVolume(unused) = %v (removed %v); want it removed", err, removed)
	}
}

func sortedIDs(ids []string) []string {
	slices.Sort(ids)
	return ids
}

// TestCreateRefusesBadVolumes: bad mounts fail naming the field, before
// anything is made.
func TestCreateRefusesBadVolumes(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	m := newVolumeManager(t, env, &fakeVolumes{names: []string{"data"}})
	for _, tc := range []struct {
		vols []sandbox.VolumeMount
		want string
		code func(error) bool
	}{
		{[]sandbox.VolumeMount{{Name: "../x", Target: "/data"}}, "volumes[0].name", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "data"}}, "volumes[0].target", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/"}}, "volumes[0].target", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/a/../b"}}, "volumes[0].target", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/proc/x"}}, "reserved", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/.corral"}}, "reserved", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/etc"}}, "reserved", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/a"}, {Name: "data", Target: "/a"}}, "volumes[1].target", errdefs.IsInvalidArgument},
		{[]sandbox.VolumeMount{{Name: "data", Target: "/a"}, {Name: "nope", Target: "/b"}}, "volumes[1].name", errdefs.IsNotFound},
	} {
		_, err := m.Create(ctx, sandbox.CreateRequest{Volumes: tc.vols})
		if err == nil || !tc.code(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(volumes %+v) = %v; want an error naming %q", tc.vols, err, tc.want)
		}
	}
	if left := env.Empty(); left != "" {
		t.Errorf("after refused creates, left: %s", left)
	}
}

func TestCreateWithVolumesWithoutStore(t *testing.T) {
	env := sandboxtest.NewEnv()
	m := newManager(t, env)
	_, err := m.Create(testutil.Context(t), sandbox.CreateRequest{Volumes: []sandbox.VolumeMount{{Name: "data", Target: "/data"}}})
	if !errdefs.IsNotImplemented(err) {
		t.Errorf("Create with volumes, no volume store = %v; want not implemented", err)
	}
}

// TestImageVolumes: an image's spec volumes are mounted unless the request
// names its own, and such an image gets no warm pool.
func TestImageVolumes(t *testing.T) {
	ctx := testutil.Context(t)
	env := sandboxtest.NewEnv()
	host, err := env.Images.Get(ctx, "host")
	if err != nil {
		t.Fatal(err)
	}
	img := host
	img.Name, img.Volumes = "withvol", []sandbox.VolumeMount{{Name: "data", Target: "/data", Readonly: true}}
	env.Images.Put(img)
	m := newVolumeManager(t, env, &fakeVolumes{names: []string{"data", "other"}, gen: 1})
	rec, err := m.Create(ctx, sandbox.CreateRequest{Image: "withvol"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Volumes, img.Volumes) {
		t.Errorf("Create(withvol).Volumes = %+v; want the image's %+v", rec.Volumes, img.Volumes)
	}
	own := []sandbox.VolumeMount{{Name: "other", Target: "/o"}}
	rec, err = m.Create(ctx, sandbox.CreateRequest{Image: "withvol", Volumes: own})
	if err != nil || !slices.Equal(rec.Volumes, own) {
		t.Errorf("Create(withvol, own volumes).Volumes = %+v, %v; want only %+v", rec.Volumes, err, own)
	}
	if _, err := m.SetPool(ctx, sandbox.PoolSpec{Image: "withvol", Size: 1}); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "volumes") {
		t.Errorf("SetPool(withvol) = %v; want refused, naming the volumes", err)
	}
}
