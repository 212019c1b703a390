package volume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
)

// Files of a volume under <root>/<name>.
const (
	imageFile = "disk.img"
	dataDir   = "data"
)

// Store keeps the volumes under one root. It is safe for concurrent use.
type Store struct {
	root string
	recs Records
	mkfs string

	mu sync.Mutex
	// vols are the ready volumes by name. Guarded by mu.
	vols map[string]*entry
	// busy are the names being created or removed. Guarded by mu.
	busy map[string]bool
}

// entry is a ready, mounted volume.
type entry struct {
	v Volume
}

// Config configures a Store.
type Config struct {
	// Root holds one directory per volume (the daemon's <root>/volumes).
	Root string
	// Records persist the volumes' records.
	Records Records
	// Mkfs is the path of mkfs.ext4; empty looks it up.
	Mkfs string
}

// Open opens the store: it makes the root a shared mount point (see
// shareRoot), mounts every ready volume that is not mounted yet (a volume
// left mounted by an earlier daemon is used as it is) and removes what a
// create or remove cut short left behind (records in state creating,
// directories without a record).
//
// Open the store before the runtimes make their mount namespaces: the
// volumes mounted later reach those namespaces through the shared root.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Root == "" || cfg.Records == nil {
		return nil, fmt.Errorf("volume store: root and records are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Mkfs == "" {
		cfg.Mkfs = findMkfs()
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	if err := shareRoot(cfg.Root); err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	s := &Store{root: cfg.Root, recs: cfg.Records, mkfs: cfg.Mkfs, vols: map[string]*entry{}, busy: map[string]bool{}}
	recs, err := s.recs.ListVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	known := map[string]bool{}
	for _, v := range recs {
		if ValidateName(v.Name) != nil {
			// Never a path: only the record goes.
			log.G(ctx).Error("volume: dropping a record with a bad name", "volume", v.Name)
			if err := s.recs.DeleteVolume(ctx, v.Name); err != nil {
				log.G(ctx).Error("volume: drop record", "volume", v.Name, "error", err)
			}
			continue
		}
		known[v.Name] = true
		if v.State != StateReady {
			log.G(ctx).Info("volume: removing what an interrupted create or remove left", "volume", v.Name, "state", v.State)
			if err := s.discard(ctx, v.Name); err != nil {
				log.G(ctx).Error("volume: cannot remove leftovers", "volume", v.Name, "error", err)
			}
			continue
		}
		e, err := s.mount(ctx, *v)
		if err != nil {
			// Kept: the data may be fine; a later daemon tries again.
			log.G(ctx).Error("volume: cannot mount", "volume", v.Name, "error", err)
			continue
		}
		s.vols[v.Name] = e
	}
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("volume store: %w", err)
	}
	for _, de := range ents {
		if !known[de.Name()] {
			log.G(ctx).Info("volume: removing a directory without a record", "dir", de.Name())
			if err := s.removeFiles(de.Name()); err != nil {
				log.G(ctx).Error("volume: cannot remove leftovers", "dir", de.Name(), "error", err)
			}
		}
	}
	return s, nil
}

// Close closes the store. The volumes stay mounted, for the sandboxes that
// outlive the daemon and for the next daemon; without volumes, the root's
// own mount goes too.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.vols)
	s.vols = map[string]*entry{}
	if n == 0 {
		return unshareRoot(s.root)
	}
	return nil
}

// Create makes volume name of size bytes (0: DefaultBytes).
// errdefs.ErrAlreadyExists when it exists, ErrInvalidArgument for a bad
// name or size; on error nothing is left.
func (s *Store) Create(ctx context.Context, name string, size int64, labels map[string]string) (_ Volume, retErr error) {
	if err := ValidateName(name); err != nil {
		return Volume{}, err
	}
	size, err := ValidateSize(size)
	if err != nil {
		return Volume{}, err
	}
	if s.mkfs == "" {
		return Volume{}, fmt.Errorf("create volume %s: mkfs.ext4 not found (install e2fsprogs): %w", name, errdefs.ErrUnavailable)
	}
	if err := s.claim(name, false); err != nil {
		return Volume{}, err
	}
	var made *entry
	defer func() { s.settle(name, made) }()

	v := Volume{Name: name, SizeBytes: size, Labels: maps.Clone(labels), Created: time.Now().UTC().Truncate(time.Millisecond), State: StateCreating}
	if err := s.recs.PutVolume(ctx, &v); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	defer func() {
		if retErr != nil {
			dctx := context.WithoutCancel(ctx)
			if err := s.discard(dctx, name); err != nil {
				log.G(ctx).Error("volume: roll back create", "volume", name, "error", err)
			}
		}
	}()
	dir := filepath.Join(s.root, name)
	if err := os.MkdirAll(filepath.Join(dir, dataDir), 0o700); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	if err := makeImage(ctx, s.mkfs, filepath.Join(dir, imageFile), size); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	e, err := s.mount(ctx, v)
	if err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	v.State = StateReady
	if err := s.recs.PutVolume(ctx, &v); err != nil {
		return Volume{}, fmt.Errorf("create volume %s: %w", name, err)
	}
	e.v = v
	made = e
	log.G(ctx).Info("volume created", "volume", name, "bytes", size)
	return v, nil
}

