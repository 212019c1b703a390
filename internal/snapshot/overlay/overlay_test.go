package overlay

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// newTestStore returns a store whose "mkfs" is true(1) and that has no
// disk volume: Prepare works without touching a real file system or
// mounting anything, as any user.
func newTestStore(t *testing.T, opts ...Opt) *Store {
	t.Helper()
	fake, err := exec.LookPath("true")
	if err != nil {
		t.Fatalf("LookPath(true): %v", err)
	}
	s, err := New(t.TempDir(), append([]Opt{WithPoolSize(0), WithMkfs(fake), WithDiskVolume(DiskVolumeOff), WithLogger(log.G(testutil.Context(t)))}, opts...)...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func writeFile(name, body string) func(string) error {
	return func(dir string) error {
		return os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
}

func TestLayers(t *testing.T) {
	ctx := testutil.Context(t)
	s := newTestStore(t)
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "1")); err != nil {
		t.Fatalf("CreateLayer(base) = %v", err)
	}
	if err := s.CreateLayer(ctx, "top", "base", writeFile("b", "2")); err != nil {
		t.Fatalf("CreateLayer(top) = %v", err)
	}
	for _, tc := range []struct {
		key, parent string
		want        error
	}{
		{"base", "", errdefs.ErrAlreadyExists},
		{"x", "missing", errdefs.ErrNotFound},
		{"../x", "", errdefs.ErrInvalidArgument},
		{"x", "../base", errdefs.ErrInvalidArgument},
	} {
		if err := s.CreateLayer(ctx, tc.key, tc.parent, writeFile("c", "")); !errors.Is(err, tc.want) {
			t.Errorf("CreateLayer(%q, %q) = %v; want %v", tc.key, tc.parent, err, tc.want)
		}
	}
	boom := errors.New("boom")
	if err := s.CreateLayer(ctx, "failed", "", func(string) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("CreateLayer(failed) = %v; want %v", err, boom)
	}
	layers, err := s.Layers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, l := range layers {
		keys = append(keys, l.Key)
	}
	if want := []string{"base", "top"}; !slices.Equal(keys, want) {
		t.Errorf("Layers() = %v; want %v", keys, want)
	}
	if tmp, _ := os.ReadDir(s.path("tmp")); len(tmp) != 0 {
		t.Errorf("tmp holds %d entries after a failed CreateLayer; want 0", len(tmp))
	}
	chain, err := s.Chain("top")
	if want := []string{s.path("layers", "base", "fs"), s.path("layers", "top", "fs")}; err != nil || !slices.Equal(chain, want) {
		t.Errorf("Chain(top) = %v, %v; want %v", chain, err, want)
	}
	if size, err := s.LayerSize("base"); err != nil || size <= 0 {
		t.Errorf("LayerSize(base) = %d, %v; want > 0", size, err)
	}

	if _, err := s.Prepare(ctx, "sb1", "top", sandbox.PrepareOpts{DiskBytes: 16 << 20}); err != nil {
		t.Fatalf("Prepare(sb1) = %v", err)
	}
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"base", "parent of layer top"},
		{"top", "in use by sb1"},
	} {
		err := s.RemoveLayer(ctx, tc.key)
		if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("RemoveLayer(%q) = %v; want FailedPrecondition naming %q", tc.key, err, tc.want)
		}
	}
	if err := s.Remove(ctx, "sb1"); err != nil {
		t.Fatalf("Remove(sb1) = %v", err)
	}
	for _, k := range []string{"top", "base", "base", "never"} {
		if err := s.RemoveLayer(ctx, k); err != nil {
			t.Errorf("RemoveLayer(%q) = %v; want nil", k, err)
		}
	}
	if layers, _ := s.Layers(ctx); len(layers) != 0 {
		t.Errorf("Layers() = %v after removing all; want none", layers)
	}
}

