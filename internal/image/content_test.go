package image

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/testutil"
)

func TestLayerKey(t *testing.T) {
	d1 := "sha256:" + strings.Repeat("a", 64)
	d2 := "sha256:" + strings.Repeat("b", 64)
	base := layerKey("", d1)
	if base != "sha256-"+strings.Repeat("a", 64) {
		t.Errorf("layerKey(base) = %q; want the diff ID itself", base)
	}
	onBase := layerKey(base, d2)
	if onBase == layerKey("", d2) || onBase == layerKey(layerKey("", d2), d1) {
		t.Errorf("the chain ID does not depend on the parent and the order")
	}
	if onBase != layerKey(base, d2) {
		t.Errorf("layerKey is not deterministic")
	}
	// The OCI image spec's ChainID for two layers.
	if want := "sha256-" + sha256Hex(d1+" "+d2); onBase != want {
		t.Errorf("layerKey = %q; want %q", onBase, want)
	}
}

// TestContentAddressed: the same content imported under two names is one
// layer; removing one name keeps it, removing both collects it; a tag
// shares the layer; prune keeps what the build cache holds unless told.
func TestContentAddressed(t *testing.T) {
	ctx := testutil.Context(t)
	s, layers := newStores(t)
	data := tarball(t, false, tarEntry{name: "f", body: "same", typ: tar.TypeReg})
	a, err := s.ImportTar(ctx, "a", bytes.NewReader(data))
	must(t, err)
	b, err := s.ImportTar(ctx, "team/b:1", bytes.NewReader(data))
	must(t, err)
	if a.TopLayer != b.TopLayer || !strings.HasPrefix(a.TopLayer, "sha256-") {
		t.Fatalf("identical imports have layers %q and %q; want one content-addressed layer", a.TopLayer, b.TopLayer)
	}
	if ls, _ := layers.Layers(ctx); len(ls) != 1 {
		t.Fatalf("%d layers stored; want 1", len(ls))
	}
	tagged, err := s.Tag(ctx, "a", "127.0.0.1:5000/x/a:v2")
	must(t, err)
	if tagged.TopLayer != a.TopLayer {
		t.Errorf("tag has layer %q; want %q", tagged.TopLayer, a.TopLayer)
	}
	info, err := s.Inspect(ctx, "127.0.0.1:5000/x/a:v2")
	must(t, err)
	if info.Layers != 1 || len(info.LayerInfo) != 1 || info.LayerInfo[0].DiffID == "" || info.ID != a.TopLayer {
		t.Errorf("Inspect = %+v; want one layer with its diff ID", info)
	}
	must(t, s.Remove(ctx, "a"))
	must(t, s.Remove(ctx, "team/b:1"))
	if !layers.HasLayer(a.TopLayer) {
		t.Fatal("the layer went while a tag still names it")
	}
	must(t, s.Remove(ctx, "127.0.0.1:5000/x/a:v2"))
	if layers.HasLayer(a.TopLayer) {
		t.Error("the layer of the last removed name was not collected")
	}

	// A layer only the build cache refers to.
	key, err := s.AddLayer(ctx, "", func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cached"), []byte("x"), 0o644)
	})
	must(t, err)
	ck := strings.Repeat("c", 64)
	must(t, s.CachePut(ck, key, "run echo"))
	if got, ok := s.CacheGet(ck); !ok || got != key {
		t.Errorf("CacheGet = %q, %v; want %q", got, ok, key)
	}
	if rep, err := s.Prune(ctx, PruneOptions{}); err != nil || rep.LayersRemoved != 0 {
		t.Errorf("Prune() = %+v, %v; want the cached layer kept", rep, err)
	}
	rep, err := s.Prune(ctx, PruneOptions{BuildCache: true})
	if err != nil || rep.LayersRemoved != 1 || rep.CacheRemoved != 1 {
		t.Errorf("Prune(BuildCache) = %+v, %v; want the cached layer and entry removed", rep, err)
	}
	if _, ok := s.CacheGet(ck); ok {
		t.Error("cache entry survived Prune(BuildCache)")
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "py-agent", "debian:bookworm", "team/py:1.2", "127.0.0.1:5000/team/py:1", "localhost/x", "registry.example.org/a/b/c:latest"} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("ValidateName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "UPPER", "a//b", "/abs", "a/", "a:", "a:b:c", "../x", "a b", "a\x00", ":tag", strings.Repeat("a", 256)} {
		if err := ValidateName(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ValidateName(%q) = %v; want InvalidArgument", bad, err)
		}
	}
}

func TestHostDebianMirror(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "sources.list.d"), 0o755))
	if _, err := HostDebianMirror(dir); !errdefs.IsFailedPrecondition(err) {
		t.Errorf("no sources: %v; want FailedPrecondition", err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "sources.list.d", "debian.sources"), []byte(
		"Types: deb\nURIs: http://mirror.example.org/debian-security\nSuites: bookworm-security\n\n"+
			"Types: deb\nURIs: http://mirror.example.org/debian/\nSuites: bookworm\n"), 0o644))
	if got, err := HostDebianMirror(dir); err != nil || got != "http://mirror.example.org/debian" {
		t.Errorf("deb822: %q, %v", got, err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "sources.list"), []byte(
		"# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example.org/debian bookworm main\n"), 0o644))
	if got, err := HostDebianMirror(dir); err != nil || got != "http://one.example.org/debian" {
		t.Errorf("one-line: %q, %v", got, err)
	}
}

func TestParseBootstrapRef(t *testing.T) {
	if s, err := ParseBootstrapRef("debian:bookworm"); err != nil || s != "bookworm" {
		t.Errorf("ParseBootstrapRef(debian:bookworm) = %q, %v", s, err)
	}
	for _, bad := range []string{"debian", "ubuntu:noble", "debian:Bookworm", "debian:../x", "debian:a;b"} {
		if _, err := ParseBootstrapRef(bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseBootstrapRef(%q) = %v; want InvalidArgument", bad, err)
		}
	}
}
