// Package proclog keeps the output of a box's managed processes in log
// files on the host, so that it outlives the agent's ring buffer: the
// daemon copies each command's new output there (from the byte offset it
// has, see ConnectRequest.from_offset) and `corral logs` reads the start
// back from the file when the ring no longer holds it.
//
// The files live in the box's state directory, <dir>/logs/<pid>.log,
// never in the box: the box can neither see them nor fill the host's disk
// through them. Each process's files are bounded: the file is rotated at
// half of MaxBytesPerProcess (one .1 file is kept), and all files of a box
// together stop growing at MaxBytesPerBox (the bytes over it are counted
// as dropped).
//
// A file is a sequence of frames as docker's multiplexed attach stream:
// an 8-byte header {kind, 0, 0, 0, size (4 bytes, big endian)} and size
// bytes. Kind 1 is stdout (and a terminal's output), 2 stderr; kind
// frameStart (first in every file) carries the output offset of the bytes
// that follow and the process's start time, and kind frameGap says size
// bytes of output were lost (the ring wrapped between two copies).
package proclog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/containerd/errdefs"
)

// Kind is the stream a chunk of output came from.
type Kind uint8

// The kinds of output, as docker's stdcopy numbers them.
const (
	Stdout Kind = 1
	Stderr Kind = 2
)

const (
	frameStart = 0xfe
	frameGap   = 0xff
	headerLen  = 8
	startLen   = 16
	// maxFrame bounds a frame's payload when a file is read back.
	maxFrame = 1 << 20
)

// Dir is the directory of a box's log files under its state directory.
const Dir = "logs"

// Chunk is a piece of output.
type Chunk struct {
	Kind Kind
	Data []byte
	// Offset is the output offset of Data (set by Read).
	Offset uint64
}

// Defaults and bounds of Config.
const (
	DefaultMaxBytesPerProcess = 8 << 20
	DefaultMaxBytesPerBox     = 64 << 20
	// MinMaxBytes is the least MaxBytesPerProcess.
	MinMaxBytes = 64 << 10
)

// Config bounds the files.
type Config struct {
	// MaxBytesPerProcess bounds a process's files: the file is rotated
	// at half of it, keeping one .1 file.
	MaxBytesPerProcess int64
	// MaxBytesPerBox bounds all files of a box.
	MaxBytesPerBox int64
}

// Store writes the log files. It is safe for concurrent use.
type Store struct {
	cfg   Config
	mu    sync.Mutex
	boxes map[string]*box // by state directory
}

// box is the state of one box's files.
type box struct {
	size    int64 // bytes of all its files
	dropped uint64
	procs   map[uint32]*file
}

// file is the state of one process's files.
type file struct {
	started int64  // the process's start, in Unix ms
	next    uint64 // output offset of the next byte to write
	end     uint64 // output offset the current file ends at
	size    int64  // bytes of the current file
	rotated int64  // bytes of the .1 file
}

// New returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.MaxBytesPerProcess < MinMaxBytes || cfg.MaxBytesPerBox < cfg.MaxBytesPerProcess {
		return nil, fmt.Errorf("proclog: max bytes per process %d must be at least %d and at most max bytes per box %d: %w",
			cfg.MaxBytesPerProcess, MinMaxBytes, cfg.MaxBytesPerBox, errdefs.ErrInvalidArgument)
	}
	return &Store{cfg: cfg, boxes: map[string]*box{}}, nil
}

// Path returns the file of process pid in box state directory dir.
func Path(dir string, pid uint32) string {
	return filepath.Join(dir, Dir, strconv.FormatUint(uint64(pid), 10)+".log")
}

// Next returns the output offset of process pid (started at started,
// Unix ms) that the files of box state directory dir end at: where the
// next copy starts.
func (s *Store) Next(dir string, pid uint32, started int64) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fileLocked(dir, pid)
	if f.started != started {
		return 0
	}
	return f.next
}

