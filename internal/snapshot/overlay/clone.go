package overlay

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// clone copies the file src to the new file dst (mode 0600). It is a
// reflink (FICLONE: dst shares src's blocks and the copy takes constant
// time) when the disk file system supports it and both files are on it,
// and a sparse copy otherwise (correct, but O(data)). It reports which.
// On error dst does not exist.
func (s *Store) clone(src, dst string) (reflinked bool, err error) {
	in, err := os.OpenFile(src, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return false, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return false, err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(dst)
		}
	}()
	if s.reflink {
		err := unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
		if err == nil {
			return true, nil
		}
		if !reflinkUnsupported(err) {
			return false, fmt.Errorf("reflink %s: %w", src, err)
		}
		// A source on another file system (a disk made before the disk
		// volume was) is copied.
	}
	return false, sparseCopyFile(in, out)
}

// reflinkUnsupported reports whether a FICLONE error means that these two
// files cannot share blocks (as opposed to an I/O error).
func reflinkUnsupported(err error) bool {
	for _, e := range []error{unix.EXDEV, unix.EOPNOTSUPP, unix.EINVAL, unix.ENOTTY, unix.ENOSYS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// sparseCopyFile copies in to out (empty) and gives out in's size, copying
// only in's data extents (SEEK_DATA/SEEK_HOLE) so holes stay holes.
func sparseCopyFile(in, out *os.File) error {
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	inFD, outFD := int(in.Fd()), int(out.Fd())
	for off := int64(0); off < st.Size(); {
		data, err := unix.Seek(inFD, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole is left
			break
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		hole, err := unix.Seek(inFD, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		for pos := data; pos < hole; {
			roff, woff := pos, pos
			n, err := unix.CopyFileRange(inFD, &roff, outFD, &woff, int(hole-pos), 0)
			if err != nil {
				return fmt.Errorf("copy extent: %w", err)
			}
			if n == 0 {
				return fmt.Errorf("copy extent: %w", io.ErrUnexpectedEOF)
			}
			pos += int64(n)
		}
		off = hole
	}
	return nil
}