// Remove unmounts volume name and removes its image and record. The
// caller makes sure no sandbox uses it. errdefs.ErrNotFound when there is
// no such volume, ErrFailedPrecondition when its file system is busy
// (a process on the host has a file open on it).
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	if err := s.claim(name, true); err != nil {
		return err
	}
	s.mu.Lock()
	e := s.vols[name]
	delete(s.vols, name)
	s.mu.Unlock()
	kept := e
	defer func() { s.settle(name, kept) }()
	if err := unmount(filepath.Join(s.root, name, dataDir)); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	kept = nil
	if err := s.discard(ctx, name); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	log.G(ctx).Info("volume removed", "volume", name)
	return nil
}

// Get returns volume name; errdefs.ErrNotFound when there is none.
func (s *Store) Get(name string) (Volume, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.vols[name]
	if !ok {
		return Volume{}, notFound(name)
	}
	return e.v, nil
}

// List returns the ready volumes sorted by name.
func (s *Store) List() []Volume {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Volume, 0, len(s.vols))
	for _, e := range s.vols {
		out = append(out, e.v)
	}
	slices.SortFunc(out, func(a, b Volume) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Path returns the path of volume name's root for a runtime to
// bind-mount. errdefs.ErrNotFound when there is no such volume.
func (s *Store) Path(name string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.vols[name]; !ok {
		return "", notFound(name)
	}
	return filepath.Join(s.root, name, dataDir), nil
}

// Usage returns how much of volume name is used.
func (s *Store) Usage(name string) (Usage, error) {
	p, err := s.Path(name)
	if err != nil {
		return Usage{}, err
	}
	return usage(p)
}

// Allocated returns the bytes volume name's image takes on the host's
// disk (its blocks: the image is sparse), 0 when unknown.
func (s *Store) Allocated(name string) int64 {
	if ValidateName(name) != nil {
		return 0
	}
	return allocated(filepath.Join(s.root, name, imageFile))
}

func notFound(name string) error {
	return fmt.Errorf("volume %q not found (corral volume ls lists them): %w", name, errdefs.ErrNotFound)
}

// claim marks name busy. With existing, the volume must exist (remove);
// without, it must not (create).
func (s *Store) claim(name string, existing bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy[name] {
		return fmt.Errorf("volume %q is being created or removed: %w", name, errdefs.ErrConflict)
	}
	_, ok := s.vols[name]
	switch {
	case existing && !ok:
		return notFound(name)
	case !existing && ok:
		return fmt.Errorf("volume %q already exists: %w", name, errdefs.ErrAlreadyExists)
	}
	s.busy[name] = true
	return nil
}

// settle ends a claim; e, when set, is the volume's entry from now on.
func (s *Store) settle(name string, e *entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.busy, name)
	if e != nil {
		s.vols[name] = e
	}
}

// mount mounts v's image on its data directory unless it is mounted there
// already.
func (s *Store) mount(ctx context.Context, v Volume) (*entry, error) {
	dir := filepath.Join(s.root, v.Name)
	if err := mountImage(ctx, filepath.Join(dir, imageFile), filepath.Join(dir, dataDir)); err != nil {
		return nil, err
	}
	return &entry{v: v}, nil
}

// discard unmounts and removes whatever is left of volume name, then its
// record.
func (s *Store) discard(ctx context.Context, name string) error {
	if err := unmount(filepath.Join(s.root, name, dataDir)); err != nil {
		return err
	}
	if err := s.removeFiles(name); err != nil {
		return err
	}
	return s.recs.DeleteVolume(ctx, name)
}

// removeFiles removes <root>/<name> once nothing is mounted on it.
func (s *Store) removeFiles(name string) error {
	dir := filepath.Join(s.root, name)
	if err := unmount(filepath.Join(dir, dataDir)); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
