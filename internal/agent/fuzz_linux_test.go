package agent

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzExtractTar feeds arbitrary tars to the extractor and checks that
// nothing appears next to the target directory.
func FuzzExtractTar(f *testing.F) {
	seeds := [][]tarEntry{
		{{name: "a", typ: tar.TypeReg, body: "x"}},
		{{name: "../a", typ: tar.TypeReg, body: "x"}},
		{{name: "l", link: "..", typ: tar.TypeSymlink}, {name: "l/a", typ: tar.TypeReg, body: "x"}},
		{{name: "d/", typ: tar.TypeDir}, {name: "d/h", link: "../../x", typ: tar.TypeLink}},
	}
	for _, s := range seeds {
		f.Add(makeTar(f, s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Sparse entries expand to their logical size; keep the disk small.
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Size > 1<<20 {
				t.Skip("entry too large for fuzzing")
			}
		}
		base := t.TempDir()
		root := filepath.Join(base, "root")
		_ = extractTar(root, bytes.NewReader(data), nil)
		ents, err := os.ReadDir(base)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() != "root" {
				t.Fatalf("extractTar created %q outside the root", e.Name())
			}
		}
	})
}

func FuzzTarEntryName(f *testing.F) {
	for _, s := range []string{"a", "./a/", "../a", "/a", "a/../../b", "a//b", "."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := tarEntryName(name)
		if err != nil || got == "" {
			return
		}
		if !filepath.IsLocal(got) || filepath.Clean(got) != got {
			t.Fatalf("tarEntryName(%q) = %q; want a clean local path", name, got)
		}
	})
}
