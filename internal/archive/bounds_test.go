package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"
)

// putNum writes v into the numeric header field b: octal when it fits,
// base-256 (GNU) otherwise.
func putNum(b []byte, v int64) {
	if s := fmt.Sprintf("%0*o", len(b)-1, v); len(s) == len(b)-1 {
		copy(b, s+"\x00")
		return
	}
	clear(b)
	binary.BigEndian.PutUint64(b[len(b)-8:], uint64(v))
	b[0] = 0x80
}

// rawHeader builds a 512-byte tar header by hand, for what tar.Writer
// refuses to write (GNU sparse files, chains of PAX headers, unknown
// types). patch may fill more fields before the checksum is computed.
func rawHeader(name string, typ byte, size int64, patch func(b []byte)) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	putNum(b[108:116], 0)
	putNum(b[116:124], 0)
	putNum(b[124:136], size)
	putNum(b[136:148], 0)
	b[156] = typ
	copy(b[257:265], "ustar\x0000")
	if patch != nil {
		patch(b)
	}
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// pad512 pads data to a multiple of 512 bytes.
func pad512(data []byte) []byte {
	return append(data, make([]byte, (512-len(data)%512)%512)...)
}

// gnuSparse returns an old GNU sparse entry of logical size realSize
// holding data (a multiple of 512 bytes) at offset.
func gnuSparse(name string, realSize, offset int64, data []byte) []byte {
	hdr := rawHeader(name, tar.TypeGNUSparse, int64(len(data)), func(b []byte) {
		copy(b[257:265], "ustar  \x00")
		putNum(b[386:398], offset)
		putNum(b[398:410], int64(len(data)))
		putNum(b[483:495], realSize)
	})
	return append(hdr, data...)
}

// paxRecord formats one PAX record, whose length counts itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3
	for {
		r := fmt.Sprintf("%d %s=%s\n", n, k, v)
		if len(r) == n {
			return r
		}
		n = len(r)
	}
}

// endTar is the end-of-archive marker.
var endTar = make([]byte, 1024)

func TestApplyBounds(t *testing.T) {
	const tib = 1 << 40
	paxSparse := func(realSize int64) []byte {
		recs := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
			paxRecord("GNU.sparse.name", "big") + paxRecord("GNU.sparse.realsize", fmt.Sprint(realSize))
		out := append(rawHeader("PaxHeaders/big", tar.TypeXHeader, int64(len(recs)), nil), pad512([]byte(recs))...)
		body := append(pad512([]byte("1\n0\n512\n")), bytes.Repeat([]byte("x"), 512)...)
		out = append(out, rawHeader("GNUSparseFile.0/big", tar.TypeReg, int64(len(body)), nil)...)
		return append(out, body...)
	}
	// Bombs are built from gzip members repeated: gzip.Reader reads
	// concatenated members as one stream, and the test stays fast.
	zerosGzip := func(n int64) []byte { // n zero bytes in one file
		var hdr bytes.Buffer
		tw := tar.NewWriter(&hdr)
		must(t, tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: n}))
		out := gzipBytes(t, hdr.Bytes())
		mib := gzipBytes(t, make([]byte, 1<<20))
		for range n >> 20 {
			out = append(out, mib...)
		}
		return append(out, gzipBytes(t, endTar)...)
	}
	paxChain := func(headers int) []byte { // PAX headers with no entry after them
		rec := paxRecord("comment", strings.Repeat("z", 60<<10))
		one := gzipBytes(t, append(rawHeader("PaxHeaders/big", tar.TypeXHeader, int64(len(rec)), nil), pad512([]byte(rec))...))
		return bytes.Repeat(one, headers)
	}
	tests := []struct {
		name string
		data []byte
		opts Options
	}{
		{"giant GNU sparse header", append(gnuSparse("big", tib, 0, make([]byte, 512)), endTar...), Options{}},
		{"giant PAX sparse header", append(paxSparse(tib), endTar...), Options{}},
		{"sparse header over a small bound", append(gnuSparse("big", 2<<20, 0, make([]byte, 512)), endTar...), Options{MaxBytes: 1 << 20}},
		{"giant unknown entry type", append(rawHeader("big", 'Z', 2<<20, nil), endTar...), Options{MaxBytes: 1 << 20}},
		{"decompression bomb", zerosGzip(64 << 20), Options{MaxBytes: 1 << 20}},
		{"endless PAX headers", paxChain(64), Options{MaxBytes: 1 << 20, MaxEntries: 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			outer, dst := sandboxDirs(t)
			n, err := apply(t, dst, tc.data, tc.opts)
			if !errors.Is(err, ErrTooLarge) || n != 0 {
				t.Fatalf("Apply = %d, %v; want 0, %v", n, err, ErrTooLarge)
			}
			if ents, _ := os.ReadDir(dst); len(ents) != 0 {
				t.Errorf("dst holds %d entries; want none", len(ents))
			}
			outsideUntouched(t, outer)
		})
	}
}

