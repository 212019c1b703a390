package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
	size       int64 // when set, overrides len(body) in the header
}

func makeTar(t testing.TB, entries []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("WriteHeader(%q): %v", e.name, err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandboxDirs returns an outer dir holding dst and a canary file next to it.
func sandboxDirs(t testing.TB) (outer, dst string) {
	t.Helper()
	outer = t.TempDir()
	dst = filepath.Join(outer, "dst")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outer, "canary"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	return outer, dst
}

// outsideUntouched fails when anything but dst and the canary exists in
// outer or the canary changed.
func outsideUntouched(t testing.TB, outer string) {
	t.Helper()
	ents, err := os.ReadDir(outer)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != "dst" && e.Name() != "canary" {
			t.Fatalf("%s appeared outside dst", e.Name())
		}
	}
	b, err := os.ReadFile(filepath.Join(outer, "canary"))
	if err != nil || string(b) != "keep" {
		t.Fatalf("canary = %q, %v; want \"keep\"", b, err)
	}
}

func apply(t testing.TB, dst string, data []byte, opts Options) (int64, error) {
	t.Helper()
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	return Apply(t.Context(), root, bytes.NewReader(data), opts)
}

func TestApply(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		opts    Options
		wantErr error // nil: success
		check   func(t *testing.T, dst string)
	}{
		{
			name: "plain",
			entries: []entry{
				{name: "a/", typ: tar.TypeDir, mode: 0o755},
				{name: "a/f", typ: tar.TypeReg, body: "hello"},
				{name: "b/c/g", typ: tar.TypeReg, body: "x", mode: 0o755},
				{name: "l", typ: tar.TypeSymlink, link: "a/f"},
				{name: "h", typ: tar.TypeLink, link: "a/f"},
			},
			check: func(t *testing.T, dst string) {
				wantFile(t, dst, "a/f", "hello")
				wantFile(t, dst, "b/c/g", "x")
				wantFile(t, dst, "h", "hello")
				if l, err := os.Readlink(filepath.Join(dst, "l")); err != nil || l != "a/f" {
					t.Errorf("Readlink(l) = %q, %v; want a/f", l, err)
				}
			},
		},
		{
			name: "dotdot and absolute names are confined",
			entries: []entry{
				{name: "../../escape", typ: tar.TypeReg, body: "x"},
				{name: "/abs", typ: tar.TypeReg, body: "y"},
				{name: "a/../../../b", typ: tar.TypeReg, body: "z"},
			},
			check: func(t *testing.T, dst string) {
				wantFile(t, dst, "escape", "x")
				wantFile(t, dst, "abs", "y")
				wantFile(t, dst, "b", "z")
			},
		},
		{
			name: "write through an absolute symlink fails",
			entries: []entry{
				{name: "evil", typ: tar.TypeSymlink, link: "/tmp"},
				{name: "evil/pwned", typ: tar.TypeReg, body: "x"},
			},
			wantErr: fs.ErrNotExist, // any error will do; checked below
		},
		{
			name: "write through a climbing symlink fails",
			entries: []entry{
				{name: "evil", typ: tar.TypeSymlink, link: "../"},
				{name: "evil/pwned", typ: tar.TypeReg, body: "x"},
			},
			wantErr: fs.ErrNotExist,
		},
		{
			name: "file replaces a symlink instead of writing through it",
			entries: []entry{
				{name: "f", typ: tar.TypeSymlink, link: "../canary"},
				{name: "f", typ: tar.TypeReg, body: "new"},
			},
			check: func(t *testing.T, dst string) {
				wantFile(t, dst, "f", "new")
				if fi, err := os.Lstat(filepath.Join(dst, "f")); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("Lstat(f) = %v, %v; want a regular file", fi, err)
				}
			},
		},
		{
			name: "write through a chain of symlinks fails",
			entries: []entry{
				{name: "l1", typ: tar.TypeSymlink, link: "l2"},
				{name: "l2", typ: tar.TypeSymlink, link: "../"},
				{name: "l1/pwned", typ: tar.TypeReg, body: "x"},
			},
			wantErr: fs.ErrNotExist,
		},
		{
			name: "file replaces a hard link instead of writing through it",
			entries: []entry{
				{name: "f", typ: tar.TypeReg, body: "orig"},
				{name: "h", typ: tar.TypeLink, link: "f"},
				{name: "h", typ: tar.TypeReg, body: "new"},
			},
			check: func(t *testing.T, dst string) {
				wantFile(t, dst, "f", "orig")
				wantFile(t, dst, "h", "new")
			},
		},
		{
			name: "hard link to a symlink fails",
			entries: []entry{
				{name: "s", typ: tar.TypeSymlink, link: "../canary"},
				{name: "h", typ: tar.TypeLink, link: "s"},
			},
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name: "whiteout names are plain files without Whiteouts",
			entries: []entry{
				{name: ".wh.a", typ: tar.TypeReg, body: "1"},
				{name: "d/.wh..wh..opq", typ: tar.TypeReg, body: "2"},
			},
			check: func(t *testing.T, dst string) {
				wantFile(t, dst, ".wh.a", "1")
				wantFile(t, dst, "d/.wh..wh..opq", "2")
			},
		},
		{
			name: "hard link outside fails",
			entries: []entry{
				{name: "h", typ: tar.TypeLink, link: "../canary"}, // confined to dst/canary: missing
			},
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name: "hard link through symlink outside fails",
			entries: []entry{
				{name: "s", typ: tar.TypeSymlink, link: "/etc"},
				{name: "h", typ: tar.TypeLink, link: "s/passwd"},
			},
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name: "devices and fifos skipped, setuid stripped",
			entries: []entry{
				{name: "dev/null", typ: tar.TypeChar},
				{name: "dev/sda", typ: tar.TypeBlock},
				{name: "fifo", typ: tar.TypeFifo},
				{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o4755},
				{name: "sgid", typ: tar.TypeReg, body: "x", mode: 0o2755},
				{name: "tmp/", typ: tar.TypeDir, mode: 0o1777},
			},
			check: func(t *testing.T, dst string) {
				for _, n := range []string{"dev/null", "dev/sda", "fifo"} {
					if _, err := os.Lstat(filepath.Join(dst, n)); !errors.Is(err, fs.ErrNotExist) {
						t.Errorf("Lstat(%q) = %v; want not exist", n, err)
					}
				}
				for n, want := range map[string]fs.FileMode{"suid": 0o755, "sgid": 0o755, "tmp": fs.ModeDir | fs.ModeSticky | 0o777} {
					fi, err := os.Lstat(filepath.Join(dst, n))
					if err != nil || fi.Mode() != want {
						t.Errorf("mode(%q) = %v, %v; want %v", n, fi.Mode(), err, want)
					}
				}
			},
		},
		{
			name:    "too many bytes",
			entries: []entry{{name: "a", typ: tar.TypeReg, body: "12345"}, {name: "b", typ: tar.TypeReg, body: "678"}},
			opts:    Options{MaxBytes: 6},
			wantErr: ErrTooLarge,
		},
		{
			name:    "too many entries",
			entries: []entry{{name: "a", typ: tar.TypeReg}, {name: "b", typ: tar.TypeReg}, {name: "c", typ: tar.TypeReg}},
			opts:    Options{MaxEntries: 2},
			wantErr: ErrTooLarge,
		},
		{
			name: "directory replaced by file and back",
			entries: []entry{
				{name: "d/x", typ: tar.TypeReg, body: "1"},
				{name: "d", typ: tar.TypeReg, body: "2"},
				{name: "d/", typ: tar.TypeDir, mode: 0o555},
				{name: "d/y", typ: tar.TypeReg, body: "3"},
			},
			check: func(t *testing.T, dst string) {
				wantFile(t, dst, "d/y", "3")
				if fi, err := os.Stat(filepath.Join(dst, "d")); err != nil || fi.Mode().Perm() != 0o555 {
					t.Errorf("Stat(d) = %v, %v; want mode 0555", fi, err)
				}
				_ = os.Chmod(filepath.Join(dst, "d"), 0o755) // let t.TempDir remove it
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outer, dst := sandboxDirs(t)
			data := makeTar(t, tc.entries)
			for _, gz := range []bool{false, true} {
				if gz {
					data = gzipBytes(t, data)
					_, dst = sandboxDirs(t)
				}
				_, err := apply(t, dst, data, tc.opts)
				switch {
				case tc.wantErr == nil && err != nil:
					t.Fatalf("Apply(gzip=%v) = %v; want success", gz, err)
				case tc.wantErr == fs.ErrNotExist && err == nil: // any error
					t.Fatalf("Apply(gzip=%v) = nil; want an error", gz)
				case tc.wantErr != nil && tc.wantErr != fs.ErrNotExist && !errors.Is(err, tc.wantErr):
					t.Fatalf("Apply(gzip=%v) = %v; want %v", gz, err, tc.wantErr)
				}
				if tc.check != nil {
					tc.check(t, dst)
				}
				outsideUntouched(t, outer)
				if _, err := os.Lstat("/tmp/pwned"); err == nil {
					t.Fatal("/tmp/pwned exists")
				}
			}
		})
	}
}

