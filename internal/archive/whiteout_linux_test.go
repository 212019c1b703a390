package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// wantWhiteout fails unless name under dst is an overlayfs whiteout.
func wantWhiteout(t *testing.T, dst, name string) {
	t.Helper()
	var st unix.Stat_t
	err := unix.Lstat(filepath.Join(dst, name), &st)
	if err != nil || st.Mode != unix.S_IFCHR || st.Rdev != 0 || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("Lstat(%q) = mode %o rdev %d owner %d:%d, %v; want a char device 0/0, mode 0, owner 0:0",
			name, st.Mode, st.Rdev, st.Uid, st.Gid, err)
	}
}

// opaqueValue returns the trusted.overlay.opaque xattr of p, or "".
func opaqueValue(t *testing.T, p string) string {
	t.Helper()
	var v [16]byte
	n, err := unix.Lgetxattr(p, opaqueXattr, v[:])
	if errors.Is(err, unix.ENODATA) {
		return ""
	}
	must(t, err)
	return string(v[:n])
}

func TestApplyWhiteouts(t *testing.T) {
	testutil.RequiresRoot(t)
	outer, dst := sandboxDirs(t)
	data := makeTar(t, []entry{
		{name: "a/", typ: tar.TypeDir, mode: 0o755},
		{name: "a/keep", typ: tar.TypeReg, body: "k"},
		{name: "a/.wh.gone", typ: tar.TypeReg},
		{name: ".wh.top", typ: tar.TypeReg},
		{name: "deep/er/.wh.x", typ: tar.TypeReg}, // parents made on the way
		{name: "b/", typ: tar.TypeDir, mode: 0o755},
		{name: "b/new", typ: tar.TypeReg, body: "n"},
		{name: "b/.wh..wh..opq", typ: tar.TypeReg}, // after its siblings: they stay
		{name: "implicit/.wh..wh..opq", typ: tar.TypeReg},
		// Same-layer entries are not hidden by the layer's own whiteouts.
		{name: "f", typ: tar.TypeReg, body: "f"},
		{name: ".wh.f", typ: tar.TypeReg},
		{name: "c/", typ: tar.TypeDir, mode: 0o755},
		{name: "c/x", typ: tar.TypeReg, body: "x"},
		{name: ".wh.c", typ: tar.TypeReg},
		// A later entry replaces the whiteout; a directory becomes opaque.
		{name: ".wh.g", typ: tar.TypeReg},
		{name: "g", typ: tar.TypeReg, body: "g"},
		{name: ".wh.h", typ: tar.TypeReg},
		{name: "h/", typ: tar.TypeDir, mode: 0o755},
	})
	if _, err := apply(t, dst, data, Options{Whiteouts: true}); err != nil {
		t.Fatalf("Apply(Whiteouts) = %v", err)
	}
	outsideUntouched(t, outer)
	for _, name := range []string{"a/gone", "top", "deep/er/x"} {
		wantWhiteout(t, dst, name)
	}
	for name, want := range map[string]string{"a/keep": "k", "b/new": "n", "f": "f", "c/x": "x", "g": "g"} {
		wantFile(t, dst, name, want)
	}
	for name, want := range map[string]string{"a": "", "b": "y", "implicit": "y", "c": "y", "h": "y", "deep": ""} {
		if got := opaqueValue(t, filepath.Join(dst, name)); got != want {
			t.Errorf("opaque(%q) = %q; want %q", name, got, want)
		}
	}
	ents, err := os.ReadDir(dst)
	must(t, err)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".wh.") {
			t.Errorf("marker %s was extracted", e.Name())
		}
	}
}