// Dropped returns the bytes of output of box state directory dir that
// were not written because the box's files were full.
func (s *Store) Dropped(dir string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[dir]; b != nil {
		return b.dropped
	}
	return 0
}

// Write appends chunks, the output of process pid (started at started,
// Unix ms) from offset first on, to its file in box state directory dir.
// Output between the file's end and first was lost and is recorded as a
// gap; output before the file's end is skipped, and of more than
// MaxBytesPerProcess only the last MaxBytesPerProcess bytes are kept (the
// rest would be rotated away at once). The logs directory is made if need
// be, but not dir: a box removed meanwhile gets no file.
func (s *Store) Write(dir string, pid uint32, started int64, first uint64, chunks []Chunk) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxLocked(dir)
	f := s.fileLocked(dir, pid)
	w := &writer{s: s, b: b, f: f, p: Path(dir, pid), dir: dir, end: f.end}
	if f.started != started {
		// Another process with that pid (or none yet): start over.
		b.size -= f.size + f.rotated
		os.Remove(w.p + ".1")
		os.Remove(w.p)
		*f = file{started: started}
	}
	var total uint64
	for _, c := range chunks {
		total += uint64(len(c.Data))
	}
	end := first + total
	if end <= f.next {
		return nil
	}
	// Skip what the file has and what would not survive the rotation.
	skip := max(f.next, end-min(end, uint64(s.cfg.MaxBytesPerProcess)))
	off := first
	for _, c := range chunks {
		d := c.Data
		if off+uint64(len(d)) <= skip {
			off += uint64(len(d))
			continue
		}
		if off < skip {
			d = d[skip-off:]
			off = skip
		}
		for len(d) > 0 {
			n := min(len(d), w.room())
			if err := w.frame(byte(c.Kind), off, d[:n]); err != nil {
				return err
			}
			d = d[n:]
			off += uint64(n)
		}
	}
	return w.flush()
}

// writer appends frames to a process's file, rotating it at half of
// MaxBytesPerProcess.
type writer struct {
	s   *Store
	b   *box
	f   *file
	p   string
	dir string
	buf []byte
	end uint64 // output offset the file and buf end at
}

// room returns the bytes of output the next frame may carry without a
// rotation, or the most a frame may carry when that is none.
func (w *writer) room() int {
	half := w.s.cfg.MaxBytesPerProcess / 2
	over := int64(headerLen + headerLen + startLen) // a gap and a start too
	if r := half - w.f.size - int64(len(w.buf)) - over; r > 0 {
		return int(min(r, maxFrame))
	}
	return int(min(half-over, maxFrame))
}

// frame adds a frame of data, output from offset off on, after a gap
// frame if the file ends before off.
func (w *writer) frame(kind byte, off uint64, data []byte) error {
	half := w.s.cfg.MaxBytesPerProcess / 2
	if w.f.size+int64(len(w.buf)) > 0 && w.f.size+int64(len(w.buf))+int64(headerLen+len(data)) > half {
		if err := w.flush(); err != nil {
			return err
		}
		if err := w.rotate(); err != nil {
			return err
		}
	}
	if w.f.size == 0 && len(w.buf) == 0 {
		w.buf = appendStart(w.buf, off, w.f.started)
	} else if off > w.end {
		w.buf = appendHeader(w.buf, frameGap, off-w.end)
	}
	w.buf = appendHeader(w.buf, kind, uint64(len(data)))
	w.buf = append(w.buf, data...)
	w.end = off + uint64(len(data))
	w.f.next = max(w.f.next, w.end)
	return nil
}

func (w *writer) rotate() error {
	if w.f.size == 0 {
		return nil
	}
	if err := os.Rename(w.p, w.p+".1"); err != nil {
		return fmt.Errorf("rotate output log: %w", err)
	}
	w.b.size -= w.f.rotated
	w.f.rotated, w.f.size = w.f.size, 0
	return nil
}