func TestApplyCorrupt(t *testing.T) {
	_, dst := sandboxDirs(t)
	data := makeTar(t, []entry{{name: "a", typ: tar.TypeReg, body: strings.Repeat("x", 2000)}})
	_, err := apply(t, dst, data[:1024], Options{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Apply(truncated) = %v; want %v", err, errdefs.ErrInvalidArgument)
	}
	_, err = apply(t, dst, []byte{0x1f, 0x8b, 1, 2, 3}, Options{})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("Apply(bad gzip) = %v; want %v", err, errdefs.ErrInvalidArgument)
	}
}

func TestWriteRoundTrip(t *testing.T) {
	src := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(src, "d/e"), 0o750))
	must(t, os.WriteFile(filepath.Join(src, "d/f"), []byte("hello"), 0o640))
	must(t, os.Link(filepath.Join(src, "d/f"), filepath.Join(src, "hl")))
	must(t, os.Symlink("/etc/passwd", filepath.Join(src, "abs")))
	must(t, os.Symlink("../..", filepath.Join(src, "d/up")))

	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()
	var buf bytes.Buffer
	if err := Write(&buf, root, "."); err != nil {
		t.Fatalf("Write(.) = %v", err)
	}
	outer, dst := sandboxDirs(t)
	n, err := apply(t, dst, buf.Bytes(), Options{})
	if err != nil || n != 5 {
		t.Fatalf("Apply(Write(.)) = %d, %v; want 5, nil", n, err)
	}
	outsideUntouched(t, outer)
	wantFile(t, dst, "d/f", "hello")
	wantFile(t, dst, "hl", "hello")
	a, _ := os.Stat(filepath.Join(dst, "d/f"))
	b, _ := os.Stat(filepath.Join(dst, "hl"))
	if !os.SameFile(a, b) {
		t.Errorf("hl and d/f are not the same file")
	}
	if a.Mode().Perm() != 0o640 {
		t.Errorf("mode(d/f) = %v; want 0640", a.Mode().Perm())
	}
	for name, want := range map[string]string{"abs": "/etc/passwd", "d/up": "../.."} {
		if l, err := os.Readlink(filepath.Join(dst, name)); err != nil || l != want {
			t.Errorf("Readlink(%q) = %q, %v; want %q", name, l, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dst, "d/e")); err != nil || fi.Mode().Perm() != 0o750 {
		t.Errorf("Stat(d/e) = %v, %v; want mode 0750", fi, err)
	}

	// A sub-path keeps its prefix; a path through a symlink is refused.
	buf.Reset()
	if err := Write(&buf, root, "d"); err != nil {
		t.Fatalf("Write(d) = %v", err)
	}
	names := tarNames(t, buf.Bytes())
	if want := "d/ d/e/ d/f d/up"; strings.Join(names, " ") != want {
		t.Errorf("Write(d) names = %q; want %q", names, want)
	}
	if err := Write(&bytes.Buffer{}, root, "d/up/etc"); err == nil {
		t.Errorf("Write(d/up/etc) = nil; want an error")
	}
}

func tarNames(t *testing.T, data []byte) []string {
	tr := tar.NewReader(bytes.NewReader(data))
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	return names
}

func wantFile(t *testing.T, dst, name, want string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dst, name))
	if err != nil || string(b) != want {
		t.Errorf("ReadFile(%q) = %q, %v; want %q", name, b, err, want)
	}
}

func gzipBytes(t testing.TB, data []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, _ = zw.Write(data)
	must(t, zw.Close())
	return buf.Bytes()
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