func TestApplyWhiteoutsConfined(t *testing.T) {
	testutil.RequiresRoot(t)
	tests := []struct {
		name    string
		entries []entry
	}{
		{"whiteout through an absolute symlink", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: "/tmp"},
			{name: "evil/.wh.pwned", typ: tar.TypeReg},
		}},
		{"whiteout through a climbing symlink", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: ".."},
			{name: "evil/.wh.canary", typ: tar.TypeReg},
		}},
		{"opaque marker through a climbing symlink", []entry{
			{name: "evil", typ: tar.TypeSymlink, link: "../"},
			{name: "evil/.wh..wh..opq", typ: tar.TypeReg},
		}},
		{"opaque marker on an inner symlink", []entry{
			{name: "d/", typ: tar.TypeDir},
			{name: "l", typ: tar.TypeSymlink, link: "d"},
			{name: "l/.wh..wh..opq", typ: tar.TypeReg},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outer, dst := sandboxDirs(t)
			if _, err := apply(t, dst, makeTar(t, tc.entries), Options{Whiteouts: true}); err == nil {
				t.Fatal("Apply(Whiteouts) = nil; want an error")
			}
			outsideUntouched(t, outer)
			for _, p := range []string{outer, filepath.Join(dst, "d")} {
				if _, err := os.Stat(p); err == nil && opaqueValue(t, p) != "" {
					t.Errorf("%s was made opaque", p)
				}
			}
			if _, err := os.Lstat("/tmp/pwned"); err == nil {
				t.Fatal("/tmp/pwned exists")
			}
		})
	}
}

func TestWriteLayerRoundTrip(t *testing.T) {
	testutil.RequiresRoot(t)
	src := t.TempDir()
	p := func(name string) string { return filepath.Join(src, name) }
	must(t, os.MkdirAll(p("a"), 0o750))
	must(t, os.WriteFile(p("a/f"), []byte("hello"), 0o640))
	must(t, os.Link(p("a/f"), p("hl")))
	must(t, os.Symlink("f", p("a/z")))
	must(t, unix.Mknod(p("a/gone"), unix.S_IFCHR, 0))
	must(t, unix.Mknod(p("top"), unix.S_IFCHR, 0))
	must(t, os.MkdirAll(p("o"), 0o755))
	must(t, os.WriteFile(p("o/n"), []byte("n"), 0o644))
	must(t, unix.Setxattr(p("o"), opaqueXattr, []byte("y"), 0))
	must(t, os.MkdirAll(p("u"), 0o755))
	must(t, unix.Setxattr(p("u"), userOpaqueXattr, []byte("y"), 0))
	must(t, unix.Mknod(p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Mkfifo(p("fifo"), 0o644))
	// Old times everywhere, so that a time Apply fails to restore shows.
	old := unix.NsecToTimespec(time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano())
	for _, name := range []string{"a/f", "a/z", "a/gone", "top", "o/n", "a", "o", "u"} {
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p(name), []unix.Timespec{old, old}, unix.AT_SYMLINK_NOFOLLOW))
	}

	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()
	first := writeTree(t, root, true)
	want := ".wh.top a/ a/.wh.gone a/f a/z hl o/ o/.wh..wh..opq o/n u/ u/.wh..wh..opq"
	if got := strings.Join(tarNames(t, first), " "); got != want {
		t.Fatalf("WriteLayer names = %q; want %q", got, want)
	}
	for _, hdr := range tarHeaders(t, first) {
		if strings.HasPrefix(filepath.Base(hdr.Name), ".wh.") &&
			(hdr.Typeflag != tar.TypeReg || hdr.Size != 0 || hdr.Mode != 0 || hdr.Uid != 0 || hdr.Gid != 0 || hdr.ModTime.Unix() != 0) {
			t.Errorf("marker %s = %+v; want an empty file, mode 0, owner 0:0, time 0", hdr.Name, hdr)
		}
	}

	// Apply(Whiteouts) restores the overlay form, and writing that tree
	// gives the very same bytes.
	_, dst := sandboxDirs(t)
	if _, err := apply(t, dst, first, Options{Whiteouts: true, KeepOwners: true}); err != nil {
		t.Fatalf("Apply(WriteLayer) = %v", err)
	}
	wantWhiteout(t, dst, "a/gone")
	wantWhiteout(t, dst, "top")
	for _, name := range []string{"o", "u"} {
		if got := opaqueValue(t, filepath.Join(dst, name)); got != "y" {
			t.Errorf("opaque(%q) = %q; want \"y\"", name, got)
		}
	}
	root2, err := os.OpenRoot(dst)
	must(t, err)
	defer root2.Close()
	if again := writeTree(t, root2, true); !bytes.Equal(first, again) {
		t.Errorf("WriteLayer(Apply(WriteLayer(tree))) differs from WriteLayer(tree):\n%q\n%q",
			tarNames(t, first), tarNames(t, again))
	}
}
