package fsdiff

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
)

// mapLayer is a Layer in memory: whiteouts are character devices 0/0 (as
// MapFile{Mode: whiteout, Sys: &syscall.Stat_t{}}), opaque directories are
// listed apart.
type mapLayer struct {
	fs     fstest.MapFS
	opaque map[string]bool
}

func (l mapLayer) Lstat(name string) (fs.FileInfo, error) { return l.fs.Lstat(name) }
func (l mapLayer) Readlink(name string) (string, error)   { return l.fs.ReadLink(name) }
func (l mapLayer) Opaque(name string) (bool, error)       { return l.opaque[name], nil }
func (l mapLayer) Open(name string) (io.ReadCloser, error) {
	f, err := l.fs.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func (l mapLayer) ReadDir(name string) ([]string, error) {
	ents, err := l.fs.ReadDir(name)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out, err
}

const whiteoutMode = fs.ModeDevice | fs.ModeCharDevice

var (
	t0 = time.Unix(1_700_000_000, 0)
	t1 = t0.Add(time.Hour)
)

func file(s string, mode fs.FileMode, mt time.Time) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(s), Mode: mode, ModTime: mt}
}

func whiteout() *fstest.MapFile {
	return &fstest.MapFile{Mode: whiteoutMode, Sys: &syscall.Stat_t{}}
}

func dir(mode fs.FileMode) *fstest.MapFile { return &fstest.MapFile{Mode: fs.ModeDir | mode} }

// image is a base layer; upper a box's writable layer on it.
func image() mapLayer {
	return mapLayer{fs: fstest.MapFS{
		"etc":           dir(0o755),
		"bin":           dir(0o755),
		"src":           dir(0o755),
		"old":           dir(0o755),
		"untouched":     dir(0o755),
		"etc/passwd":    file("root\n", 0o644, t0),
		"etc/hosts":     file("127.0.0.1 localhost\n", 0o644, t0),
		"src/a.py":      file("print(1)\n", 0o644, t0),
		"src/keep.txt":  file("keep\n", 0o644, t0),
		"old/x/y":       file("1\n", 0o644, t0),
		"old/kept":      file("k\n", 0o644, t0),
		"bin/tool":      file("bin\x00ary\x01", 0o755, t0),
		"same.txt":      file("same\n", 0o644, t0),
		"forged.txt":    file("good\n", 0o644, t0),
		"link":          {Data: []byte("etc/hosts"), Mode: fs.ModeSymlink | 0o777},
		"gone/deep/f":   file("f\n", 0o644, t0),
		"untouched/big": file(strings.Repeat("x\n", 100), 0o644, t0),
	}}
}

func upper() mapLayer {
	return mapLayer{
		fs: fstest.MapFS{
			"etc":          dir(0o755),
			"etc/passwd":   file("root\nagent\n", 0o644, t1),
			"etc/hosts":    whiteout(),
			"src/a.py":     file("print(1)\n", 0o755, t0),
			"src/b.py":     file("print(2)", 0o644, t1),
			"old":          dir(0o755),
			"old/z":        file("z\n", 0o644, t1),
			"bin/tool":     file("bin\x00ary\x02more", 0o755, t1),
			"same.txt":     file("same\n", 0o644, t0),
			"forged.txt":   file("evil\n", 0o644, t0),
			"link":         {Data: []byte("etc/passwd"), Mode: fs.ModeSymlink | 0o777},
			"gone":         whiteout(),
			"new/dir/f":    file("new\n", 0o600, t1),
			"weird\nname":  file("w\n", 0o644, t1),
			"fifo":         {Mode: fs.ModeNamedPipe | 0o644},
			"private":      dir(0o700),
			"src":          dir(0o755),
			"bin":          dir(0o755),
			"new":          dir(0o755),
			"new/dir":      dir(0o755),
			"untouched":    dir(0o755),
			"etc/sub/file": file("s\n", 0o644, t1),
		},
		opaque: map[string]bool{"old": true},
	}
}

