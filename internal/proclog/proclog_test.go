package proclog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func newStore(t *testing.T, perProc, perBox int64) *Store {
	t.Helper()
	s, err := New(Config{MaxBytesPerProcess: perProc, MaxBytesPerBox: perBox})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// read returns the output kept of pid, stdout and stderr apart and
// together, and where it starts.
func read(t *testing.T, s *Store, dir string, pid uint32, to uint64) (out, errOut, all string, start uint64) {
	t.Helper()
	var o, e, a strings.Builder
	start, err := s.Read(dir, pid, to, func(c Chunk) error {
		a.Write(c.Data)
		if c.Kind == Stderr {
			e.Write(c.Data)
		} else {
			o.Write(c.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Read(%d) = %v", pid, err)
	}
	return o.String(), e.String(), a.String(), start
}

func du(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	ents, _ := os.ReadDir(filepath.Join(dir, Dir))
	for _, e := range ents {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		n += info.Size()
	}
	return n
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, 1<<20, 4<<20)
	w := func(first uint64, cs ...Chunk) {
		t.Helper()
		if err := s.Write(dir, 7, 1000, first, cs); err != nil {
			t.Fatalf("Write(%d) = %v", first, err)
		}
	}
	w(0, Chunk{Kind: Stdout, Data: []byte("hello ")}, Chunk{Kind: Stderr, Data: []byte("oops ")})
	w(6, Chunk{Kind: Stderr, Data: []byte("oops again ")}) // overlaps: "oops " is kept
	w(22, Chunk{Kind: Stdout, Data: []byte("world")})
	w(30, Chunk{Kind: Stdout, Data: []byte("!")}) // 3 bytes lost before it
	if got := s.Next(dir, 7, 1000); got != 31 {
		t.Errorf("Next = %d; want 31", got)
	}
	if got := s.Next(dir, 7, 2000); got != 0 {
		t.Errorf("Next of another process with pid 7 = %d; want 0", got)
	}
	out, errOut, all, start := read(t, s, dir, 7, 0)
	if out != "hello world!" || errOut != "oops again " || all != "hello oops again world!" || start != 0 {
		t.Errorf("Read = %q, %q, %q from %d; want %q, %q, %q from 0", out, errOut, all, start, "hello world!", "oops again ", "hello oops again world!")
	}
	if _, _, all, _ := read(t, s, dir, 7, 8); all != "hello oo" {
		t.Errorf("Read up to 8 = %q; want %q", all, "hello oo")
	}
	// A daemon restart: a new Store goes on where the file ends.
	s2 := newStore(t, 1<<20, 4<<20)
	if got := s2.Next(dir, 7, 1000); got != 31 {
		t.Errorf("Next after a restart = %d; want 31", got)
	}
	if err := s2.Write(dir, 7, 1000, 31, []Chunk{{Kind: Stdout, Data: []byte("?")}}); err != nil {
		t.Fatal(err)
	}
	if _, _, all, _ := read(t, s2, dir, 7, 0); all != "hello oops again world!?" {
		t.Errorf("Read after a restart = %q", all)
	}
	// Another process with the same pid replaces the files.
	if err := s2.Write(dir, 7, 3000, 0, []Chunk{{Kind: Stdout, Data: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	if _, _, all, _ := read(t, s2, dir, 7, 0); all != "new" {
		t.Errorf("Read of a new process with that pid = %q; want %q", all, "new")
	}
	if _, err := s2.Read(dir, 8, 0, func(Chunk) error { return nil }); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Read(8) = %v; want not found", err)
	}
}

// TestRotation floods one process: its files stay within their bound
// and keep the newest output.
func TestRotation(t *testing.T) {
	for _, size := range []int{7, 100, 5000, 300 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			dir := t.TempDir()
			const perProc = 64 << 10
			s := newStore(t, perProc, 1<<20)
			var all bytes.Buffer
			var off uint64
			for i := 0; all.Len() < 4*perProc; i++ {
				d := bytes.Repeat([]byte{byte('a' + i%26)}, size)
				if err := s.Write(dir, 1, 1, off, []Chunk{{Kind: Stdout, Data: d}}); err != nil {
					t.Fatal(err)
				}
				all.Write(d)
				off += uint64(len(d))
				if n := du(t, dir); n > perProc {
					t.Fatalf("after %d bytes: files of %d bytes; want at most %d", all.Len(), n, perProc)
				}
			}
			_, _, got, start := read(t, s, dir, 1, 0)
			if start == 0 || start+uint64(len(got)) != off || !strings.HasSuffix(all.String(), got) {
				t.Errorf("Read = %d bytes from %d, a suffix: %v; want the newest up to %d", len(got), start, strings.HasSuffix(all.String(), got), off)
			}
			// A frame header per write of size bytes.
			if want := perProc / 2 * size / (size + headerLen) / 2; len(got) < want {
				t.Errorf("Read = %d bytes; want at least %d", len(got), want)
			}
			if s.Dropped(dir) != 0 {
				t.Errorf("Dropped = %d; want 0", s.Dropped(dir))
			}
		})
	}
}

// TestBoxBound floods a box with many processes: all its files stay
// within the box's bound and the output over it is counted.
func TestBoxBound(t *testing.T) {
	dir := t.TempDir()
	const perBox = 256 << 10
	s := newStore(t, 64<<10, perBox)
	offs := map[uint32]uint64{}
	var total uint64
	for i := range 2000 {
		pid := uint32(i%40 + 1)
		d := bytes.Repeat([]byte("x"), 777)
		if err := s.Write(dir, pid, 5, offs[pid], []Chunk{{Kind: Stderr, Data: d}}); err != nil {
			t.Fatal(err)
		}
		offs[pid] += uint64(len(d))
		total += uint64(len(d))
		if n := du(t, dir); n > perBox {
			t.Fatalf("after %d writes: files of %d bytes; want at most %d", i+1, n, perBox)
		}
	}
	if s.Dropped(dir) == 0 || s.Dropped(dir) >= total {
		t.Errorf("Dropped = %d of %d; want some", s.Dropped(dir), total)
	}
	// A copy resumes after the dropped bytes rather than asking them
	// again.
	if got := s.Next(dir, 40, 5); got != offs[40] {
		t.Errorf("Next = %d; want %d", got, offs[40])
	}
}

// TestRemovedBox: a box removed (its state directory gone) gets no file.
func TestRemovedBox(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	s := newStore(t, 1<<20, 1<<20)
	if err := s.Write(dir, 1, 1, 0, []Chunk{{Kind: Stdout, Data: []byte("x")}}); err == nil {
		t.Errorf("Write to a removed box = nil; want an error")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat(%s) = %v; want not exist", dir, err)
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{}, {MaxBytesPerProcess: 1 << 20, MaxBytesPerBox: 1 << 10}, {MaxBytesPerProcess: 10, MaxBytesPerBox: 1 << 20}} {
		if _, err := New(c); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v; want invalid argument", c, err)
		}
	}
}

// TestReadWhileWriting: a Read during writes and rotations gets a
// contiguous piece of the output, never a mix of two files' frames.
func TestReadWhileWriting(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, 64<<10, 1<<20)
	var all bytes.Buffer
	for i := range 20000 {
		fmt.Fprintf(&all, "%d\n", i)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b := all.Bytes()
		for off := 0; off < len(b); off += 100 {
			if err := s.Write(dir, 3, 9, uint64(off), []Chunk{{Kind: Stdout, Data: b[off:min(off+100, len(b))]}}); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for reads := 0; ; reads++ {
		select {
		case <-done:
			if reads == 0 {
				t.Log("no read overlapped the writes")
			}
			return
		default:
		}
		var pos uint64
		first := true
		start, err := s.Read(dir, 3, 0, func(c Chunk) error {
			if !first && c.Offset != pos {
				return fmt.Errorf("chunk at %d after one that ended at %d", c.Offset, pos)
			}
			first = false
			if want := all.Bytes()[c.Offset : c.Offset+uint64(len(c.Data))]; !bytes.Equal(c.Data, want) {
				return fmt.Errorf("chunk at %d is not the output there", c.Offset)
			}
			pos = c.Offset + uint64(len(c.Data))
			return nil
		})
		if errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("Read from %d: %v", start, err)
		}
	}
}

// TestSlowReader: a Read whose caller waits (a slow API client) holds up
// no Write: here a Write from within Read's callback.
func TestSlowReader(t *testing.T) {
	dir := t.TempDir()
	s := newStore(t, 64<<10, 1<<20)
	if err := s.Write(dir, 1, 1, 0, []Chunk{{Kind: Stdout, Data: []byte("a")}}); err != nil {
		t.Fatal(err)
	}
	_, err := s.Read(dir, 1, 0, func(Chunk) error {
		return s.Write(dir, 2, 1, 0, []Chunk{{Kind: Stdout, Data: []byte("b")}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, all, _ := read(t, s, dir, 2, 0); all != "b" {
		t.Errorf("Read(2) = %q; want %q", all, "b")
	}
}