// flush writes the frames added, or counts them as dropped when the
// box's files are full.
func (w *writer) flush() error {
	buf := w.buf
	w.buf = w.buf[:0]
	if len(buf) == 0 {
		return nil
	}
	if w.b.size+int64(len(buf)) > w.s.cfg.MaxBytesPerBox {
		w.b.dropped += outputIn(buf)
		w.end = w.f.end
		return nil
	}
	if err := os.Mkdir(filepath.Join(w.dir, Dir), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("output log: %w", err)
	}
	fd, err := os.OpenFile(w.p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("output log: %w", err)
	}
	n, err := fd.Write(buf)
	if cerr := fd.Close(); err == nil {
		err = cerr
	}
	w.f.size += int64(n)
	w.b.size += int64(n)
	if err != nil {
		// A torn frame ends the file when it is read.
		w.end = w.f.end
		return fmt.Errorf("output log: %w", err)
	}
	w.f.end = w.end
	return nil
}

// outputIn returns the bytes of output in frames buf.
func outputIn(buf []byte) uint64 {
	var n uint64
	for len(buf) >= headerLen {
		size := uint64(binary.BigEndian.Uint32(buf[4:]))
		if buf[0] == byte(Stdout) || buf[0] == byte(Stderr) {
			n += size
		}
		buf = buf[min(uint64(len(buf)), headerLen+size):]
	}
	return n
}

// Forget drops what the Store knows of box state directory dir (the box
// was removed, with its files).
func (s *Store) Forget(dir string) {
	s.mu.Lock()
	delete(s.boxes, dir)
	s.mu.Unlock()
}

// Boxes returns the state directories the Store knows.
func (s *Store) Boxes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	dirs := make([]string, 0, len(s.boxes))
	for d := range s.boxes {
		dirs = append(dirs, d)
	}
	return dirs
}

func (s *Store) boxLocked(dir string) *box {
	b := s.boxes[dir]
	if b == nil {
		b = &box{procs: map[uint32]*file{}}
		// After a restart: count the files there are.
		ents, _ := os.ReadDir(filepath.Join(dir, Dir))
		for _, e := range ents {
			if info, err := e.Info(); err == nil {
				b.size += info.Size()
			}
		}
		s.boxes[dir] = b
	}
	return b
}

func (s *Store) fileLocked(dir string, pid uint32) *file {
	b := s.boxLocked(dir)
	f := b.procs[pid]
	if f == nil {
		f = &file{started: -1}
		p := Path(dir, pid)
		if info, err := os.Stat(p + ".1"); err == nil {
			f.rotated = info.Size()
		}
		if st, err := scan(p); err == nil {
			f.started, f.next, f.end, f.size = st.started, st.end, st.end, st.size
		}
		b.procs[pid] = f
	}
	return f
}

func appendHeader(buf []byte, kind byte, size uint64) []byte {
	return append(buf, kind, 0, 0, 0, byte(size>>24), byte(size>>16), byte(size>>8), byte(size))
}

func appendStart(buf []byte, off uint64, started int64) []byte {
	buf = appendHeader(buf, frameStart, startLen)
	buf = binary.BigEndian.AppendUint64(buf, off)
	return binary.BigEndian.AppendUint64(buf, uint64(started))
}

// fileState is what a file says of itself.
type fileState struct {
	started    int64
	start, end uint64 // output offsets
	size       int64
}

// scan reads the file at p, calling fn (when not nil) with each chunk of
// output and its offset.
func scan(p string, fns ...func(off uint64, c Chunk) error) (fileState, error) {
	fd, err := os.Open(p)
	if err != nil {
		return fileState{started: -1}, err
	}
	defer fd.Close()
	return scanFile(fd, p, fns...)
}

