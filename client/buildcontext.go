package client

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
)

// BuildContext returns a tar stream of a build context for Build: the spec
// file at specPath, at the tar's root under its base name (pass that name
// as rest.BuildOptions.File), and each copy source, a path relative to the
// spec's directory, at that path; directories are walked recursively and
// symlinks are stored as links, never followed. A source that is missing
// or that leaves the spec's directory (through ".." or a symlink) is an
// error before anything is read. The tar is produced as it is read; Close
// stops it.
func BuildContext(specPath string, copySrcs []string) (io.ReadCloser, error) {
	specData, err := os.ReadFile(specPath)
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	file := filepath.Base(specPath)
	root, err := os.OpenRoot(filepath.Dir(specPath))
	if err != nil {
		return nil, fmt.Errorf("open build context: %w", err)
	}
	srcs, err := contextSources(root, copySrcs)
	if err != nil {
		root.Close()
		return nil, err
	}
	pr, pw := io.Pipe()
	bc := &buildContext{pr: pr, done: make(chan struct{})}
	go func() {
		defer close(bc.done)
		defer root.Close()
		cw := contextWriter{tw: tar.NewWriter(pw), root: root, spec: file}
		err := cw.writeSpec(specData)
		for _, s := range srcs {
			if err != nil {
				break
			}
			err = cw.walk(s)
		}
		if err == nil {
			err = cw.tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return bc, nil
}

// contextSources checks the copy sources and drops those inside another.
func contextSources(root *os.Root, copySrcs []string) ([]string, error) {
	var srcs []string
	for _, s := range copySrcs {
		c := filepath.Clean(filepath.FromSlash(s))
		if c != "." && !filepath.IsLocal(c) {
			return nil, fmt.Errorf("copy source %q is outside the spec's directory: %w", s, errdefs.ErrInvalidArgument)
		}
		if _, err := root.Lstat(c); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("copy source %q does not exist: %w", s, errdefs.ErrNotFound)
			}
			return nil, fmt.Errorf("copy source %q: %v: %w", s, err, errdefs.ErrInvalidArgument)
		}
		srcs = append(srcs, filepath.ToSlash(c))
	}
	slices.SortFunc(srcs, func(a, b string) int { return len(a) - len(b) })
	var out []string
	for _, s := range srcs {
		if !slices.ContainsFunc(out, func(k string) bool { return k == "." || s == k || strings.HasPrefix(s, k+"/") }) {
			out = append(out, s)
		}
	}
	return out, nil
}

// buildContext is the reading end of BuildContext's tar.
type buildContext struct {
	pr   *io.PipeReader
	done chan struct{}
}

func (b *buildContext) Read(p []byte) (int, error) { return b.pr.Read(p) }

// Close stops the writer and waits for it.
func (b *buildContext) Close() error {
	b.pr.CloseWithError(errors.New("build context closed"))
	<-b.done
	return nil
}

type contextWriter struct {
	tw   *tar.Writer
	root *os.Root
	spec string // the spec's name: written first, skipped in the walk
}

func (cw *contextWriter) writeSpec(data []byte) error {
	hdr := &tar.Header{Name: cw.spec, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Now()}
	if err := cw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err := cw.tw.Write(data)
	return err
}

// walk writes the tree at name (slash-separated, relative to the root).
func (cw *contextWriter) walk(name string) error {
	fi, err := cw.root.Lstat(filepath.FromSlash(name))
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	if name != "." && name != cw.spec {
		if err := cw.entry(name, fi); err != nil {
			return err
		}
	}
	if !fi.IsDir() {
		return nil
	}
	d, err := cw.root.Open(filepath.FromSlash(name))
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("build context: read %s: %w", name, err)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := cw.walk(path.Join(name, n)); err != nil {
			return err
		}
	}
	return nil
}

// entry writes one file, directory or symlink; other kinds are skipped.
func (cw *contextWriter) entry(name string, fi fs.FileInfo) error {
	var link string
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := cw.root.Readlink(filepath.FromSlash(name))
		if err != nil {
			return fmt.Errorf("build context: %w", err)
		}
		link = l
	case fi.IsDir(), fi.Mode().IsRegular():
	default:
		return nil // fifos, sockets, devices have no place in an image build
	}
	hdr, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("build context: %s: %w", name, err)
	}
	hdr.Name, hdr.Uname, hdr.Gname = name, "", ""
	if fi.IsDir() {
		hdr.Name += "/"
	}
	if err := cw.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := cw.root.Open(filepath.FromSlash(name))
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer f.Close()
	if n, err := io.CopyN(cw.tw, f, hdr.Size); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("build context: %s shrank while read (%d of %d bytes)", name, n, hdr.Size)
		}
		return fmt.Errorf("build context: %s: %w", name, err)
	}
	return nil
}
