// Package overlay is the overlayfs layer store. Committed layers are plain
// read-only directory trees; a sandbox's writable layer lives on its own
// sparse ext4 image file, so the sandbox's disk limit is hard (writes past it
// fail with ENOSPC and the host disk is untouched beyond it) without project
// quotas. The store returns mounts and never mounts anything itself: the
// runtime attaches the image (loop) and mounts the overlay in its own mount
// namespace.
//
// Layout under the root:
//
//	layers/<key>/fs         committed layer (read-only by convention)
//	layers/<key>/meta.json  {parent, created, size}
//	active/<key>/meta.json  written first: a restarted daemon finds orphans
//	active/<key>/disk.img   sparse ext4 image holding upper/ and work/
//	active/<key>/disk/      its mount point
//	pool/<n>.img            pre-formatted default-size disks
//	l/<id>                  short symlinks to layers/<key>/fs for long chains
//	tmp/                    scratch; emptied by New
package overlay

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

var _ sandbox.LayerStore = (*Store)(nil)

// Store is the overlayfs layer store. It is safe for concurrent use.
type Store struct {
	root string
	opts options

	// mu serialises the checks and renames that keep parents and users
	// consistent (CreateLayer, RemoveLayer, the start of Prepare) and the
	// pool.
	mu sync.Mutex
	// pool are pooled disk images ready to take, guarded by mu.
	pool []string

	// tplMu serialises the making of disk templates (see format).
	tplMu sync.Mutex

	// bg runs deletions of removed writable layers; Close waits for it.
	bg sync.WaitGroup

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Layer describes a committed layer.
type Layer struct {
	Key    string `json:"key"`
	Parent string `json:"parent,omitempty"`
	// DiffID is the digest of the layer as an uncompressed OCI tar, when
	// known ("sha256:...").
	DiffID  string    `json:"diff_id,omitempty"`
	Created time.Time `json:"created"`
	// Size is the bytes the layer's own files use on disk.
	Size int64 `json:"size"`
}

type activeMeta struct {
	Key       string    `json:"key"`
	Parent    string    `json:"parent,omitempty"`
	DiskBytes int64     `json:"disk_bytes"`
	Created   time.Time `json:"created"`
}

// New opens (creating it if needed) the store at root, removes scratch left
// by a crash and starts the pool filler. Close stops it.
func New(root string, opts ...Opt) (*Store, error) {
	o := options{defaultDiskBytes: DefaultDiskBytes, poolSize: DefaultPoolSize}
	for _, opt := range opts {
		opt(&o)
	}
	if err := (Config{Root: root, DefaultDiskBytes: o.defaultDiskBytes}).Validate(); err != nil {
		return nil, err
	}
	o.defaultDiskBytes = (o.defaultDiskBytes + 4095) &^ 4095
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("overlay root: %w", err)
	}
	if o.mkfs == "" {
		o.mkfs = findMkfs()
	}
	s := &Store{root: root, opts: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, d := range []string{"layers", "active", "pool", "l", "tmp", "empty"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			return nil, fmt.Errorf("make overlay dirs: %w", err)
		}
	}
	// Lower layers must be traversable by unprivileged sandbox users.
	for _, d := range []string{"", "layers", "l", "empty"} {
		if err := os.Chmod(filepath.Join(root, d), 0o755); err != nil {
			return nil, fmt.Errorf("chmod overlay dirs: %w", err)
		}
	}
	if err := os.RemoveAll(s.path("tmp")); err != nil {
		return nil, fmt.Errorf("clean overlay scratch: %w", err)
	}
	if err := os.Mkdir(s.path("tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("clean overlay scratch: %w", err)
	}
	if err := s.loadPool(); err != nil {
		return nil, err
	}
	if o.poolSize > 0 && o.mkfs != "" {
		go s.fillPool()
		s.kickPool()
	} else {
		close(s.done)
	}
	return s, nil
}

// Close stops the pool filler and waits for it. Pooled disks stay for the
// next New.
func (s *Store) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.bg.Wait()
	return nil
}

// Root is the store's root directory.
func (s *Store) Root() string { return s.root }

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.root}, elem...)...)
}