func walkAll(t *testing.T, s Stacks, o Options) []string {
	t.Helper()
	var got []string
	err := Walk(context.Background(), s, o, func(c Change) error {
		got = append(got, fmt.Sprintf("%c %s", c.Kind, c.Path))
		return nil
	})
	if err != nil {
		t.Fatalf("Walk: %v", err)
	}
	return got
}

func TestWalkAgainstImage(t *testing.T) {
	got := walkAll(t, Stacks{New: []Layer{upper()}, Shared: []Layer{image()}}, Options{})
	want := []string{
		"C bin/tool",
		"D etc/hosts",
		"C etc/passwd",
		"A etc/sub",
		"A etc/sub/file",
		"A fifo",
		"C forged.txt",
		"D gone",
		"D gone/deep",
		"D gone/deep/f",
		"C link",
		"A new",
		"A new/dir",
		"A new/dir/f",
		"D old/kept",
		"D old/x",
		"D old/x/y",
		"A old/z",
		"A private",
		"C src/a.py",
		"A src/b.py",
		"A weird\nname",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Walk (-want +got):\n%s", diff)
	}
}

func TestWalkReverse(t *testing.T) {
	// The image against the box: additions become deletions.
	got := walkAll(t, Stacks{Old: []Layer{upper()}, Shared: []Layer{image()}}, Options{Paths: []string{"new", "/gone/"}})
	want := []string{"A gone", "A gone/deep", "A gone/deep/f", "D new", "D new/dir", "D new/dir/f"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Walk (-want +got):\n%s", diff)
	}
}

func TestWalkFromSnapshot(t *testing.T) {
	// A snapshot took the upper; the box then changed one more file and
	// removed another.
	snap := upper()
	box := mapLayer{fs: fstest.MapFS{}, opaque: map[string]bool{"old": true}}
	for k, v := range snap.fs {
		box.fs[k] = v
	}
	box.fs["src/b.py"] = file("print(3)", 0o644, t1)
	box.fs["src/keep.txt"] = whiteout()
	got := walkAll(t, Stacks{Old: []Layer{snap}, New: []Layer{box}, Shared: []Layer{image()}}, Options{})
	want := []string{"C src/b.py", "D src/keep.txt"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Walk (-want +got):\n%s", diff)
	}
}

func TestWalkFilters(t *testing.T) {
	s := Stacks{New: []Layer{upper()}, Shared: []Layer{image()}}
	for _, tc := range []struct {
		name  string
		o     Options
		want  []string
		error bool
	}{
		{"glob base name", Options{Paths: []string{"*.py"}}, []string{"C src/a.py", "A src/b.py"}, false},
		{"dir", Options{Paths: []string{"etc/"}}, []string{"D etc/hosts", "C etc/passwd", "A etc/sub", "A etc/sub/file"}, false},
		{"file in dir", Options{Paths: []string{"/etc/sub/file"}}, []string{"A etc/sub/file"}, false},
		{"glob dir", Options{Paths: []string{"new/*"}}, []string{"A new/dir", "A new/dir/f"}, false},
		{"compared dir", Options{Dir: "/etc"}, []string{"D hosts", "C passwd", "A sub", "A sub/file"}, false},
		{"compared dir and path", Options{Dir: "etc/", Paths: []string{"sub"}}, []string{"A sub", "A sub/file"}, false},
		{"no match", Options{Paths: []string{"nothing"}}, nil, false},
		{"mount points", Options{Paths: []string{"new", "private", "etc/sub"}, MountPoints: []string{"/new/dir", "/private", "/etc/sub/file"}}, []string{"A etc/sub", "A etc/sub/file", "A new", "A new/dir/f"}, false},
		{"dotdot", Options{Paths: []string{"../etc"}}, nil, true},
		{"dir dotdot", Options{Dir: "/etc/../x"}, nil, true},
		{"dir missing", Options{Dir: "/nope"}, nil, true},
		{"dir is a file", Options{Dir: "/etc/passwd"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			err := Walk(context.Background(), s, tc.o, func(c Change) error {
				got = append(got, fmt.Sprintf("%c %s", c.Kind, c.Path))
				return nil
			})
			if (err != nil) != tc.error {
				t.Fatalf("Walk(%+v) error = %v; want error %v", tc.o, err, tc.error)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Walk(%+v) (-want +got):\n%s", tc.o, diff)
			}
		})
	}
}

