package image

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	ggtar "github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// ociLayer returns an image layer holding entries (an uncompressed tar,
// served gzip-compressed by ggcr).
func ociLayer(t *testing.T, entries ...tarEntry) v1.Layer {
	t.Helper()
	data := tarball(t, false, entries...)
	l, err := ggtar.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testImage is a two-layer image: the second layer deletes a file of the
// first (an OCI whiteout) and adds one.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image,
		ociLayer(t,
			tarEntry{name: "etc/", typ: tar.TypeDir},
			tarEntry{name: "etc/old", body: "old", typ: tar.TypeReg},
			tarEntry{name: "bin/tool", body: strings.Repeat("tool", 4096), typ: tar.TypeReg}),
		ociLayer(t,
			tarEntry{name: "etc/.wh.old", typ: tar.TypeReg},
			tarEntry{name: "etc/new", body: "new", typ: tar.TypeReg}),
	)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, v1.Config{Env: []string{"PATH=/bin", "LANG=C"}, WorkingDir: "/work", User: "1000"})
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// serveRegistry runs an in-process registry holding img as team/app:1 and
// returns its host. cut, when it returns true for a request, breaks that
// response half-way.
func serveRegistry(t *testing.T, img v1.Image, cut func(*http.Request) bool) string {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cut != nil && cut(r) {
			rec := httptest.NewRecorder()
			reg.ServeHTTP(rec, r)
			body := rec.Body.Bytes()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(body[:len(body)/2])
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
				}
			}
			return
		}
		reg.ServeHTTP(w, r)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
	srv.Start()
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	ref, err := name.ParseReference(host + "/team/app:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push: %v", err)
	}
	return host
}

func TestPull(t *testing.T) {
	testutil.RequiresRoot(t) // whiteouts are character devices
	ctx := testutil.Context(t)
	s, layers := newStores(t)
	img := testImage(t)
	lays, _ := img.Layers()
	second, _ := lays[1].Digest()
	var cuts atomic.Int32
	host := serveRegistry(t, img, func(r *http.Request) bool {
		// Break the second layer's blob, once.
		return strings.HasSuffix(r.URL.Path, "/blobs/"+second.String()) && r.Method == http.MethodGet && cuts.Add(1) == 1
	})
	ref := host + "/team/app:1"

	var statuses []string
	progress := func(p Progress) {
		if len(statuses) == 0 || statuses[len(statuses)-1] != p.Status {
			statuses = append(statuses, p.Status)
		}
	}
	if _, err := s.Pull(ctx, ref, PullOptions{}, progress); err == nil {
		t.Fatal("Pull through a broken connection succeeded")
	}
	if _, err := s.Get(ctx, ref); !errdefs.IsNotFound(err) {
		t.Errorf("Get after an interrupted pull = %v; want NotFound (nothing half-registered)", err)
	}
	if ls, _ := layers.Layers(ctx); len(ls) != 1 {
		t.Errorf("%d layers after an interrupted pull; want the first one, kept for the retry", len(ls))
	}

	statuses = nil
	got, err := s.Pull(ctx, ref, PullOptions{}, progress)
	if err != nil {
		t.Fatalf("Pull again = %v", err)
	}
	if !strings.Contains(strings.Join(statuses, ","), "exists") || !strings.Contains(strings.Join(statuses, ","), "pulling") {
		t.Errorf("progress statuses %v; want the first layer to exist and the second to be pulled", statuses)
	}
	if got.Layers != 2 || got.Workdir != "/work" || got.User != "1000" || !strings.Contains(strings.Join(got.Env, " "), "LANG=C") {
		t.Errorf("pulled image = %+v", got)
	}
	top := layerFile(t, layers, got, "etc/old")
	if fi, err := os.Lstat(top); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("etc/old in the top layer = %v, %v; want an overlay whiteout", fi, err)
	}
	info, err := s.Inspect(ctx, ref)
	must(t, err)
	if info.Source != "registry" || info.Digest == "" {
		t.Errorf("Inspect = %+v", info)
	}
	want, _ := img.ConfigFile()
	var sum int64
	for i, l := range info.LayerInfo {
		if l.DiffID != want.RootFS.DiffIDs[i].String() {
			t.Errorf("layer %d diff ID %s; want %s", i, l.DiffID, want.RootFS.DiffIDs[i])
		}
		sum += l.Size
	}
	// The image's size is its layers' together, each counted once, in
	// Inspect, List and the pull's own answer.
	top1, _ := layers.LayerSize(info.LayerInfo[1].Key)
	if info.Size != sum || sum <= top1 {
		t.Errorf("Inspect size = %d; want the sum of its 2 layers %d (top alone %d)", info.Size, sum, top1)
	}
	if got.Size != sum {
		t.Errorf("Pull size = %d; want %d", got.Size, sum)
	}
	all, err := s.List(ctx)
	must(t, err)
	for _, l := range all {
		if l.TopLayer == info.ID && l.Size != sum {
			t.Errorf("List size of %s = %d; want %d", l.Name, l.Size, sum)
		}
	}

	// Pulling again fetches nothing.
	statuses = nil
	if _, err := s.Pull(ctx, ref, PullOptions{Name: "app"}, progress); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(statuses, ","), "pulling") {
		t.Errorf("a second pull fetched layers again: %v", statuses)
	}
	if _, err := s.Pull(ctx, host+"/team/missing:1", PullOptions{}, nil); !errdefs.IsNotFound(err) {
		t.Errorf("Pull(missing) = %v; want NotFound", err)
	}
}

