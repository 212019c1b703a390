package overlay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// SaveDisk copies writable layer key's disk to the saved disk name,
// saved/<name>/{disk.img,meta.json} on the disk file system: a reflink
// (constant time) where that file system allows it, a sparse copy
// otherwise. The layer's sandbox must be frozen and its file system synced.
// The copy is made in scratch and renamed into place whole, so a crash
// never leaves a half-registered disk. The saved disk keeps the layer's
// parent alive (RemoveLayer refuses it). Errors: ErrAlreadyExists when name
// exists, ErrNotFound when key does not, ErrInvalidArgument for a bad key
// or name.
func (s *Store) SaveDisk(ctx context.Context, key, name string) (sandbox.SavedDisk, error) {
	start := time.Now()
	if err := identifiers.Validate("disk name", name); err != nil {
		return sandbox.SavedDisk{}, err
	}
	m, err := s.activeMeta(key)
	if err != nil {
		return sandbox.SavedDisk{}, err
	}
	if err := s.checkDiskFree(name); err != nil {
		return sandbox.SavedDisk{}, err
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.disks, "tmp"), "saved-")
	if err != nil {
		return sandbox.SavedDisk{}, fmt.Errorf("save disk %s: %w", name, err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	img := filepath.Join(tmp, "disk.img")
	reflinked, err := s.clone(s.diskImage(key, m), img)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return sandbox.SavedDisk{}, fmt.Errorf("save disk %s: writable layer %q has no disk: %w", name, key, errdefs.ErrNotFound)
		}
		return sandbox.SavedDisk{}, fmt.Errorf("save disk %s: %w", name, err)
	}
	d := sandbox.SavedDisk{
		Name: name, Parent: m.Parent, DiskBytes: m.DiskBytes,
		Created: time.Now().UTC(), Reflinked: reflinked,
	}
	if err := writeJSON(filepath.Join(tmp, "meta.json"), d); err != nil {
		return sandbox.SavedDisk{}, fmt.Errorf("save disk %s: %w", name, err)
	}
	d.UsedBytes = usedBytes(img)

	s.mu.Lock()
	defer s.mu.Unlock()
	// The layer's sandbox may have been removed during the copy, and its
	// parent with it.
	if err := s.checkLayer(m.Parent); err != nil {
		return sandbox.SavedDisk{}, fmt.Errorf("save disk %s: %w", name, err)
	}
	if err := s.checkDiskFree(name); err != nil {
		return sandbox.SavedDisk{}, err
	}
	if err := os.Rename(tmp, filepath.Join(s.disks, "saved", name)); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, unix.ENOTEMPTY) {
			return sandbox.SavedDisk{}, fmt.Errorf("saved disk %q: %w", name, errdefs.ErrAlreadyExists)
		}
		return sandbox.SavedDisk{}, fmt.Errorf("save disk %s: %w", name, err)
	}
	log.G(ctx).Info("disk saved", "layer", key, "disk", name, "reflinked", reflinked, "took", time.Since(start).Round(time.Microsecond))
	return d, nil
}

// checkDiskFree returns ErrAlreadyExists when saved disk name exists.
func (s *Store) checkDiskFree(name string) error {
	_, _, err := s.savedDisk(name)
	switch {
	case err == nil:
		return fmt.Errorf("saved disk %q: %w", name, errdefs.ErrAlreadyExists)
	case errdefs.IsNotFound(err):
		return nil
	}
	return err
}

// RemoveDisk removes the saved disk name; a missing one is success.
func (s *Store) RemoveDisk(ctx context.Context, name string) error {
	if err := identifiers.Validate("disk name", name); err != nil {
		return err
	}
	for _, dir := range s.savedDirs() {
		if err := s.trash(filepath.Join(dir, name), true); err != nil {
			return fmt.Errorf("remove saved disk %s: %w", name, err)
		}
	}
	log.G(ctx).Debug("saved disk removed", "disk", name)
	return nil
}

// Disks lists the saved disks, sorted by name. Parent is the layer each
// one keeps alive.
func (s *Store) Disks(context.Context) ([]sandbox.SavedDisk, error) {
	var out []sandbox.SavedDisk
	for _, dir := range s.savedDirs() {
		names, err := listDir(dir)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			d, err := readSavedDisk(filepath.Join(dir, n))
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed meanwhile
			}
			if err != nil {
				return nil, fmt.Errorf("saved disk %s: %w", n, err)
			}
			d.Name = n
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.SavedDisk) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// savedDisk returns saved disk name and its directory; ErrNotFound when
// there is none.
func (s *Store) savedDisk(name string) (sandbox.SavedDisk, string, error) {
	if err := identifiers.Validate("disk name", name); err != nil {
		return sandbox.SavedDisk{}, "", err
	}
	for _, dir := range s.savedDirs() {
		d, err := readSavedDisk(filepath.Join(dir, name))
		if err == nil {
			d.Name = name
			return d, filepath.Join(dir, name), nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return sandbox.SavedDisk{}, "", fmt.Errorf("saved disk %s: %w", name, err)
		}
	}
	return sandbox.SavedDisk{}, "", fmt.Errorf("saved disk %q: %w", name, errdefs.ErrNotFound)
}

// savedDirs are the directories of saved disks: on the disk file system,
// and under the root for disks saved before the disk volume was used.
func (s *Store) savedDirs() []string {
	dirs := []string{filepath.Join(s.disks, "saved")}
	if s.disks != s.root {
		dirs = append(dirs, s.path("saved"))
	}
	return dirs
}

func readSavedDisk(dir string) (sandbox.SavedDisk, error) {
	var d sandbox.SavedDisk
	if err := readJSON(filepath.Join(dir, "meta.json"), &d); err != nil {
		return d, err
	}
	d.UsedBytes = usedBytes(filepath.Join(dir, "disk.img"))
	return d, nil
}

// usedBytes is the space file's blocks take (shared ones included).
func usedBytes(file string) int64 {
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		return 0
	}
	return st.Blocks * 512
}
