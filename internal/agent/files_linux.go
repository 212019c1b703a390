package agent

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/log"
)

// errNotRegular refuses reads and writes of fifos, devices, sockets and
// directories, which could hang the agent or touch hardware.
var errNotRegular = fmt.Errorf("not a regular file: %w", errInvalidArgument)

func httpError(w http.ResponseWriter, r *http.Request, err error) {
	code := httpStatus(err)
	if code >= 500 {
		log.G(r.Context()).Warn("files request", "method", r.Method, "error", err)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": err.Error()})
}

// filesTarget resolves ?path= and ?username= (or the Authorization header).
func (s *Server) filesTarget(r *http.Request) (string, *account, error) {
	q := r.URL.Query()
	name := q.Get("username")
	if name == "" {
		name = userFromHeader(r.Header)
	}
	acc, _, err := resolveUser(s.live.apply(s.cfg), name)
	if err != nil {
		return "", nil, err
	}
	p := q.Get("path")
	if p == "" && r.Method == http.MethodGet {
		return "", nil, fmt.Errorf("path is required: %w", errInvalidArgument)
	}
	if p == "" {
		return "", acc, nil
	}
	rp := resolvePath(acc.Home, p)
	if strings.HasSuffix(p, "/") && rp != "/" {
		// A trailing slash names a directory (as in POSIX): keep it, so a
		// regular file at "f/" is refused rather than read or written.
		rp += "/"
	}
	return rp, acc, nil
}

// openRegular opens p for reading without blocking on fifos or devices and
// refuses anything that is not a regular file.
func openRegular(p string) (*os.File, int64, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("open %s: %w", p, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, 0, fmt.Errorf("%s: %w", p, errNotRegular)
	}
	return os.NewFile(uintptr(fd), p), st.Size, nil
}

func (s *Server) getFiles(w http.ResponseWriter, r *http.Request) {
	p, _, err := s.filesTarget(r)
	if err != nil {
		httpError(w, r, err)
		return
	}
	if r.URL.Query().Get("format") == "tar" {
		root, only, err := openTarSource(p)
		if err != nil {
			httpError(w, r, err)
			return
		}
		defer root.Close()
		if err := writeTar(w, root, only); err != nil {
			// The headers are gone already; a cut stream is the signal.
			log.G(r.Context()).Debug("tar download", "path", p, "error", err)
		}
		return
	}
	f, size, err := openRegular(p)
	if err != nil {
		httpError(w, r, err)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(p)}))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	_, _ = io.Copy(w, io.LimitReader(f, size))
}

// uploadedEntry is one written file in the E2B-style upload response.
type uploadedEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) postFiles(w http.ResponseWriter, r *http.Request) {
	p, acc, err := s.filesTarget(r)
	if err != nil {
		httpError(w, r, err)
		return
	}
	if r.URL.Query().Get("format") == "tar" {
		if p == "" {
			httpError(w, r, fmt.Errorf("path is required: %w", errInvalidArgument))
			return
		}
		if err := extractTar(p, r.Body, acc); err != nil {
			httpError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var written []uploadedEntry
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "multipart/form-data" {
		mr := multipart.NewReader(r.Body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				httpError(w, r, fmt.Errorf("read multipart: %w: %w", err, errInvalidArgument))
				return
			}
			if part.FileName() == "" && part.FormName() != "file" {
				part.Close()
				continue
			}
			dst := p
			if dst == "" || len(written) > 0 {
				// Without ?path= (or for further parts) the part's file
				// name says where, relative to the user's home.
				if part.FileName() == "" {
					httpError(w, r, fmt.Errorf("multipart file without a name: %w", errInvalidArgument))
					return
				}
				dst = resolvePath(acc.Home, part.FileName())
			}
			err = writeFile(dst, part, acc)
			part.Close()
			if err != nil {
				httpError(w, r, err)
				return
			}
			written = append(written, uploadedEntry{Name: path.Base(dst), Type: "file", Path: dst})
		}
		if len(written) == 0 {
			httpError(w, r, fmt.Errorf("no file in upload: %w", errInvalidArgument))
			return
		}
	} else {
		if p == "" {
			httpError(w, r, fmt.Errorf("path is required: %w", errInvalidArgument))
			return
		}
		if err := writeFile(p, r.Body, acc); err != nil {
			httpError(w, r, err)
			return
		}
		written = append(written, uploadedEntry{Name: path.Base(p), Type: "file", Path: p})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(written)
}

// writeFile streams src into p: parents are created, a symlink as the last
// component is not followed, and only regular files are written.
func writeFile(p string, src io.Reader, acc *account) error {
	if strings.HasSuffix(p, "/") {
		return fmt.Errorf("%s names a directory: %w", p, errNotRegular)
	}
	if err := mkdirAllAs(path.Dir(p), acc); err != nil {
		return err
	}
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0o644)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("%s is a symlink: %w", p, errInvalidArgument)
		}
		if errors.Is(err, unix.ENXIO) {
			return fmt.Errorf("%s: %w", p, errNotRegular)
		}
		return fmt.Errorf("open %s: %w", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s: %w", p, errNotRegular)
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		return fmt.Errorf("truncate %s: %w", p, err)
	}
	if acc != nil && os.Geteuid() == 0 {
		_ = unix.Fchown(fd, int(acc.UID), int(acc.GID))
	}
	if _, err := io.Copy(f, src); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return f.Close()
}