func TestApplyCanceled(t *testing.T) {
	_, dst := sandboxDirs(t)
	root, err := os.OpenRoot(dst)
	must(t, err)
	defer root.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	data := makeTar(t, []entry{{name: "a", typ: tar.TypeReg, body: "x"}})
	if _, err := Apply(ctx, root, bytes.NewReader(data), Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Apply(canceled) = %v; want %v", err, context.Canceled)
	}
}

// diskBytes returns the bytes allocated on disk for the file at p.
func diskBytes(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	must(t, err)
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}

func TestApplySparse(t *testing.T) {
	const mib = 1 << 20
	hole := make([]byte, 4*mib)
	plain := string(hole) + "hello" + string(hole)
	gnuData := bytes.Repeat([]byte("s"), 512)
	gnuWant := make([]byte, mib)
	copy(gnuWant[mib/2:], gnuData)
	tests := []struct {
		name string
		data []byte
		file string
		want []byte
	}{
		{"zero runs of a plain file", makeTar(t, []entry{{name: "f", typ: tar.TypeReg, body: plain}}), "f", []byte(plain)},
		{"GNU sparse file with a trailing hole", append(gnuSparse("g", mib, mib/2, gnuData), endTar...), "g", gnuWant},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, dst := sandboxDirs(t)
			n, err := apply(t, dst, tc.data, Options{})
			if err != nil || n != int64(len(tc.want)) {
				t.Fatalf("Apply = %d, %v; want %d, nil", n, err, len(tc.want))
			}
			got, err := os.ReadFile(filepath.Join(dst, tc.file))
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("ReadFile(%q) = %d bytes, %v; want the %d bytes of the archive", tc.file, len(got), err, len(tc.want))
			}
			if used := diskBytes(t, filepath.Join(dst, tc.file)); used > 256<<10 {
				t.Errorf("%s uses %d bytes on disk; want holes (at most 256 KiB)", tc.file, used)
			}
		})
	}
}

func TestApplyWhiteoutNamesRefused(t *testing.T) {
	for _, name := range []string{".wh.", ".wh..", "d/.wh...", ".wh..wh.plnk", "d/.wh.x/f", ".wh.x/.wh.y"} {
		t.Run(name, func(t *testing.T) {
			outer, dst := sandboxDirs(t)
			data := makeTar(t, []entry{{name: name, typ: tar.TypeReg}})
			if _, err := apply(t, dst, data, Options{Whiteouts: true}); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Apply(%q) = %v; want %v", name, err, errdefs.ErrInvalidArgument)
			}
			err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
				if err == nil && strings.HasPrefix(d.Name(), ".wh.") {
					t.Errorf("%s was created", p)
				}
				return err
			})
			must(t, err)
			outsideUntouched(t, outer)
		})
	}
}