func TestPrepare(t *testing.T) {
	ctx := testutil.Context(t)
	s := newTestStore(t)
	if err := s.CreateLayer(ctx, "base", "", writeFile("a", "1")); err != nil {
		t.Fatal(err)
	}
	ms, err := s.Prepare(ctx, "sb", "base", sandbox.PrepareOpts{})
	if err != nil {
		t.Fatalf("Prepare(sb) = %v", err)
	}
	dir := s.path("active", "sb")
	if len(ms) != 2 || ms[0].Type != "ext4" || ms[0].Source != filepath.Join(dir, "disk.img") ||
		ms[0].Target != filepath.Join(dir, "disk") || !slices.Contains(ms[0].Options, "loop") {
		t.Fatalf("Prepare(sb) disk mount = %+v", ms)
	}
	if lower, _ := ms[1].Option("lowerdir"); ms[1].Type != "overlay" || ms[1].Target != "" || lower != s.path("layers", "base", "fs") {
		t.Errorf("Prepare(sb) overlay mount = %+v", ms[1])
	}
	if fi, err := os.Stat(filepath.Join(dir, "disk.img")); err != nil || fi.Size() != DefaultDiskBytes {
		t.Errorf("Stat(disk.img) = %v, %v; want size %d", fi, err, DefaultDiskBytes)
	}
	if fi, err := os.Stat(filepath.Join(dir, "disk")); err != nil || !fi.IsDir() {
		t.Errorf("Stat(disk) = %v, %v; want a directory", fi, err)
	}
	for _, tc := range []struct {
		key, parent string
		size        int64
		want        error
	}{
		{"sb", "base", 0, errdefs.ErrAlreadyExists},
		{"sb2", "missing", 0, errdefs.ErrNotFound},
		{"sb2", "base", 1 << 20, errdefs.ErrInvalidArgument},
		{"a/b", "base", 0, errdefs.ErrInvalidArgument},
	} {
		if _, err := s.Prepare(ctx, tc.key, tc.parent, sandbox.PrepareOpts{DiskBytes: tc.size}); !errors.Is(err, tc.want) {
			t.Errorf("Prepare(%q, %q, %d) = %v; want %v", tc.key, tc.parent, tc.size, err, tc.want)
		}
	}
	if _, err := os.Lstat(s.path("active", "sb2")); err == nil {
		t.Errorf("a failed Prepare left active/sb2")
	}
	ms, err = s.Prepare(ctx, "empty", "", sandbox.PrepareOpts{})
	if lower, _ := ms[1].Option("lowerdir"); err != nil || lower != s.path("empty") {
		t.Errorf("Prepare(empty, \"\") = lowerdir %q, %v; want %q", lower, err, s.path("empty"))
	}

	// A restarted store lists both and removes them.
	s2, err := New(s.root, WithPoolSize(0), WithDiskVolume(DiskVolumeOff), WithLogger(log.G(ctx)))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	active, err := s2.Active(ctx)
	if want := []string{"empty", "sb"}; err != nil || !slices.Equal(active, want) {
		t.Fatalf("Active() = %v, %v; want %v", active, err, want)
	}
	for _, k := range append(active, "sb", "never") {
		if err := s2.Remove(ctx, k); err != nil {
			t.Errorf("Remove(%q) = %v", k, err)
		}
	}
	if active, _ := s2.Active(ctx); len(active) != 0 {
		t.Errorf("Active() = %v after Remove; want none", active)
	}
}

func TestLongChain(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t)
	parent := ""
	const n = 60
	for i := range n {
		key := fmt.Sprintf("layer-%03d-%s", i, strings.Repeat("x", 60))
		if err := s.CreateLayer(ctx, key, parent, func(string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		parent = key
	}
	ms, err := s.Prepare(ctx, "sb", parent, sandbox.PrepareOpts{})
	if err != nil {
		t.Fatalf("Prepare(60 layers) = %v", err)
	}
	lower, _ := ms[1].Option("lowerdir")
	dirs := strings.Split(lower, ":")
	if len(dirs) != n || len(lower) > maxLowerDirOptionLength {
		t.Fatalf("lowerdir has %d dirs, %d bytes; want %d dirs, <= %d bytes", len(dirs), len(lower), n, maxLowerDirOptionLength)
	}
	chain, _ := s.Chain(parent)
	for i, d := range dirs { // top first; each link leads to its layer
		got, err := filepath.EvalSymlinks(d)
		if want := chain[n-1-i]; err != nil || got != want {
			t.Fatalf("EvalSymlinks(%q) = %q, %v; want %q", d, got, err, want)
		}
	}
}

func TestConfigDiskVolume(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"", true}, {DiskVolumeAuto, true}, {DiskVolumeOff, true}, {"/srv/corral-disks.img", true},
		{"disks.img", false}, {"/srv/../disks.img", false}, {"on", false},
	} {
		c := DefaultConfig()
		c.DiskVolume = tc.v
		if err := c.Validate(); (err == nil) != tc.ok || (err != nil && !errdefs.IsInvalidArgument(err)) {
			t.Errorf("Config{DiskVolume: %q}.Validate() = %v; want ok %v", tc.v, err, tc.ok)
		}
	}
	var o options
	for _, opt := range (Config{DiskVolume: DiskVolumeOff}).Opts() {
		opt(&o)
	}
	if o.diskVolume != DiskVolumeOff {
		t.Errorf("Opts() set disk volume %q; want %q", o.diskVolume, DiskVolumeOff)
	}
	if _, err := New(t.TempDir(), WithDiskVolume("relative")); !errdefs.IsInvalidArgument(err) {
		t.Errorf("New(WithDiskVolume(relative)) = %v; want InvalidArgument", err)
	}
}
