package archive

import (
	"archive/tar"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fuzzNames are the pieces generated names and link targets are built from;
// "@OUT" becomes the absolute path of the directory around dst.
var fuzzNames = []string{"a", "b", "..", "/", ".", "@OUT", "canary", "dst", "a/b", "../..", "x/../..", "//", ".wh.a", ".wh..wh..opq", ".wh..", ".wh.canary"}

var fuzzTypes = []byte{tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeChar, tar.TypeFifo, tar.TypeBlock}

// genTar turns fuzz bytes into a tar archive: each entry takes a type, a mode,
// up to three name pieces and up to three link pieces.
func genTar(t *testing.T, data []byte, outer string) []byte {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return int(b)
	}
	piece := func() string {
		var parts []string
		for range next()%3 + 1 {
			parts = append(parts, strings.ReplaceAll(fuzzNames[next()%len(fuzzNames)], "@OUT", outer))
		}
		return strings.Join(parts, "/")
	}
	var entries []entry
	for len(data) > 0 && len(entries) < 32 {
		e := entry{typ: fuzzTypes[next()%len(fuzzTypes)], mode: int64(next()) << 4}
		e.name = piece()
		if e.typ != tar.TypeDir { // tar.Writer refuses a trailing slash here
			e.name = strings.TrimRight(e.name, "/")
			if e.name == "" {
				e.name = "z"
			}
		}
		e.link = piece()
		if e.typ == tar.TypeReg {
			e.body = "data"
		}
		entries = append(entries, e)
	}
	return makeTar(t, entries)
}

func FuzzApply(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0})                        // one file
	f.Add([]byte{2, 0, 0, 5, 0, 5, 0, 0, 0, 0, 0})   // symlink to @OUT, file under it
	f.Add([]byte{2, 0, 0, 2, 0, 9, 0, 0, 0, 0, 0})   // symlink "..", file under it
	f.Add([]byte{3, 0, 0, 0, 1, 2, 2, 6, 0, 0, 0})   // hard link to ../canary
	f.Add([]byte{2, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0})   // symlink a -> canary, then file a
	f.Add([]byte{1, 0xff, 0, 0, 0, 0, 0, 0xff, 0})   // dir with odd mode
	f.Add([]byte{0, 0x40, 0, 0, 0, 0, 4, 0x40, 0x2}) // setuid file
	f.Add([]byte{0, 0, 0, 12, 0, 0, 0, 0, 0})        // whiteout .wh.a
	f.Add([]byte{1, 0, 1, 0, 13, 0, 0, 0, 0})        // a/.wh..wh..opq as a directory entry
	f.Add([]byte{2, 0, 0, 0, 0, 2, 0, 0, 1, 0, 15})  // symlink a -> .., then a/.wh.canary
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, whiteouts := range []bool{false, true} {
			fuzzApply(t, data, whiteouts)
		}
	})
}

// fuzzApply applies the archive made from data and checks that nothing
// escaped dst and that dst holds no device (but whiteouts), fifo, setuid or
// setgid file.
func fuzzApply(t *testing.T, data []byte, whiteouts bool) {
	outer, dst := sandboxDirs(t)
	var tarball []byte
	if len(data) > 0 && data[0] == 0xaa {
		tarball = data[1:] // raw bytes: exercise the parser
	} else {
		tarball = genTar(t, data, outer)
	}
	_, _ = apply(t, dst, tarball, Options{MaxBytes: 1 << 20, MaxEntries: 64, Whiteouts: whiteouts})
	outsideUntouched(t, outer)
	var v [4]byte
	if _, err := unix.Lgetxattr(outer, opaqueXattr, v[:]); err == nil {
		t.Fatalf("%s was made opaque", outer)
	}
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		m := fi.Mode()
		if whiteouts && isWhiteout(fi) && m.Perm() == 0 {
			return nil
		}
		if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s has mode %v (whiteouts %v)", p, m, whiteouts)
		}
		if m.IsDir() && m.Perm()&0o700 != 0o700 {
			_ = os.Chmod(p, m.Perm()|0o700) // let the walk and t.TempDir go in
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk dst: %v", err)
	}
}
