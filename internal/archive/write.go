package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Write streams the file or directory tree at p under root as a tar archive
// to w and writes the end-of-archive footer. Entry names are slash paths
// relative to root (p itself first; p "." names the tree's entries without
// a prefix and omits the root entry). It uses lstat only: symlinks are
// written as symlinks and never followed, files are opened with O_NOFOLLOW,
// and a file that changes size while it is read fails the write. Files that
// share an inode are written once and then as hard links.
func Write(w io.Writer, root *os.Root, p string) error {
	p = Clean(p)
	if p == "" {
		p = "."
	}
	tw := tar.NewWriter(w)
	wr := writer{tw: tw, root: root, inodes: map[[2]uint64]string{}}
	if err := wr.walk(p); err != nil {
		return err
	}
	return tw.Close()
}

type writer struct {
	tw     *tar.Writer
	root   *os.Root
	inodes map[[2]uint64]string // (dev, ino) -> first entry name
}

func (wr *writer) walk(name string) error {
	fi, err := wr.root.Lstat(name)
	if err != nil {
		return fmt.Errorf("lstat %s: %w", name, err)
	}
	if name != "." {
		if err := wr.header(name, fi); err != nil {
			return err
		}
	}
	if !fi.IsDir() {
		return nil
	}
	d, err := wr.root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	entries, err := d.ReadDir(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("read dir %s: %w", name, err)
	}
	slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range entries {
		if err := wr.walk(path.Join(name, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (wr *writer) header(name string, fi fs.FileInfo) error {
	if fi.Mode()&fs.ModeSocket != 0 {
		return nil // tar has no sockets; they are meaningless copied anyway
	}
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		l, err := wr.root.Readlink(name)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", name, err)
		}
		link = l
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("tar header %s: %w", name, err)
	}
	hdr.Name = name
	hdr.Uname, hdr.Gname = "", ""
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
		key := [2]uint64{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev is uint32 on some platforms
		if first, ok := wr.inodes[key]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			return wr.write(hdr)
		}
		wr.inodes[key] = name
	}
	if err := wr.write(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := wr.root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	defer f.Close()
	n, err := io.CopyN(wr.tw, f, hdr.Size)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s shrank while read (%d of %d bytes)", name, n, hdr.Size)
		}
		return fmt.Errorf("copy %s: %w", name, err)
	}
	return nil
}

func (wr *writer) write(hdr *tar.Header) error {
	if err := wr.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write tar header %s: %w", hdr.Name, err)
	}
	return nil
}