// scanFile is scan of the open file fd, named p.
func scanFile(fd io.Reader, p string, fns ...func(off uint64, c Chunk) error) (fileState, error) {
	st := fileState{started: -1}
	r := bufio.NewReader(fd)
	var hdr [headerLen]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) && !first {
				return st, nil
			}
			// A torn last frame (a crash while writing) ends the file.
			return st, nilIf(!first && errors.Is(err, io.ErrUnexpectedEOF), err)
		}
		size := uint64(binary.BigEndian.Uint32(hdr[4:]))
		kind := hdr[0]
		if first != (kind == frameStart) || (kind == frameStart && size != startLen) || size > maxFrame {
			return st, fmt.Errorf("output log %s: bad frame: %w", p, errdefs.ErrDataLoss)
		}
		if kind == frameGap {
			st.end += size
			st.size += headerLen
			continue
		}
		data := make([]byte, size)
		if _, err := io.ReadFull(r, data); err != nil {
			return st, nilIf(errors.Is(err, io.ErrUnexpectedEOF), err)
		}
		st.size += headerLen + int64(size)
		switch Kind(kind) {
		case frameStart:
			st.start = binary.BigEndian.Uint64(data)
			st.end = st.start
			st.started = int64(binary.BigEndian.Uint64(data[8:]))
		case Stdout, Stderr:
			for _, fn := range fns {
				if err := fn(st.end, Chunk{Kind: Kind(kind), Data: data}); err != nil {
					return st, err
				}
			}
			st.end += size
		default:
			return st, fmt.Errorf("output log %s: bad frame kind %d: %w", p, kind, errdefs.ErrDataLoss)
		}
	}
}

func nilIf(cond bool, err error) error {
	if cond {
		return nil
	}
	return err
}

// Read calls fn with the output of process pid kept in the files of box
// state directory dir, oldest first, up to output offset to (0: all of
// it), and returns the offset of the first byte kept.
// errdefs.ErrNotFound when there is no file. The files are opened under
// the Store's lock (a rotation then renames them under Read, which reads
// on) and read without it: a slow reader holds up no copy.
func (s *Store) Read(dir string, pid uint32, to uint64, fn func(Chunk) error) (start uint64, err error) {
	p := Path(dir, pid)
	s.mu.Lock()
	cur, errCur := os.Open(p)
	old, errOld := os.Open(p + ".1")
	s.mu.Unlock()
	for _, fd := range []*os.File{cur, old} {
		if fd != nil {
			defer fd.Close()
		}
	}
	if errCur != nil && !errors.Is(errCur, fs.ErrNotExist) {
		return 0, fmt.Errorf("output log: %w", errCur)
	}
	if errOld != nil && !errors.Is(errOld, fs.ErrNotExist) {
		return 0, fmt.Errorf("output log: %w", errOld)
	}
	// Which files, and where they start: the .1 file counts only when it
	// is of the same process.
	var files []*os.File
	var names []string
	var curSt fileState
	if cur != nil {
		if curSt, err = scanFile(cur, p); err != nil {
			return 0, err
		}
		start = curSt.start
		files, names = []*os.File{cur}, []string{p}
	}
	if old != nil {
		st, err := scanFile(old, p+".1")
		if err != nil {
			return 0, err
		}
		if cur == nil || st.started == curSt.started {
			start = st.start
			files, names = append([]*os.File{old}, files...), append([]string{p + ".1"}, names...)
		}
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("output log of pid %d: %w", pid, errdefs.ErrNotFound)
	}
	pos := start
	emit := func(off uint64, c Chunk) error {
		if off < pos {
			if off+uint64(len(c.Data)) <= pos {
				return nil
			}
			c.Data = c.Data[pos-off:]
			off = pos
		}
		if to > 0 && off+uint64(len(c.Data)) > to {
			if off >= to {
				return nil
			}
			c.Data = c.Data[:to-off]
		}
		pos = off + uint64(len(c.Data))
		c.Offset = off
		return fn(c)
	}
	for i, fd := range files {
		if _, err := fd.Seek(0, io.SeekStart); err != nil {
			return 0, fmt.Errorf("output log: %w", err)
		}
		if _, err := scanFile(fd, names[i], emit); err != nil {
			return 0, err
		}
	}
	return start, nil
}