func TestLoad(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := context.Background()
	s, layers := newStores(t)
	img := testImage(t)

	// docker save output.
	file := filepath.Join(t.TempDir(), "app.tar")
	tag, err := name.NewTag("example.org/team/app:2")
	must(t, err)
	must(t, ggtar.WriteToFile(file, tag, img))
	got, err := s.Load(ctx, file, LoadOptions{Name: "saved"}, nil)
	if err != nil {
		t.Fatalf("Load(docker save) = %v", err)
	}
	if got.Layers != 2 {
		t.Errorf("loaded %d layers; want 2", got.Layers)
	}
	if b, err := os.ReadFile(layerFile(t, layers, got, "etc/new")); err != nil || string(b) != "new" {
		t.Errorf("etc/new = %q, %v", b, err)
	}

	// An OCI layout: the same layers, so nothing new is stored.
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, p.AppendImage(img))
	before, _ := layers.Layers(ctx)
	fromLayout, err := s.Load(ctx, dir, LoadOptions{Name: "laid-out"}, nil)
	if err != nil {
		t.Fatalf("Load(layout) = %v", err)
	}
	if fromLayout.TopLayer != got.TopLayer {
		t.Errorf("the same image from a layout has top layer %s; want %s", fromLayout.TopLayer, got.TopLayer)
	}
	if after, _ := layers.Layers(ctx); len(after) != len(before) {
		t.Errorf("loading known layers stored %d new ones", len(after)-len(before))
	}
	garbage := filepath.Join(t.TempDir(), "garbage.tar")
	must(t, os.WriteFile(garbage, bytes.Repeat([]byte("junk"), 1000), 0o644))
	if _, err := s.Load(ctx, garbage, LoadOptions{Name: "junk"}, nil); err == nil {
		t.Error("Load(garbage) succeeded")
	}
}

