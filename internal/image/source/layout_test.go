package source

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeLayout writes an OCI layout holding app (example.org/team/app:1),
// other (tagged "other" only) and an index (example.org/team/multi:1) of
// native (this platform) and a foreign image.
func writeLayout(t *testing.T, dir string, app, other, native, foreign fixture) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	named := func(n string) layout.Option { return layout.WithAnnotations(map[string]string{annotationRefName: n}) }
	if err := p.AppendImage(app.img, named("example.org/team/app:1")); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(other.img, named("other")); err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: foreign.img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "plan9", Architecture: runtime.GOARCH}}},
		mutate.IndexAddendum{Add: native.img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}}},
	)
	if err := p.AppendIndex(idx, named("example.org/team/multi:1")); err != nil {
		t.Fatal(err)
	}
}

func TestLayout(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	app, other, native, foreign := newFixture(t, "app"), newFixture(t, "other"), newFixture(t, "native"), newFixture(t, "foreign")
	writeLayout(t, dir, app, other, native, foreign)

	img, err := Layout(ctx, dir, "example.org/team/app:1")
	if err != nil {
		t.Fatalf("Layout(app) = %v", err)
	}
	checkImage(t, img, app, want{ref: "example.org/team/app:1"})
	readConcurrently(t, img.Layers[0], app.layers[0])

	digest, _ := other.img.Digest()
	if img, err = Layout(ctx, dir, digest.String()); err != nil {
		t.Fatalf("Layout(by digest) = %v", err)
	}
	checkImage(t, img, other, want{ref: "other"})

	if img, err = Layout(ctx, dir, "example.org/team/multi:1"); err != nil {
		t.Fatalf("Layout(index) = %v", err)
	}
	checkImage(t, img, native, want{ref: "example.org/team/multi:1"})

	_, err = Layout(ctx, dir, "")
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(fmt.Sprint(err), `"example.org/team/app:1"`) {
		t.Errorf(`Layout("") = %v; want InvalidArgument listing the images`, err)
	}
	if _, err = Layout(ctx, dir, "example.org/team/nope:1"); !errdefs.IsNotFound(err) || !strings.Contains(err.Error(), "example.org/team/nope:1") {
		t.Errorf("Layout(unknown ref) = %v; want NotFound naming it", err)
	}
	if _, err = Layout(ctx, filepath.Join(dir, "missing"), ""); !errdefs.IsNotFound(err) {
		t.Errorf("Layout(missing dir) = %v; want NotFound", err)
	}
	if _, err = Layout(ctx, t.TempDir(), ""); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Layout(empty dir) = %v; want InvalidArgument", err)
	}

	// The only image, selected without a ref.
	single := t.TempDir()
	p, err := layout.Write(single, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(app.img); err != nil {
		t.Fatal(err)
	}
	if img, err = Layout(ctx, single, ""); err != nil {
		t.Fatalf(`Layout("") of a single image = %v`, err)
	}
	checkImage(t, img, app, want{})
}

func TestLayoutUntrusted(t *testing.T) {
	ctx := t.Context()
	layer := tarBytes(t, tarFileEntry{"etc/motd", "hi\n"})
	raw := rawBlob{types.OCIUncompressedLayer, layer}

	for _, tc := range []struct {
		name   string
		make   func(t *testing.T, dir string)
		isOpen func(error) bool // Layout fails so when set
		isRead func(error) bool // else reading the layer fails so
	}{
		{
			name: "wrong diff ID",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, []byte("other"))), raw)
			},
			isRead: errdefs.IsDataLoss,
		},
		{
			name: "changed blob",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer)), raw)
				d := sha(t, layer)
				p := filepath.Join(dir, "blobs", "sha256", d.Hex)
				os.WriteFile(p, bytes.Replace(layer, []byte("hi"), []byte("HI"), 1), 0o644)
			},
			isRead: errdefs.IsDataLoss,
		},
		{
			name: "longer blob",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer)), raw)
				p := filepath.Join(dir, "blobs", "sha256", sha(t, layer).Hex)
				os.WriteFile(p, append(bytes.Clone(layer), 0), 0o644)
			},
			isRead: errdefs.IsDataLoss,
		},
		{
			name: "changed config",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer)), raw)
				cfg := configWith(sha(t, layer))
				b := []byte(fmt.Sprintf(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]}}`, cfg.RootFS.DiffIDs[0]))
				os.WriteFile(filepath.Join(dir, "blobs", "sha256", sha(t, mustMarshal(t, cfg)).Hex), b, 0o644)
			},
			isOpen: errdefs.IsDataLoss,
		},
		{
			name: "config outside the layout",
			make: func(t *testing.T, dir string) {
				cfg := configWith(sha(t, layer))
				writeRawLayout(t, dir, types.OCIConfigJSON, cfg, raw)
				// Even with the right content, a link out of the layout is refused.
				outside := filepath.Join(t.TempDir(), "config.json")
				os.WriteFile(outside, mustMarshal(t, cfg), 0o644)
				p := filepath.Join(dir, "blobs", "sha256", sha(t, mustMarshal(t, cfg)).Hex)
				os.Remove(p)
				if err := os.Symlink(outside, p); err != nil {
					t.Fatal(err)
				}
			},
			isOpen: func(err error) bool { return err != nil },
		},
		{
			name: "config is a directory",
			make: func(t *testing.T, dir string) {
				cfg := configWith(sha(t, layer))
				writeRawLayout(t, dir, types.OCIConfigJSON, cfg, raw)
				p := filepath.Join(dir, "blobs", "sha256", sha(t, mustMarshal(t, cfg)).Hex)
				os.Remove(p)
				os.Mkdir(p, 0o755)
			},
			isOpen: errdefs.IsInvalidArgument,
		},
		{
			name: "artifact",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, "application/vnd.example.config.v1+json", configWith(sha(t, layer)), raw)
			},
			isOpen: errdefs.IsInvalidArgument,
		},
		{
			name: "foreign layer",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer)), rawBlob{types.OCIUncompressedRestrictedLayer, layer})
			},
			isOpen: errdefs.IsInvalidArgument,
		},
		{
			name: "helm chart layer",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer)), rawBlob{"application/vnd.example.chart.layer.v1.tar+gzip", layer})
			},
			isOpen: errdefs.IsInvalidArgument,
		},
		{
			name: "more diff IDs than layers",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer), sha(t, layer)), raw)
			},
			isOpen: errdefs.IsInvalidArgument,
		},
		{
			name: "missing blob",
			make: func(t *testing.T, dir string) {
				writeRawLayout(t, dir, types.OCIConfigJSON, configWith(sha(t, layer)), raw)
				os.Remove(filepath.Join(dir, "blobs", "sha256", sha(t, layer).Hex))
			},
			isRead: errdefs.IsNotFound,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.make(t, dir)
			img, err := Layout(ctx, dir, "")
			if tc.isOpen != nil {
				if !tc.isOpen(err) {
					t.Errorf("Layout = %v; want a %s error", err, tc.name)
				}
				return
			}
			if err != nil {
				t.Fatalf("Layout = %v", err)
			}
			data, _, err := readLayer(ctx, img.Layers[0])
			if !tc.isRead(err) {
				t.Errorf("reading the layer = %v; want a %s error", err, tc.name)
			}
			if tc.name == "wrong diff ID" && !bytes.Equal(data, layer) {
				t.Errorf("read %d bytes before the error; want the whole layer (%d)", len(data), len(layer))
			}
		})
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
