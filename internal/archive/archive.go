// Package archive extracts untrusted tar streams into a directory and writes
// directories as tar streams, without ever resolving a path outside the
// directory it was given (everything goes through os.Root).
//
// Apply's rules for untrusted input:
//   - names are confined: a leading "/" is dropped and ".." cannot climb above
//     the destination ("../../etc/passwd" lands in dst/etc/passwd);
//   - every path is resolved through os.Root, so a symlink from the archive
//     that points outside dst (absolute or climbing) makes a later entry that
//     goes through it fail instead of writing outside;
//   - an entry replaces what is at its path (the old file, symlink or
//     directory tree is removed first) and files are created with O_EXCL, so
//     nothing is ever written through a symlink planted by an earlier entry;
//   - hard links must name an entry inside dst (linkat, no symlink follow);
//   - device nodes and fifos are skipped (logged at debug level);
//   - setuid and setgid bits are stripped (the sticky bit is kept);
//   - the total bytes of regular files and the number of entries are bounded;
//   - gzip is detected by its magic number and decompressed transparently.
package archive

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
)

// Defaults for Options' zero values.
const (
	DefaultMaxBytes   = 64 << 30 // 64 GiB of file contents
	DefaultMaxEntries = 1 << 20  // a million entries
)

// ErrTooLarge is returned when an archive exceeds Options.MaxBytes or
// Options.MaxEntries.
var ErrTooLarge = fmt.Errorf("archive too large: %w", errdefs.ErrInvalidArgument)

// Options bound and tune Apply.
type Options struct {
	// MaxBytes bounds the total size of regular files; 0 is DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries bounds the number of entries; 0 is DefaultMaxEntries.
	MaxEntries int
	// KeepOwners applies the uid/gid of each entry (needs CAP_CHOWN). When
	// false, files belong to the extracting process.
	KeepOwners bool
}

// Apply extracts the tar stream r (plain or gzip) into dst and returns the
// number of bytes of regular file contents written. On error, dst may hold
// part of the archive; callers extract into a scratch directory and discard
// it on failure. Errors from malformed or hostile input are
// errdefs.ErrInvalidArgument.
func Apply(ctx context.Context, dst *os.Root, r io.Reader, opts Options) (int64, error) {
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	br := bufio.NewReaderSize(r, 64<<10)
	var in io.Reader = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return 0, fmt.Errorf("read gzip header: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		defer zr.Close()
		in = zr
	}
	a := applier{dst: dst, opts: opts}
	err := a.run(ctx, in)
	if a.skipped > 0 {
		log.G(ctx).Debug("archive entries skipped", "count", a.skipped)
	}
	return a.written, err
}

type dirAttr struct {
	name  string
	mode  fs.FileMode
	mtime time.Time
}

type applier struct {
	dst     *os.Root
	opts    Options
	written int64
	entries int
	skipped int
	dirs    []dirAttr
}

func (a *applier) run(ctx context.Context, in io.Reader) error {
	tr := tar.NewReader(in)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read tar: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		a.entries++
		if a.entries > a.opts.MaxEntries {
			return fmt.Errorf("more than %d entries: %w", a.opts.MaxEntries, ErrTooLarge)
		}
		if err := a.entry(hdr, tr); err != nil {
			return err
		}
	}
	// Directory modes and times last: extracting children changes mtimes,
	// and a read-only directory would stop its own children.
	for _, d := range slices.Backward(a.dirs) {
		if err := a.dst.Chmod(d.name, d.mode); err != nil {
			return fmt.Errorf("chmod %s: %w", d.name, err)
		}
		if !d.mtime.IsZero() {
			_ = a.dst.Chtimes(d.name, d.mtime, d.mtime)
		}
	}
	return nil
}

