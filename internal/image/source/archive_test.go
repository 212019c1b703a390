package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestArchiveDockerSave(t *testing.T) {
	ctx := t.Context()
	f := newFixture(t, "saved")
	file := filepath.Join(t.TempDir(), "app.tar")
	tag, err := name.NewTag("example.org/team/app:2")
	if err != nil {
		t.Fatal(err)
	}
	if err := tarball.WriteToFile(file, tag, f.img); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{file, gzipFile(t, file)} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			img, err := Archive(ctx, file, "")
			if err != nil {
				t.Fatalf("Archive = %v", err)
			}
			checkImage(t, img, f, want{ref: "example.org/team/app:2", dockerSave: true})
			readConcurrently(t, img.Layers[1], f.layers[1])
			if err := img.Close(); err != nil {
				t.Errorf("Close = %v", err)
			}
			if _, _, err := readLayer(ctx, img.Layers[0]); err == nil {
				t.Error("reading a layer after Close succeeded")
			}
		})
	}

	// Several images: chosen by tag (as a reference) or config digest.
	other := newFixture(t, "other")
	multi := filepath.Join(t.TempDir(), "multi.tar")
	tag2, _ := name.NewTag("example.org/team/other")
	if err := tarball.MultiRefWriteToFile(multi, map[name.Reference]v1.Image{tag: f.img, tag2: other.img}); err != nil {
		t.Fatal(err)
	}
	if _, err := Archive(ctx, multi, ""); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "example.org/team/app:2") {
		t.Errorf(`Archive("") of two images = %v; want InvalidArgument listing them`, err)
	}
	img, err := Archive(ctx, multi, "example.org/team/other")
	if err != nil {
		t.Fatalf("Archive(example.org/team/other) = %v", err)
	}
	checkImage(t, img, other, want{ref: "example.org/team/other:latest", dockerSave: true})
	img.Close()
	id, _ := other.img.ConfigName()
	if img, err = Archive(ctx, multi, id.String()); err != nil || img.Digest != id.String() {
		t.Errorf("Archive(config digest) = %v, %v", img, err)
	}
	if _, err := Archive(ctx, multi, "example.org/team/nope:1"); !errdefs.IsNotFound(err) {
		t.Errorf("Archive(unknown tag) = %v; want NotFound", err)
	}
}

func TestArchiveOCI(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	app, other, native, foreign := newFixture(t, "app"), newFixture(t, "other"), newFixture(t, "native"), newFixture(t, "foreign")
	writeLayout(t, dir, app, other, native, foreign)
	file := tarDir(t, dir)
	for _, file := range []string{file, gzipFile(t, file)} {
		t.Run(filepath.Base(file), func(t *testing.T) {
			img, err := Archive(ctx, file, "example.org/team/app:1")
			if err != nil {
				t.Fatalf("Archive = %v", err)
			}
			defer img.Close()
			checkImage(t, img, app, want{ref: "example.org/team/app:1"})
			readConcurrently(t, img.Layers[1], app.layers[1])

			multi, err := Archive(ctx, file, "example.org/team/multi:1")
			if err != nil {
				t.Fatalf("Archive(index) = %v", err)
			}
			defer multi.Close()
			checkImage(t, multi, native, want{ref: "example.org/team/multi:1"})
			if _, err := Archive(ctx, file, ""); !errdefs.IsInvalidArgument(err) {
				t.Errorf(`Archive("") of several images = %v; want InvalidArgument`, err)
			}
		})
	}
}

// tarEntries writes a tar file of hand-made entries and returns its path.
func tarEntries(t testing.TB, hdrs []*tar.Header, bodies []string) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, h := range hdrs {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(bodies[i]))
		}
		h.Mode = 0o644
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, bodies[i])
	}
	tw.Close()
	file := filepath.Join(t.TempDir(), "hand.tar")
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// handSaved writes docker save output in the older docker layout, where a
// layer saved already is a link to the first copy, with the config diffIDs.
func handSaved(t testing.TB, layer []byte, diffIDs ...v1.Hash) string {
	t.Helper()
	cfg, err := json.Marshal(configWith(diffIDs...))
	if err != nil {
		t.Fatal(err)
	}
	cfgName := sha(t, cfg).Hex + ".json"
	manifest := fmt.Sprintf(`[{"Config": %q, "RepoTags": ["example.org/team/hand:1"], "Layers": ["a/layer.tar", "b/layer.tar", "c/layer.tar"]}]`, cfgName)
	return tarEntries(t, []*tar.Header{
		{Name: "a/", Typeflag: tar.TypeDir},
		{Name: "a/layer.tar", Typeflag: tar.TypeReg},
		{Name: "b/layer.tar", Typeflag: tar.TypeSymlink, Linkname: "../a/layer.tar"},
		{Name: "c/layer.tar", Typeflag: tar.TypeLink, Linkname: "a/layer.tar"},
		{Name: cfgName, Typeflag: tar.TypeReg},
		{Name: "manifest.json", Typeflag: tar.TypeReg},
	}, []string{"", string(layer), "", "", string(cfg), manifest})
}

