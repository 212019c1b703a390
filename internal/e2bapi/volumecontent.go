package e2bapi

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
)

// volumeEntry is E2B's VolumeEntryStat. Paths are the volume's own: "/"
// is its root directory.
type volumeEntry struct {
	Name   string    `json:"name"`
	Path   string    `json:"path"`
	Type   string    `json:"type"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// volumeContentRoutes are E2B's volume content API on a volume's files.
// Every path resolves inside the volume (os.Root: no ".." and no
// symlink leads out of it), and files are written as the daemon, root,
// whose ids on the volume's disk are box root's (volumes are mounted
// idmapped into boxes).
func (a *API) volumeContentRoutes(r map[string]http.HandlerFunc) {
	r["GET /volumecontent/{id}/dir"] = a.inVolume(a.volumeList)
	r["POST /volumecontent/{id}/dir"] = a.inVolume(a.volumeMakeDir)
	r["GET /volumecontent/{id}/path"] = a.inVolume(a.volumeStat)
	r["PATCH /volumecontent/{id}/path"] = a.inVolume(a.volumeUpdate)
	r["DELETE /volumecontent/{id}/path"] = a.inVolume(a.volumeRemove)
	r["GET /volumecontent/{id}/file"] = a.inVolume(a.volumeRead)
	r["PUT /volumecontent/{id}/file"] = a.inVolume(a.volumeWrite)
}

// inVolume serves h with the root of the volume the request names, open
// for the request, and the request's path in it (rel, resolved; p, as
// given, for messages).
func (a *API) inVolume(h func(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		root, rel, err := a.volumeRoot(r)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		defer root.Close()
		h(w, r, root, rel, r.URL.Query().Get("path"))
	}
}

// volumeRoot opens the root directory of the volume the request names
// and returns it with the request's path inside it ("." for the root).
func (a *API) volumeRoot(r *http.Request) (*os.Root, string, error) {
	if a.cfg.VolumeDir == nil {
		return nil, "", fmt.Errorf("volume content: this daemon has no volume store: %w", errdefs.ErrNotImplemented)
	}
	p := r.URL.Query().Get("path")
	if p == "" || strings.ContainsRune(p, 0) {
		return nil, "", fmt.Errorf("path is required: give a path in the volume, such as /dir/file: %w", errdefs.ErrInvalidArgument)
	}
	dir, err := a.cfg.VolumeDir(r.PathValue("id"))
	if err != nil {
		return nil, "", err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, "", fmt.Errorf("volume %s: %w", r.PathValue("id"), err)
	}
	return root, volumeRel(p), nil
}

// volumeRel is path p of a volume ("/a/b", "a/b") relative to its root:
// ".." never climbs above the root.
func volumeRel(p string) string {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		return "."
	}
	return rel
}

// volumeError classifies an error of a file operation on a volume.
func volumeError(p string, err error) error {
	var errno syscall.Errno
	var pe *fs.PathError
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("path %s: no such file or directory in the volume: %w", p, errdefs.ErrNotFound)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("path %s: already exists (force replaces it): %w", p, errdefs.ErrAlreadyExists)
	case errors.Is(err, syscall.ENOSPC):
		return fmt.Errorf("path %s: the volume is full: %w", p, errdefs.ErrResourceExhausted)
	case errors.As(err, &errno) && (errno == syscall.ENOTDIR || errno == syscall.EISDIR || errno == syscall.ELOOP || errno == syscall.EINVAL || errno == syscall.ENOTEMPTY):
		return fmt.Errorf("path %s: %w: %w", p, err, errdefs.ErrInvalidArgument)
	case errors.As(err, &pe) && !errors.As(err, &errno):
		// os.Root's refusal of a path that leaves the root (through a
		// symlink) is the one error here that is not a system call's.
		return fmt.Errorf("path %s: resolves outside the volume (a symlink that leaves it): %w", p, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("path %s: %w", p, err)
}

// volumeEntryOf describes the file at rel (not following a last symlink).
func volumeEntryOf(root *os.Root, rel string) (volumeEntry, error) {
	fi, err := root.Lstat(rel)
	if err != nil {
		return volumeEntry{}, err
	}
	e := volumeEntry{Name: fi.Name(), Path: "/" + strings.TrimPrefix(rel, "."), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Mtime: fi.ModTime().UTC(), Type: "unknown"}
	if rel == "." {
		e.Name, e.Path = "/", "/"
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.Mode = st.Mode & 0o7777
		e.Atime = time.Unix(st.Atim.Unix()).UTC()
		e.Ctime = time.Unix(st.Ctim.Unix()).UTC()
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = root.Readlink(rel)
	}
	return e, nil
}

// ownership reads the uid, gid and mode query parameters (box root's and
// def when absent).
func ownership(r *http.Request, def fs.FileMode) (uid, gid int, mode fs.FileMode, err error) {
	q := r.URL.Query()
	num := func(name string, base int, limit uint64, dflt uint64) (uint64, error) {
		s := q.Get(name)
		if s == "" {
			return dflt, nil
		}
		n, err := strconv.ParseUint(s, base, 32)
		if err != nil || n > limit {
			return 0, fmt.Errorf("%s %q: want a number up to %d: %w", name, s, limit, errdefs.ErrInvalidArgument)
		}
		return n, nil
	}
	u, err := num("uid", 10, 1<<32-2, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	g, err := num("gid", 10, 1<<32-2, 0)
	if err != nil {
		return 0, 0, 0, err
	}
	m, err := num("mode", 10, 0o7777, uint64(def))
	if err != nil {
		return 0, 0, 0, err
	}
	return int(u), int(g), fileMode(uint32(m)), nil
}

// fileMode turns Unix permission bits (with setuid, setgid, sticky) into
// an fs.FileMode.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// chown gives rel the ids uid and gid when it has others.
func chown(root *os.Root, rel string, uid, gid int) error {
	fi, err := root.Lstat(rel)
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	return root.Lchown(rel, uid, gid)
}

func force(r *http.Request) bool {
	v, _ := strconv.ParseBool(r.URL.Query().Get("force"))
	return v
}

// volumeList is GET /volumecontent/{id}/dir (volume.list): the entries
// of a directory, depth levels deep (1: its own).
func (a *API) volumeList(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	var err error
	depth := 1
	if s := r.URL.Query().Get("depth"); s != "" {
		if depth, err = strconv.Atoi(s); err != nil || depth < 1 {
			a.fail(w, r, fmt.Errorf("depth %q: want a whole number from 1: %w", s, errdefs.ErrInvalidArgument))
			return
		}
	}
	out := []volumeEntry{}
	var walk func(dir string, level int) error
	walk = func(dir string, level int) error {
		f, err := root.Open(dir)
		if err != nil {
			return err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, n := range names {
			child := path.Join(dir, n)
			e, err := volumeEntryOf(root, child)
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, e)
			if e.Type == "directory" && level < depth {
				if err := walk(child, level+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(rel, 1); err != nil {
		a.fail(w, r, volumeError(r.URL.Query().Get("path"), err))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// volumeMakeDir is POST /volumecontent/{id}/dir (volume.makeDir): force
// makes the missing parents too and takes a directory that exists.
func (a *API) volumeMakeDir(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	uid, gid, mode, err := ownership(r, 0o755)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if force(r) {
		err = root.MkdirAll(rel, mode)
	} else {
		err = root.Mkdir(rel, mode)
	}
	if err == nil {
		err = chown(root, rel, uid, gid)
	}
	if err == nil {
		err = root.Chmod(rel, mode) // as asked, whatever the umask
	}
	a.answerEntry(w, r, root, rel, p, http.StatusCreated, err)
}

func (a *API) answerEntry(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string, status int, err error) {
	var e volumeEntry
	if err == nil {
		e, err = volumeEntryOf(root, rel)
	}
	if err != nil {
		a.fail(w, r, volumeError(p, err))
		return
	}
	writeJSON(w, status, e)
}

// volumeStat is GET /volumecontent/{id}/path (volume.getInfo, exists).
func (a *API) volumeStat(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	a.answerEntry(w, r, root, rel, r.URL.Query().Get("path"), http.StatusOK, nil)
}

// volumeUpdate is PATCH /volumecontent/{id}/path
// (volume.updateMetadata): uid, gid and mode, each when given.
func (a *API) volumeUpdate(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	var err error
	var req struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	if req.Mode != nil && *req.Mode > 0o7777 {
		a.fail(w, r, fmt.Errorf("mode %o: want permission bits up to 07777: %w", *req.Mode, errdefs.ErrInvalidArgument))
		return
	}
	if req.UID != nil || req.GID != nil {
		uid, gid := -1, -1
		if req.UID != nil {
			uid = int(*req.UID)
		}
		if req.GID != nil {
			gid = int(*req.GID)
		}
		err = root.Lchown(rel, uid, gid)
	}
	if err == nil && req.Mode != nil {
		err = root.Chmod(rel, fileMode(*req.Mode))
	}
	a.answerEntry(w, r, root, rel, p, http.StatusOK, err)
}

// volumeRemove is DELETE /volumecontent/{id}/path (volume.remove): a file,
// or a directory with what it holds.
func (a *API) volumeRemove(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	var err error
	if rel == "." {
		a.fail(w, r, fmt.Errorf("path %s is the volume's root: remove the volume with DELETE /volumes/%s: %w", p, r.PathValue("id"), errdefs.ErrInvalidArgument))
		return
	}
	if _, err = root.Lstat(rel); err == nil {
		err = root.RemoveAll(rel)
	}
	if err != nil {
		a.fail(w, r, volumeError(p, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// volumeRead is GET /volumecontent/{id}/file (volume.readFile).
func (a *API) volumeRead(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		a.fail(w, r, volumeError(p, err))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("path %s is not a regular file: %w", p, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f) // the client went away: nothing to do
}

// volumeWrite is PUT /volumecontent/{id}/file (volume.writeFile): the body
// replaces the file (made when missing); force makes missing parent
// directories too.
func (a *API) volumeWrite(w http.ResponseWriter, r *http.Request, root *os.Root, rel, p string) {
	if rel == "." {
		a.fail(w, r, fmt.Errorf("path %s is the volume's root directory, not a file: %w", p, errdefs.ErrInvalidArgument))
		return
	}
	uid, gid, mode, err := ownership(r, 0o644)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if force(r) {
		if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
			a.fail(w, r, volumeError(p, err))
			return
		}
	}
	f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|syscall.O_NOFOLLOW, mode)
	if err != nil {
		a.fail(w, r, volumeError(p, err))
		return
	}
	_, err = io.Copy(f, r.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = chown(root, rel, uid, gid)
	}
	if err == nil {
		err = root.Chmod(rel, mode)
	}
	a.answerEntry(w, r, root, rel, p, http.StatusCreated, err)
}