// TestPatchApplies writes the image's files to a git checkout and checks
// that git apply takes the patch and yields the box's files.
func TestPatchApplies(t *testing.T) {
	git := requireGit(t)
	dir := t.TempDir()
	writeTree(t, dir, Stacks{Shared: []Layer{image()}})
	git(dir, "init", "-q")
	git(dir, "add", "-A")
	git(dir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "image")

	s := Stacks{New: []Layer{upper()}, Shared: []Layer{image()}}
	var patch bytes.Buffer
	p := NewPatch(&patch, PatchOptions{})
	if err := Walk(context.Background(), s, Options{}, p.Add); err != nil {
		t.Fatal(err)
	}
	pf := filepath.Join(t.TempDir(), "p.diff")
	if err := os.WriteFile(pf, patch.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	git(dir, "apply", "--check", pf)
	git(dir, "apply", pf)

	want := t.TempDir()
	writeTree(t, want, s)
	if d := treeDiff(t, want, dir); d != "" {
		t.Errorf("applied patch differs from the box's files:\n%s\npatch:\n%s", d, patch.String())
	}
	if n := p.Omitted(); len(n) != 0 {
		t.Errorf("Omitted() = %v; want none", n)
	}
	if got := p.Notes; len(got) != 1 || got[0].Path != "fifo" {
		t.Errorf("Notes = %v; want the fifo skipped", got)
	}
}

func TestPatchLimits(t *testing.T) {
	s := Stacks{New: []Layer{upper()}, Shared: []Layer{image()}}
	var out bytes.Buffer
	p := NewPatch(&out, PatchOptions{MaxFileBytes: 11, MaxBytes: 1 << 20})
	if err := Walk(context.Background(), s, Options{Paths: []string{"bin", "etc/passwd"}}, p.Add); err != nil {
		t.Fatal(err)
	}
	om := p.Omitted()
	if len(om) != 1 || om[0].Path != "bin/tool" {
		t.Fatalf("Omitted() = %v; want bin/tool", om)
	}
	if !strings.Contains(out.String(), NotePrefix+"omitted bin/tool: ") || !strings.Contains(out.String(), "+agent\n") {
		t.Errorf("patch lacks the note or the passwd change:\n%s", out.String())
	}

	out.Reset()
	p = NewPatch(&out, PatchOptions{MaxBytes: 10})
	if err := Walk(context.Background(), s, Options{Paths: []string{"etc/passwd"}}, p.Add); err != nil {
		t.Fatal(err)
	}
	if om := p.Omitted(); len(om) != 1 || !strings.Contains(om[0].Reason, "limit of 10 bytes") {
		t.Errorf("Omitted() = %v; want etc/passwd past the patch limit", om)
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{
		"a/b.txt":     "a/b.txt",
		"a\nb":        `"a\nb"`,
		`q"\`:         `"q\"\\"`,
		"caf\xc3\xa9": `"caf\303\251"`,
		"\x01":        `"\001"`,
	} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s; want %s", in, got, want)
		}
	}
}

func TestDiffLines(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"", "a\n"},
		{"a\nb\nc\n", "a\nc\n"},
		{"a\nb\nc\n", "x\ny\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\n2\nX\n4\n5\n6\n7\n8\n9\n10\nY\n12\n"},
		{"a\nb", "a\nb\n"},
		{"a b c d e f g", "g f e d c b a"},
	} {
		a, b := splitLines([]byte(strings.ReplaceAll(tc.a, " ", "\n"))), splitLines([]byte(strings.ReplaceAll(tc.b, " ", "\n")))
		ops := diffLines(a, b)
		var ra, rb []byte
		for _, o := range ops {
			if o.kind != '+' {
				ra = append(ra, o.line...)
			}
			if o.kind != '-' {
				rb = append(rb, o.line...)
			}
		}
		if !bytes.Equal(ra, bytes.Join(a, nil)) || !bytes.Equal(rb, bytes.Join(b, nil)) {
			t.Errorf("diffLines(%q, %q) does not rebuild both sides: %q", tc.a, tc.b, ops)
		}
	}
}

func requireGit(t *testing.T) func(dir string, args ...string) {
	t.Helper()
	bin, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	return func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// writeTree writes the merged view of s.New on s.Shared (regular files and
// symlinks) under dir.
func writeTree(t *testing.T, dir string, s Stacks) {
	t.Helper()
	err := Walk(context.Background(), Stacks{New: append(s.New, s.Shared...)}, Options{}, func(c Change) error {
		dst := filepath.Join(dir, filepath.FromSlash(c.Path))
		e := c.New
		switch {
		case e.Mode.IsDir():
			return os.MkdirAll(dst, 0o755)
		case e.Mode&fs.ModeSymlink != 0:
			return os.Symlink(e.Link, dst)
		case e.Mode.IsRegular():
			r, err := e.Open()
			if err != nil {
				return err
			}
			defer r.Close()
			b, err := io.ReadAll(r)
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, e.Mode.Perm()|0o600)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// treeDiff compares the files, symlinks and exec bits of two trees,
// ignoring .git and empty directories.
func treeDiff(t *testing.T, a, b string) string {
	t.Helper()
	read := func(root string) map[string]string {
		m := map[string]string{}
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == ".git" {
				return filepath.SkipDir
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				m[rel] = "-> " + l
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(p)
				m[rel] = fmt.Sprintf("%v %q", fi.Mode()&0o100 != 0, b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	return cmp.Diff(read(a), read(b))
}

// TestPatchStatOnePass checks that one walk feeding a writing Patch gives
// the same patch as a walk for the patch alone and, from Stat, the same
// files and notes as a second walk for the diffstat (a Patch with no
// writer), also when limits leave files out of the patch.
func TestPatchStatOnePass(t *testing.T) {
	s := Stacks{New: []Layer{upper()}, Shared: []Layer{image()}}
	for _, o := range []PatchOptions{{}, {MaxFileBytes: 11}, {MaxBytes: 10}, {MaxBytes: 200}} {
		t.Run(fmt.Sprintf("%+v", o), func(t *testing.T) {
			var patchOnly, onePass bytes.Buffer
			two := NewPatch(&patchOnly, o)
			if err := Walk(context.Background(), s, Options{}, two.Add); err != nil {
				t.Fatal(err)
			}
			stat := NewPatch(nil, o)
			if err := Walk(context.Background(), s, Options{}, stat.Add); err != nil {
				t.Fatal(err)
			}
			one := NewPatch(&onePass, o)
			if err := Walk(context.Background(), s, Options{}, one.Add); err != nil {
				t.Fatal(err)
			}
			if onePass.String() != patchOnly.String() || !reflect.DeepEqual(one.Notes, two.Notes) || !reflect.DeepEqual(one.Files, two.Files) {
				t.Errorf("one pass's patch differs from the patch pass's:\n%s\nwant\n%s", onePass.String(), patchOnly.String())
			}
			files, notes := one.Stat()
			if len(files) == 0 || !reflect.DeepEqual(files, stat.Files) || !reflect.DeepEqual(notes, stat.Notes) {
				t.Errorf("Stat() = %+v, %+v; want the stat pass's %+v, %+v", files, notes, stat.Files, stat.Notes)
			}
		})
	}
}