// openTarSource opens what a tar download of p covers: the directory p
// itself (only == ""), or p's parent with only naming the regular file p.
// Anything else (fifo, device, socket) is refused before a byte is sent.
func openTarSource(p string) (root *os.Root, only string, err error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return nil, "", fmt.Errorf("stat %s: %w", p, err)
	}
	dir := p
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFREG:
		dir, only = path.Dir(p), path.Base(p)
	default: // a fifo, device or socket: refuse rather than copy nothing
		return nil, "", fmt.Errorf("%s is not a regular file or directory: %w", p, errInvalidArgument)
	}
	root, err = os.OpenRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("open %s: %w", dir, err)
	}
	return root, only, nil
}

// writeTar streams a tar of root (or of its entry only) to w. Symlinks are
// stored as links, never followed; devices, fifos and sockets are skipped.
func writeTar(w http.ResponseWriter, root *os.Root, only string) error {
	var err error
	w.Header().Set("Content-Type", "application/x-tar")
	w.WriteHeader(http.StatusOK)
	tw := tar.NewWriter(w)
	add := func(name string, fi fs.FileInfo) error {
		link := ""
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(name); err != nil {
				return nil
			}
		case fi.Mode().IsDir(), fi.Mode().IsRegular():
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if !fi.Mode().IsRegular() {
			return tw.WriteHeader(hdr)
		}
		f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
		if err != nil {
			return nil // raced with a change; skip
		}
		defer f.Close()
		fst, err := f.Stat()
		if err != nil || !fst.Mode().IsRegular() {
			return nil
		}
		hdr.Size = fst.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		// Exactly Size bytes: a file that shrinks meanwhile is padded.
		n, err := io.Copy(tw, io.LimitReader(f, hdr.Size))
		if err != nil {
			return err
		}
		if n < hdr.Size {
			_, err = io.CopyN(tw, zeroReader{}, hdr.Size-n)
		}
		return err
	}
	if only != "" {
		fi, err := root.Lstat(only)
		if err != nil {
			return err
		}
		if err := add(only, fi); err != nil {
			return err
		}
		return tw.Close()
	}
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return nil
		}
		fi, err := root.Lstat(name)
		if err != nil {
			return nil
		}
		return add(name, fi)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}

// errBadTar rejects a tar entry that would escape the target directory.
var errBadTar = fmt.Errorf("unsafe tar entry: %w", errInvalidArgument)

// tarEntryName validates and cleans a tar entry name: relative, no "..",
// no absolute path. It returns "" for the root entry itself.
func tarEntryName(name string) (string, error) {
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%q: %w", name, errBadTar)
	}
	if path.IsAbs(name) || strings.HasPrefix(name, "\\") {
		return "", fmt.Errorf("%q: absolute path: %w", name, errBadTar)
	}
	for _, el := range strings.Split(name, "/") {
		if el == ".." {
			return "", fmt.Errorf("%q: parent reference: %w", name, errBadTar)
		}
	}
	c := path.Clean(name)
	if c == "." {
		return "", nil
	}
	if !filepath.IsLocal(c) {
		return "", fmt.Errorf("%q: %w", name, errBadTar)
	}
	return c, nil
}

// extractTar unpacks r into dir through an os.Root, so no entry, link or
// intermediate symlink can reach outside dir. Devices and fifos are skipped,
// setuid/setgid/sticky bits dropped, and ownership is acc's, not the tar's.
func extractTar(dir string, r io.Reader, acc *account) error {
	if err := mkdirAllAs(dir, acc); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open %s: %w", dir, err)
	}
	defer root.Close()
	return extractTarRoot(root, r, acc)
}

func extractTarRoot(root *os.Root, r io.Reader, acc *account) error {
	chown := func(name string) {
		if acc != nil && os.Geteuid() == 0 {
			_ = root.Lchown(name, int(acc.UID), int(acc.GID))
		}
	}
	// removeNonDir clears the way for a new entry, never following a link.
	removeNonDir := func(name string) error {
		fi, err := root.Lstat(name)
		if err != nil {
			return nil
		}
		if fi.IsDir() {
			return fmt.Errorf("%q: a directory is in the way: %w", name, errBadTar)
		}
		return root.Remove(name)
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read tar: %w: %w", err, errInvalidArgument)
		}
		name, err := tarEntryName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "" {
			continue
		}
		perm := fs.FileMode(hdr.Mode) & fs.ModePerm
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return fmt.Errorf("mkdir %s: %w", name, err)
			}
			_ = root.Chmod(name, perm|0o700)
			chown(name)
		case tar.TypeReg:
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("mkdir %s: %w", d, err)
				}
			}
			if err := removeNonDir(name); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
			if err != nil {
				return fmt.Errorf("create %s: %w", name, err)
			}
			_, err = io.Copy(f, tr)
			if err == nil {
				err = f.Chmod(perm)
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("write %s: %w", name, err)
			}
			chown(name)
		case tar.TypeSymlink:
			t := hdr.Linkname
			if t == "" || path.IsAbs(t) || strings.ContainsRune(t, 0) || !filepath.IsLocal(path.Join(path.Dir(name), t)) {
				return fmt.Errorf("%q -> %q: link leaves the directory: %w", name, t, errBadTar)
			}
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return fmt.Errorf("mkdir %s: %w", d, err)
				}
			}
			if err := removeNonDir(name); err != nil {
				return err
			}
			if err := root.Symlink(t, name); err != nil {
				return fmt.Errorf("symlink %s: %w", name, err)
			}
			chown(name)
		case tar.TypeLink:
			old, err := tarEntryName(hdr.Linkname)
			if err != nil || old == "" {
				return fmt.Errorf("%q => %q: link leaves the directory: %w", name, hdr.Linkname, errBadTar)
			}
			if err := removeNonDir(name); err != nil {
				return err
			}
			if err := root.Link(old, name); err != nil {
				return fmt.Errorf("link %s: %w", name, err)
			}
		default:
			// Devices, fifos, and extension headers: skipped.
		}
	}
}
