package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/compression"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// tarFileEntry is one regular file of a test layer.
type tarFileEntry struct{ name, body string }

// tarBytes returns an uncompressed tar holding files.
func tarBytes(t testing.TB, files ...tarFileEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func randomString(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fixture is a test image and the uncompressed tar of each of its layers.
type fixture struct {
	img    v1.Image
	layers [][]byte
}

// newFixture builds a three-layer image: a gzip layer, a zstd layer big
// enough for intermediate progress reports, and an uncompressed one. seed
// makes images differ.
func newFixture(t *testing.T, seed string) fixture {
	t.Helper()
	data := [][]byte{
		tarBytes(t, tarFileEntry{"etc/os-release", "ID=" + seed + "\n"}),
		tarBytes(t, tarFileEntry{"bin/tool", randomString(t, 600<<10)}),
		tarBytes(t, tarFileEntry{"etc/motd", "hello from " + seed + "\n"}),
	}
	opener := func(b []byte) tarball.Opener {
		return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	gz, err := tarball.LayerFromOpener(opener(data[0]))
	if err != nil {
		t.Fatal(err)
	}
	zst, err := tarball.LayerFromOpener(opener(data[1]), tarball.WithCompression(compression.ZStd), tarball.WithMediaType(types.OCILayerZStd))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, gz, zst, static.NewLayer(data[2], types.DockerUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)}
	cf.Config = v1.Config{
		Env: []string{"PATH=/usr/bin:/bin", "SEED=" + seed}, WorkingDir: "/work", User: "1000:1000",
		Entrypoint: []string{"/bin/tool"}, Cmd: []string{"--serve"}, Labels: map[string]string{"seed": seed},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return fixture{img: img, layers: data}
}

// readLayer reads a layer to its end, recording progress reports.
func readLayer(ctx context.Context, l Layer) (data []byte, reports []int64, err error) {
	rc, err := l.Open(ctx, func(n int64) { reports = append(reports, n) })
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	data, err = io.ReadAll(rc)
	return data, reports, err
}

// want says how a source presents a fixture.
type want struct {
	ref          string
	dockerSave   bool // digests unknown, config digest as image digest, sniffed media types
	ignoreDigest bool
}

// checkImage compares got with the fixture f, reading every layer.
func checkImage(t *testing.T, got *Image, f fixture, w want) {
	t.Helper()
	cf, err := f.img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	m, err := f.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	digest, _ := f.img.Digest()
	if w.dockerSave {
		digest, _ = f.img.ConfigName()
	}
	if got.Ref != w.ref {
		t.Errorf("Ref = %q; want %q", got.Ref, w.ref)
	}
	if !w.ignoreDigest && got.Digest != digest.String() {
		t.Errorf("Digest = %s; want %s", got.Digest, digest)
	}
	wantCfg := Config{
		Env: cf.Config.Env, Workdir: cf.Config.WorkingDir, User: cf.Config.User, Entrypoint: cf.Config.Entrypoint,
		Cmd: cf.Config.Cmd, Labels: cf.Config.Labels, Created: cf.Created.Time, OS: cf.OS, Architecture: cf.Architecture,
	}
	if diff := cmp.Diff(wantCfg, got.Config); diff != "" {
		t.Errorf("Config differs (-want +got):\n%s", diff)
	}
	if len(got.Layers) != len(f.layers) {
		t.Fatalf("%d layers; want %d", len(got.Layers), len(f.layers))
	}
	for i, l := range got.Layers {
		wl := Layer{DiffID: cf.RootFS.DiffIDs[i].String(), Digest: m.Layers[i].Digest.String(), Size: m.Layers[i].Size, MediaType: string(m.Layers[i].MediaType)}
		if w.dockerSave {
			wl.Digest = "" // the fixture's media types are those sniffing finds
		}
		if l.DiffID != wl.DiffID || l.Digest != wl.Digest || l.Size != wl.Size || l.MediaType != wl.MediaType {
			t.Errorf("layer %d = {%s %s %d %s}; want {%s %s %d %s}", i, l.DiffID, l.Digest, l.Size, l.MediaType, wl.DiffID, wl.Digest, wl.Size, wl.MediaType)
		}
		data, reports, err := readLayer(t.Context(), l)
		if err != nil {
			t.Errorf("layer %d: read: %v", i, err)
			continue
		}
		if !bytes.Equal(data, f.layers[i]) {
			t.Errorf("layer %d: read %d bytes that differ from the %d of the layer", i, len(data), len(f.layers[i]))
		}
		if len(reports) == 0 || reports[len(reports)-1] != l.Size || !slices.IsSorted(reports) {
			t.Errorf("layer %d: progress reports %v; want them rising to %d", i, reports, l.Size)
		}
		if l.Size > 2*progressStep && len(reports) < 2 {
			t.Errorf("layer %d of %d bytes: progress reports %v; want some before the end", i, l.Size, reports)
		}
	}
}

// readConcurrently reads layer l from several goroutines at once and
// checks that each gets want.
func readConcurrently(t *testing.T, l Layer, want []byte) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			data, _, err := readLayer(t.Context(), l)
			if err == nil && !bytes.Equal(data, want) {
				err = errors.New("content differs")
			}
			errs[i] = err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Errorf("concurrent reads: %v", err)
	}
}

// serve runs h on 127.0.0.1 and returns its host:port.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// newRegistry returns an in-memory registry.
func newRegistry() http.Handler {
	return registry.New(registry.Logger(log.New(io.Discard, "", 0)))
}

// push writes img (a v1.Image or v1.ImageIndex) as ref.
func push(t *testing.T, ref string, img any, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	switch img := img.(type) {
	case v1.Image:
		err = remote.Write(r, img, opts...)
	case v1.ImageIndex:
		err = remote.WriteIndex(r, img, opts...)
	}
	if err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

// gzipFile writes a gzip-compressed copy of src and returns its path.
func gzipFile(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(data)
	zw.Close()
	dst := src + ".gz"
	if err := os.WriteFile(dst, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// tarDir writes the files under dir into a tar file, named "./<path>" as
// `tar -C dir -cf file .` does, and returns its path.
func tarDir(t testing.TB, dir string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "archive.tar")
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(fi, "")
		if err != nil {
			return err
		}
		hdr.Name = "./" + filepath.ToSlash(rel)
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// rawBlob is a blob of a hand-made image.
type rawBlob struct {
	mt   types.MediaType
	data []byte
}

// writeRawLayout writes a hand-made single-image OCI layout to dir, with
// the config cfg (marshalled as JSON) of media type cfgType, and returns
// its manifest descriptor. It can describe what go-containerregistry
// refuses to build, such as wrong diff IDs.
func writeRawLayout(t testing.TB, dir string, cfgType types.MediaType, cfg any, layers ...rawBlob) v1.Descriptor {
	t.Helper()
	write := func(mt types.MediaType, data []byte) v1.Descriptor {
		h, size, err := v1.SHA256(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "blobs", h.Algorithm, h.Hex)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return v1.Descriptor{MediaType: mt, Size: size, Digest: h}
	}
	mustJSON := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: write(cfgType, mustJSON(cfg))}
	for _, l := range layers {
		m.Layers = append(m.Layers, write(l.mt, l.data))
	}
	desc := write(types.OCIManifestSchema1, mustJSON(m))
	desc.Annotations = map[string]string{annotationRefName: "raw"}
	idx := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex, Manifests: []v1.Descriptor{desc}}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), mustJSON(idx), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return desc
}

// configWith returns an image config listing diffIDs.
func configWith(diffIDs ...v1.Hash) v1.ConfigFile {
	return v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers", DiffIDs: diffIDs}}
}

func sha(t testing.TB, b []byte) v1.Hash {
	t.Helper()
	h, _, err := v1.SHA256(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return h
}