// CreateLayer makes the committed layer key on parent ("" for a base layer)
// by calling apply on a fresh empty directory, then moves it into place
// atomically: a crash leaves only scratch that New removes. Errors:
// ErrAlreadyExists when key exists, ErrNotFound when parent does not.
func (s *Store) CreateLayer(ctx context.Context, key, parent string, apply func(dir string) error) error {
	if err := identifiers.Validate("layer key", key); err != nil {
		return err
	}
	if _, err := os.Lstat(s.path("layers", key)); err == nil {
		return fmt.Errorf("layer %q: %w", key, errdefs.ErrAlreadyExists)
	}
	_, existed, err := s.AddLayer(ctx, parent, func(dir string) (string, string, error) {
		return key, "", apply(dir)
	})
	if err == nil && existed {
		err = fmt.Errorf("layer %q: %w", key, errdefs.ErrAlreadyExists)
	}
	return err
}

// AddLayer makes a committed layer on parent whose key is known only once
// its content is: fill fills the empty directory dir and returns the key
// (for content-addressed layers, derived from the digest of what it wrote)
// and the layer's diff ID ("sha256:...", or ""). When a layer with that key
// already exists, the new copy is discarded and AddLayer reports existed:
// identical content is stored once. A crash leaves only scratch that New
// removes.
func (s *Store) AddLayer(ctx context.Context, parent string, fill func(dir string) (key, diffID string, err error)) (key string, existed bool, err error) {
	if err := s.checkLayer(parent); err != nil {
		return "", false, err
	}
	tmp, err := os.MkdirTemp(s.path("tmp"), "layer-")
	if err != nil {
		return "", false, fmt.Errorf("create layer: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	fsDir := filepath.Join(tmp, "fs")
	if err := os.Mkdir(fsDir, 0o755); err != nil {
		return "", false, fmt.Errorf("create layer: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", false, fmt.Errorf("create layer: %w", err)
	}
	key, diffID, err := fill(fsDir)
	if err != nil {
		return "", false, fmt.Errorf("create layer: %w", err)
	}
	if err := identifiers.Validate("layer key", key); err != nil {
		return "", false, err
	}
	if err := ctx.Err(); err != nil {
		return "", false, err
	}
	size, err := diskUsage(fsDir)
	if err != nil {
		return "", false, fmt.Errorf("create layer %s: %w", key, err)
	}
	meta := Layer{Key: key, Parent: parent, DiffID: diffID, Created: time.Now().UTC(), Size: size}
	if err := writeJSON(filepath.Join(tmp, "meta.json"), meta); err != nil {
		return "", false, fmt.Errorf("create layer %s: %w", key, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.checkLayer(parent); err != nil { // removed meanwhile?
		return "", false, err
	}
	if err := os.Rename(tmp, s.path("layers", key)); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			if l, lerr := s.Layer(key); lerr == nil && l.Parent != parent {
				return "", false, fmt.Errorf("layer %s exists on parent %q, not %q: %w", key, l.Parent, parent, errdefs.ErrAlreadyExists)
			}
			return key, true, nil
		}
		return "", false, fmt.Errorf("create layer %s: %w", key, err)
	}
	log.G(ctx).Debug("layer created", "layer", key, "parent", parent, "size", size)
	return key, false, nil
}

// HasLayer reports whether the committed layer key exists.
func (s *Store) HasLayer(key string) bool { return key != "" && s.checkLayer(key) == nil }

// checkLayer returns ErrNotFound unless key is "" or a committed layer.
func (s *Store) checkLayer(key string) error {
	if key == "" {
		return nil
	}
	if err := identifiers.Validate("layer key", key); err != nil {
		return err
	}
	if _, err := os.Lstat(s.path("layers", key, "meta.json")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("layer %q: %w", key, errdefs.ErrNotFound)
		}
		return fmt.Errorf("layer %s: %w", key, err)
	}
	return nil
}

// Layer returns the metadata of the committed layer key.
func (s *Store) Layer(key string) (Layer, error) {
	if err := s.checkLayer(key); err != nil {
		return Layer{}, err
	}
	var l Layer
	if key == "" {
		return l, fmt.Errorf("layer key must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	if err := readJSON(s.path("layers", key, "meta.json"), &l); err != nil {
		return Layer{}, fmt.Errorf("layer %s: %w", key, err)
	}
	return l, nil
}

// LayerSize is the bytes used by key's own files (not its parents').
func (s *Store) LayerSize(key string) (int64, error) {
	l, err := s.Layer(key)
	return l.Size, err
}

// Layers lists the committed layers, sorted by key.
func (s *Store) Layers(ctx context.Context) ([]Layer, error) {
	keys, err := listDir(s.path("layers"))
	if err != nil {
		return nil, err
	}
	var out []Layer
	for _, k := range keys {
		l, err := s.Layer(k)
		if errdefs.IsNotFound(err) || errdefs.IsInvalidArgument(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Chain returns the fs directories of key and its parents, bottom first.
func (s *Store) Chain(key string) ([]string, error) {
	var chain []string
	for k := key; k != ""; {
		l, err := s.Layer(k)
		if err != nil {
			return nil, err
		}
		chain = append(chain, s.path("layers", k, "fs"))
		if len(chain) > 500 { // overlayfs's own limit; also stops a cycle
			return nil, fmt.Errorf("layer %s: chain longer than 500 layers: %w", key, errdefs.ErrInvalidArgument)
		}
		k = l.Parent
	}
	slices.Reverse(chain)
	return chain, nil
}

// chainKeys returns key and its parents, top first.
func (s *Store) chainKeys(key string) ([]string, error) {
	var keys []string
	for k := key; k != ""; {
		l, err := s.Layer(k)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
		if len(keys) > 500 {
			return nil, fmt.Errorf("layer %s: chain longer than 500 layers: %w", key, errdefs.ErrInvalidArgument)
		}
		k = l.Parent
	}
	return keys, nil
}

// RemoveLayer deletes the committed layer key. It refuses with
// ErrFailedPrecondition, naming the user, while a writable layer or another
// layer has key as parent. A missing layer is success.
func (s *Store) RemoveLayer(ctx context.Context, key string) error {
	if err := identifiers.Validate("layer key", key); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := os.Lstat(s.path("layers", key)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	layers, err := s.Layers(ctx)
	if err != nil {
		return err
	}
	for _, l := range layers {
		if l.Parent == key {
			return fmt.Errorf("layer %s is the parent of layer %s: %w", key, l.Key, errdefs.ErrFailedPrecondition)
		}
	}
	active, err := s.Active(ctx)
	if err != nil {
		return err
	}
	for _, a := range active {
		var m activeMeta
		if err := readJSON(s.path("active", a, "meta.json"), &m); err != nil {
			continue
		}
		keys, _ := s.chainKeys(m.Parent)
		if slices.Contains(keys, key) {
			return fmt.Errorf("layer %s is in use by %s: %w", key, a, errdefs.ErrFailedPrecondition)
		}
	}
	if err := s.trash(s.path("layers", key), false); err != nil {
		return fmt.Errorf("remove layer %s: %w", key, err)
	}
	_ = os.Remove(s.path("l", shortID(key)))
	log.G(ctx).Debug("layer removed", "layer", key)
	return nil
}

// trash renames dir into tmp (so it disappears atomically) and deletes it,
// in the background when async (New finishes what a crash interrupted).
func (s *Store) trash(dir string, async bool) error {
	t := s.path("tmp", "trash-"+randomHex())
	if err := os.Rename(dir, t); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if async {
		s.bg.Go(func() { _ = os.RemoveAll(t) })
		return nil
	}
	return os.RemoveAll(t)
}

// Active lists the keys of writable layers, including those left by a
// previous daemon (remove them with Remove).
func (s *Store) Active(context.Context) ([]string, error) {
	return listDir(s.path("active"))
}

func listDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && identifiers.Validate("key", e.Name()) == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// shortID names the l/ symlink of a layer.
func shortID(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:6])
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// writeJSON writes v to name atomically (temp file + rename).
func writeJSON(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	tmp := name + ".tmp-" + randomHex()
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// writeFileExcl writes v as JSON to a new file name.
func writeFileExcl(name string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func readJSON(name string, v any) error {
	b, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// diskUsage sums the blocks used under dir, counting hard links once.
func diskUsage(dir string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			total += fi.Size()
			return nil
		}
		if st.Nlink > 1 && !fi.IsDir() {
			if seen[st.Ino] {
				return nil
			}
			seen[st.Ino] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}

func findMkfs() string {
	if p, err := exec.LookPath("mkfs.ext4"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