// Clean confines an archive name to the destination: the result is relative,
// slash-separated, without "..", or "" for the destination itself.
func Clean(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// mode turns a tar mode into permission bits without setuid and setgid.
func mode(hdr *tar.Header) fs.FileMode {
	m := fs.FileMode(hdr.Mode & 0o777)
	if hdr.Mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}

func (a *applier) entry(hdr *tar.Header, r io.Reader) error {
	name := Clean(hdr.Name)
	if name == "" {
		// The destination itself ("./"): keep it as it is.
		return nil
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		a.skipped++
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink:
	default:
		// PAX/GNU metadata is consumed by archive/tar; anything else
		// (sockets, GNU volume headers...) is skipped.
		a.skipped++
		return nil
	}
	if dir := path.Dir(name); dir != "." {
		if err := a.dst.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("make parent of %s: %w", name, err)
		}
	}
	existing, err := a.dst.Lstat(name)
	if err == nil {
		if hdr.Typeflag == tar.TypeDir && existing.IsDir() {
			a.dirs = append(a.dirs, dirAttr{name, mode(hdr), hdr.ModTime})
			return a.chown(name, hdr)
		}
		if err := a.dst.RemoveAll(name); err != nil {
			return fmt.Errorf("replace %s: %w", name, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("lstat %s: %w", name, err)
	}

	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := a.dst.Mkdir(name, 0o700); err != nil {
			return fmt.Errorf("mkdir %s: %w", name, err)
		}
		a.dirs = append(a.dirs, dirAttr{name, mode(hdr), hdr.ModTime})
	case tar.TypeReg: // archive/tar reports the old TypeRegA as TypeReg
		if hdr.Size < 0 || hdr.Size > a.opts.MaxBytes-a.written {
			return fmt.Errorf("%s: more than %d bytes of files: %w", name, a.opts.MaxBytes, ErrTooLarge)
		}
		f, err := a.dst.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("create %s: %w", name, err)
		}
		src := &readErr{r: io.LimitReader(r, hdr.Size)}
		n, err := io.Copy(f, src)
		a.written += n
		if err == nil && n != hdr.Size {
			err = io.ErrUnexpectedEOF
		}
		if src.err != nil || errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
		}
		if err == nil {
			err = f.Chmod(mode(hdr))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", name, err)
		}
		if !hdr.ModTime.IsZero() {
			_ = a.dst.Chtimes(name, hdr.ModTime, hdr.ModTime)
		}
	case tar.TypeSymlink:
		// The target is stored as is: it is resolved later only inside the
		// sandbox's own root, and os.Root refuses to go through it here.
		if err := a.dst.Symlink(hdr.Linkname, name); err != nil {
			return fmt.Errorf("symlink %s: %w", name, err)
		}
	case tar.TypeLink:
		target := Clean(hdr.Linkname)
		if target == "" {
			return fmt.Errorf("hard link %s to the root: %w", name, errdefs.ErrInvalidArgument)
		}
		fi, err := a.dst.Lstat(target)
		if err != nil {
			return fmt.Errorf("hard link %s to %s: %v: %w", name, target, err, errdefs.ErrInvalidArgument)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("hard link %s to non-regular %s: %w", name, target, errdefs.ErrInvalidArgument)
		}
		if err := a.dst.Link(target, name); err != nil {
			return fmt.Errorf("hard link %s to %s: %w", name, target, err)
		}
		return nil // the link shares its target's owner and mode
	}
	return a.chown(name, hdr)
}

func (a *applier) chown(name string, hdr *tar.Header) error {
	if !a.opts.KeepOwners {
		return nil
	}
	if hdr.Uid < 0 || hdr.Gid < 0 {
		return fmt.Errorf("%s: negative owner: %w", name, errdefs.ErrInvalidArgument)
	}
	if err := a.dst.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
		return fmt.Errorf("chown %s: %w", name, err)
	}
	if hdr.Typeflag == tar.TypeReg {
		// chown clears setuid/setgid anyway; re-apply the plain mode bits.
		if err := a.dst.Chmod(name, mode(hdr)); err != nil {
			return fmt.Errorf("chmod %s: %w", name, err)
		}
	}
	return nil
}

// readErr remembers the error of the archive side of a copy, so that a
// corrupt archive is told apart from a failing disk.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		r.err = err
	}
	return n, err
}
