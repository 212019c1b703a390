package fsdiff

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1" //nolint:gosec // git names blobs by SHA-1; git apply checks binary patches against it
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// Defaults of PatchOptions.
const (
	DefaultMaxFileBytes = 16 << 20
	DefaultMaxBytes     = 256 << 20
)

// NotePrefix starts the lines that the patch carries for people and for
// corral apply: a file left out ("omitted", the patch is incomplete) or
// one git cannot hold ("skipped": a device, a fifo, a socket). git apply ignores them.
const NotePrefix = "# corral: "

// PatchOptions bound a patch.
type PatchOptions struct {
	// MaxFileBytes leaves out (with a note) files larger than this on
	// either side; 0: DefaultMaxFileBytes.
	MaxFileBytes int64
	// MaxBytes leaves out (with a note) every file whose diff would take
	// the patch past this size; 0: DefaultMaxBytes.
	MaxBytes int64
}

// FileStat is what a patch changes in one file.
type FileStat struct {
	Path     string
	Added    int
	Deleted  int
	Binary   bool
	OldSize  int64
	NewSize  int64
	ModeOnly bool
}

// Note is a path the patch left out (Omitted) or cannot hold.
type Note struct {
	Path    string
	Reason  string
	Omitted bool
}

// Patch turns changes into a git patch (diff --git, binary files as "GIT
// binary patch" literals) that git apply accepts, with paths relative to
// the compared directory. Feed it Walk's changes with Add, in order. A Patch with a nil writer only counts (a diffstat).
type Patch struct {
	w     io.Writer
	opts  PatchOptions
	wrote int64
	buf   bytes.Buffer

	// Files and Notes are what was written, in order.
	Files []FileStat
	Notes []Note

	// statFiles and statNotes are what a Patch with no writer would have
	// (see Stat).
	statFiles []FileStat
	statNotes []Note
}

// Stat returns the files and notes that a Patch with no writer (a
// diffstat) fed the same changes has, so that one walk gives both the
// patch and its stat: the same as Files and Notes, except that a file the
// patch left out because the patch reached MaxBytes is counted (a
// diffstat has no size to reach) and not noted.
func (p *Patch) Stat() ([]FileStat, []Note) { return p.statFiles, p.statNotes }

// NewPatch returns a Patch writing to w (nil: none).
func NewPatch(w io.Writer, o PatchOptions) *Patch {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = DefaultMaxFileBytes
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	return &Patch{w: w, opts: o}
}

// Omitted returns the paths left out of the patch: with any, it does not
// carry the whole change.
func (p *Patch) Omitted() []Note {
	var out []Note
	for _, n := range p.Notes {
		if n.Omitted {
			out = append(out, n)
		}
	}
	return out
}

// side is a file as git sees it: mode 100644, 100755 or 120000 and
// content; nil when the path is absent or holds what git cannot.
type gitFile struct {
	mode string
	data []byte
	hash string
}

// Add writes the patch of one change.
func (p *Patch) Add(c Change) error {
	o, n := representable(c.Old), representable(c.New)
	if c.New != nil && !n && !c.New.Mode.IsDir() {
		if err := p.note(Note{Path: c.Path, Reason: "git cannot hold a " + typeName(c.New.Mode)}); err != nil {
			return err
		}
	}
	if !o && !n {
		return nil
	}
	for _, e := range []*Entry{c.Old, c.New} {
		if e != nil && e.Mode.IsRegular() && e.Size > p.opts.MaxFileBytes {
			return p.note(Note{Path: c.Path, Omitted: true, Reason: fmt.Sprintf("%d bytes, over the limit of %d per file", e.Size, p.opts.MaxFileBytes)})
		}
	}
	var of, nf *gitFile
	var err error
	if o {
		if of, err = p.read(c.Old); err != nil {
			return fmt.Errorf("read old %s: %w", c.Path, err)
		}
	}
	if n {
		if nf, err = p.read(c.New); err != nil {
			return fmt.Errorf("read new %s: %w", c.Path, err)
		}
	}
	p.buf.Reset()
	var st FileStat
	switch {
	case of != nil && nf != nil && of.mode[:2] != nf.mode[:2]:
		// A file became a symlink or back: git deletes and adds.
		st, err = p.render(c.Path, of, nil)
		if err == nil {
			var st2 FileStat
			st2, err = p.render(c.Path, nil, nf)
			st.Added, st.NewSize, st.Binary = st2.Added, st2.NewSize, st.Binary || st2.Binary
		}
	case of != nil && nf != nil && of.mode == nf.mode && of.hash == nf.hash:
		return nil // owner or time only: nothing git can hold
	default:
		st, err = p.render(c.Path, of, nf)
	}
	if err != nil {
		return err
	}
	p.statFiles = append(p.statFiles, st)
	if p.w != nil && p.wrote+int64(p.buf.Len()) > p.opts.MaxBytes {
		return p.writeNote(Note{Path: c.Path, Omitted: true, Reason: fmt.Sprintf("the patch reached its limit of %d bytes", p.opts.MaxBytes)})
	}
	p.Files = append(p.Files, st)
	return p.flush()
}

func (p *Patch) flush() error {
	if p.w == nil {
		p.buf.Reset()
		return nil
	}
	n, err := p.w.Write(p.buf.Bytes())
	p.wrote += int64(n)
	p.buf.Reset()
	return err
}

// note records and writes a note that a diffstat has too.
func (p *Patch) note(n Note) error {
	p.statNotes = append(p.statNotes, n)
	return p.writeNote(n)
}