// TestLoadLabel: a load that names its archive with a label (the daemon's
// "the uploaded archive") never shows the file's path in its errors: the
// daemon's temporary file is a name the user never gave.
func TestLoadLabel(t *testing.T) {
	ctx := testutil.Context(t)
	s, _ := newStores(t)
	dir := t.TempDir()
	garbage := filepath.Join(dir, "corral-load-123456")
	must(t, os.WriteFile(garbage, bytes.Repeat([]byte("junk"), 1000), 0o644))
	saved := filepath.Join(dir, "corral-load-654321")
	tag, err := name.NewTag("example.org/team/app:2")
	must(t, err)
	must(t, ggtar.WriteToFile(saved, tag, testImage(t)))
	const label = "the uploaded archive"
	for _, tc := range []struct {
		name, file string
		o          LoadOptions
		want       string
	}{
		{"not a tar", garbage, LoadOptions{Label: label}, label + " is not a valid tar archive"},
		{"no such image", saved, LoadOptions{Label: label, Ref: "nope:1"}, `no image "nope:1" in ` + label},
		{"missing", filepath.Join(dir, "corral-load-gone"), LoadOptions{Label: label}, "load " + label + ": no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Load(ctx, tc.file, tc.o, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "corral-load-") {
				t.Errorf("Load(%s) = %v; want an error saying %q, without the file's path", tc.name, err, tc.want)
			}
		})
	}
	// Without a label, the path names the archive, as the user gave it.
	if _, err := s.Load(ctx, garbage, LoadOptions{}, nil); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Errorf("Load(garbage) = %v; want an error naming %s", err, garbage)
	}
}

// TestLoadRefusesTrailingBomb: a layer whose tar archive is followed by a
// long run of bytes (here 8 MiB of zeros, a few KiB once compressed) is
// refused once it passes the bound, and nothing is registered.
func TestLoadRefusesTrailingBomb(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := context.Background()
	s, _ := newStores(t)
	data := append(tarball(t, false, tarEntry{name: "a", body: "a", typ: tar.TypeReg}), make([]byte, 8<<20)...)
	l, err := ggtar.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	must(t, err)
	img, err := mutate.AppendLayers(empty.Image, l)
	must(t, err)
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	must(t, err)
	must(t, p.AppendImage(img))
	_, err = s.Load(ctx, dir, LoadOptions{Name: "bomb"}, nil)
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "after the end of its tar archive") {
		t.Fatalf("Load(layer with 8 MiB after its tar) = %v; want InvalidArgument naming the trailing data", err)
	}
	if _, err := s.Get(ctx, "bomb"); !errdefs.IsNotFound(err) {
		t.Errorf("Get(bomb) after a refused load = %v; want NotFound", err)
	}
}

// TestSourcesKeepSetuid: a pulled, loaded or imported image keeps the
// setuid and setgid bits of its files, as a built one does (sudo in a
// pulled image works where the image's spec allows privilege escalation;
// elsewhere no_new_privs leaves the bits inert). Its layers are stored
// under keys of their own, so that layers stored by older daemons, with
// the bits dropped, are never taken for them.
func TestSourcesKeepSetuid(t *testing.T) {
	ctx := testutil.Context(t)
	s, layers := newStores(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "usr/sudo", Typeflag: tar.TypeReg, Mode: 0o4755, Size: 4},
		{Name: "usr/wall", Typeflag: tar.TypeReg, Mode: 0o2755, Size: 4},
	} {
		must(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, _ = tw.Write([]byte("elf\n"))
		}
	}
	must(t, tw.Close())
	data := buf.Bytes()
	layer, err := ggtar.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	must(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	must(t, err)
	file := filepath.Join(t.TempDir(), "app.tar")
	tag, err := name.NewTag("example.org/team/suid:1")
	must(t, err)
	must(t, ggtar.WriteToFile(file, tag, img))

	loaded, err := s.Load(ctx, file, LoadOptions{Name: "loaded"}, nil)
	if err != nil {
		t.Fatalf("Load = %v", err)
	}
	imported, err := s.ImportTar(ctx, "imported", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("ImportTar = %v", err)
	}
	for _, got := range []sandbox.Image{loaded, imported} {
		for file, want := range map[string]os.FileMode{"usr/sudo": os.ModeSetuid, "usr/wall": os.ModeSetgid} {
			fi, err := os.Lstat(layerFile(t, layers, got, file))
			if err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != want {
				t.Errorf("%s in image %s: mode %v, %v; want the bit %v kept", file, got.Name, fi.Mode(), err, want)
			}
		}
	}
	diffID, err := layer.DiffID()
	must(t, err)
	if loaded.TopLayer == layerKey("", diffID.String()) {
		t.Errorf("loaded layer key %s is the one older daemons stored the layer under, bits dropped", loaded.TopLayer)
	}
}