func TestArchiveLinks(t *testing.T) {
	ctx := t.Context()
	layer := tarBytes(t, tarFileEntry{"etc/motd", "shared\n"})
	d := sha(t, layer)
	img, err := Archive(ctx, handSaved(t, layer, d, d, d), "example.org/team/hand:1")
	if err != nil {
		t.Fatalf("Archive = %v", err)
	}
	defer img.Close()
	if len(img.Layers) != 3 {
		t.Fatalf("%d layers; want 3", len(img.Layers))
	}
	for i, l := range img.Layers {
		data, _, err := readLayer(ctx, l)
		if err != nil || !bytes.Equal(data, layer) || l.Size != int64(len(layer)) || l.MediaType != "application/vnd.docker.image.rootfs.diff.tar" {
			t.Errorf("layer %d (%+v) = %d bytes, %v; want the shared layer", i, l, len(data), err)
		}
	}

	// A wrong diff ID is noticed at the end of the layer.
	img, err = Archive(ctx, handSaved(t, layer, d, d, sha(t, []byte("x"))), "")
	if err != nil {
		t.Fatalf("Archive = %v", err)
	}
	defer img.Close()
	if _, _, err := readLayer(ctx, img.Layers[2]); !errdefs.IsDataLoss(err) {
		t.Errorf("reading a layer with a wrong diff ID = %v; want DataLoss", err)
	}
}

func TestArchiveErrors(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.tar")
	os.WriteFile(garbage, bytes.Repeat([]byte("junk"), 1000), 0o644)
	notImage := tarEntries(t, []*tar.Header{{Name: "hello.txt", Typeflag: tar.TypeReg}}, []string{"hello"})
	layer := tarBytes(t, tarFileEntry{"etc/motd", "hi\n"})
	missingLayer := tarEntries(t, []*tar.Header{
		{Name: "manifest.json", Typeflag: tar.TypeReg},
		{Name: "cfg.json", Typeflag: tar.TypeReg},
	}, []string{`[{"Config": "cfg.json", "Layers": ["l.tar"]}]`, string(mustMarshal(t, configWith(sha(t, layer))))})
	loop := tarEntries(t, []*tar.Header{
		{Name: "manifest.json", Typeflag: tar.TypeSymlink, Linkname: "manifest.json"},
	}, []string{""})

	// A compressed archive that grows past the limit.
	big := filepath.Join(t.TempDir(), "big.tar")
	os.WriteFile(big, make([]byte, 1<<20), 0o644)
	bomb := gzipFile(t, big)

	for _, tc := range []struct {
		name, file string
		is         func(error) bool
	}{
		{"missing", filepath.Join(dir, "missing.tar"), errdefs.IsNotFound},
		{"directory", dir, errdefs.IsInvalidArgument},
		{"garbage", garbage, errdefs.IsInvalidArgument},
		{"not an image", notImage, errdefs.IsInvalidArgument},
		{"missing layer", missingLayer, errdefs.IsNotFound},
		{"link loop", loop, errdefs.IsInvalidArgument},
		{"decompression bomb", bomb, errdefs.IsInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "decompression bomb" {
				defer func(n int64) { maxDecompressed = n }(maxDecompressed)
				maxDecompressed = 64 << 10
			}
			img, err := Archive(ctx, tc.file, "")
			if !tc.is(err) {
				t.Errorf("Archive(%s) = %v, %v; want a %s error", tc.file, img, err, tc.name)
			}
		})
	}
}

// FuzzArchive feeds arbitrary files to Archive and reads the layers of
// what it accepts: nothing may panic or hang.
func FuzzArchive(f *testing.F) {
	layer := tarBytes(f, tarFileEntry{"etc/motd", "hi\n"})
	d := sha(f, layer)
	for _, file := range []string{
		handSaved(f, layer, d, d, d),
		tarDir(f, func() string {
			dir := f.TempDir()
			writeRawLayout(f, dir, types.OCIConfigJSON, configWith(d), rawBlob{types.OCIUncompressedLayer, layer})
			return dir
		}()),
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(b)
		zw.Close()
		f.Add(gz.Bytes())
	}
	f.Add([]byte("junk"))

	defer func(n int64) { maxDecompressed = n }(maxDecompressed)
	maxDecompressed = 16 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "fuzz.tar")
		if err := os.WriteFile(file, data, 0o644); err != nil {
			t.Fatal(err)
		}
		img, err := Archive(t.Context(), file, "")
		if err != nil {
			return
		}
		defer img.Close()
		for _, l := range img.Layers {
			rc, err := l.Open(t.Context(), nil)
			if err != nil {
				continue
			}
			io.Copy(io.Discard, io.LimitReader(rc, 16<<20))
			rc.Close()
		}
	})
}