// writeNote records and writes a note of the patch only.
func (p *Patch) writeNote(n Note) error {
	p.Notes = append(p.Notes, n)
	word := "skipped"
	if n.Omitted {
		word = "omitted"
	}
	p.buf.Reset()
	fmt.Fprintf(&p.buf, "%s%s %s: %s\n", NotePrefix, word, Quote(n.Path), n.Reason)
	return p.flush()
}

// read reads e's content (a symlink's target), which fits MaxFileBytes.
func (p *Patch) read(e *Entry) (*gitFile, error) {
	f := &gitFile{mode: gitMode(e.Mode)}
	if e.Mode&fs.ModeSymlink != 0 {
		f.data = []byte(e.Link)
	} else {
		r, err := e.Open()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		f.data, err = io.ReadAll(io.LimitReader(r, p.opts.MaxFileBytes+1))
		if err != nil {
			return nil, err
		}
		if int64(len(f.data)) != e.Size {
			return nil, fmt.Errorf("size changed while read: %w", errdefs.ErrUnavailable)
		}
	}
	f.hash = blobHash(f.data)
	return f, nil
}

const zeroHash = "0000000000000000000000000000000000000000"

// render writes the diff of one path from of to nf (either may be nil)
// into p.buf.
func (p *Patch) render(name string, of, nf *gitFile) (FileStat, error) {
	st := FileStat{Path: name}
	b := &p.buf
	a, bn := Quote("a/"+name), Quote("b/"+name)
	fmt.Fprintf(b, "diff --git %s %s\n", a, bn)
	oh, nh := zeroHash, zeroHash
	var od, nd []byte
	switch {
	case of == nil:
		fmt.Fprintf(b, "new file mode %s\n", nf.mode)
		nh, nd = nf.hash, nf.data
	case nf == nil:
		fmt.Fprintf(b, "deleted file mode %s\n", of.mode)
		oh, od = of.hash, of.data
	default:
		oh, nh, od, nd = of.hash, nf.hash, of.data, nf.data
		if of.mode != nf.mode {
			fmt.Fprintf(b, "old mode %s\nnew mode %s\n", of.mode, nf.mode)
			if oh == nh {
				st.ModeOnly = true
				return st, nil
			}
		}
	}
	st.OldSize, st.NewSize = int64(len(od)), int64(len(nd))
	if of != nil && nf != nil && of.mode == nf.mode {
		fmt.Fprintf(b, "index %s..%s %s\n", oh, nh, nf.mode)
	} else {
		fmt.Fprintf(b, "index %s..%s\n", oh, nh)
	}
	if len(od) == 0 && len(nd) == 0 {
		return st, nil
	}
	if isBinary(od) || isBinary(nd) {
		st.Binary = true
		b.WriteString("GIT binary patch\n")
		return st, writeLiteral(b, nd)
	}
	from, to := "/dev/null", "/dev/null"
	if of != nil {
		from = a
	}
	if nf != nil {
		to = bn
	}
	fmt.Fprintf(b, "--- %s\n+++ %s\n", from, to)
	var err error
	st.Added, st.Deleted, err = writeHunks(b, diffLines(splitLines(od), splitLines(nd)))
	return st, err
}

// isBinary is git's test: a NUL byte in the first 8000.
func isBinary(b []byte) bool { return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0 }

func blobHash(b []byte) string {
	h := sha1.New() //nolint:gosec // git's object name
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// writeLiteral writes a "literal" hunk of a git binary patch: data
// deflated with zlib, in lines of git's base85 of at most 52 bytes, each
// prefixed by its length, then an empty line.
func writeLiteral(w *bytes.Buffer, data []byte) error {
	var z bytes.Buffer
	zw, err := zlib.NewWriterLevel(&z, zlib.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Fprintf(w, "literal %d\n", len(data))
	zb := z.Bytes()
	for len(zb) > 0 {
		n := min(len(zb), 52)
		if n <= 26 {
			w.WriteByte(byte('A' + n - 1))
		} else {
			w.WriteByte(byte('a' + n - 27))
		}
		w.WriteString(base85(zb[:n]))
		w.WriteByte('\n')
		zb = zb[n:]
	}
	w.WriteByte('\n')
	return nil
}

const base85Chars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// base85 encodes b (padded with zeros to a multiple of 4) as git does.
func base85(b []byte) string {
	var sb strings.Builder
	for len(b) > 0 {
		var v uint32
		for i := range 4 {
			v <<= 8
			if i < len(b) {
				v |= uint32(b[i])
			}
		}
		var out [5]byte
		for i := 4; i >= 0; i-- {
			out[i] = base85Chars[v%85]
			v /= 85
		}
		sb.Write(out[:])
		b = b[min(4, len(b)):]
	}
	return sb.String()
}

// representable reports whether git can hold e: a regular file or a
// symlink.
func representable(e *Entry) bool {
	return e != nil && (e.Mode.IsRegular() || e.Mode&fs.ModeSymlink != 0)
}

func gitMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "120000"
	case m&0o100 != 0:
		return "100755"
	}
	return "100644"
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m.IsDir():
		return "directory"
	}
	return "file of mode " + m.String()
}

// Quote quotes a path as git does when it holds a double quote, a
// backslash, a control character or a byte past ASCII; other paths are
// returned as they are.
func Quote(s string) string {
	need := false
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			need = true
			break
		}
	}
	if !need {
		return s
	}
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\a':
			b.WriteString(`\a`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\v':
			b.WriteString(`\v`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if c < 0x20 || c >= 0x7f {
				b.WriteByte('\\')
				b.WriteString(strconv.FormatInt(int64(c)+0o1000, 8)[1:])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
