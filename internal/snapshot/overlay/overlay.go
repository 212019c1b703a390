// Package overlay is the overlayfs layer store. Committed layers are plain
// read-only directory trees; a sandbox's writable layer lives on its own
// sparse ext4 image file, so the sandbox's disk limit is hard (writes past it
// fail with ENOSPC and the host disk is untouched beyond it) without project
// quotas. The store returns mounts and never mounts anything itself for a
// caller: the runtime attaches the image (loop) and mounts the overlay in
// its own mount namespace.
//
// Disks are copied (fork: Prepare with FromActive; snapshot: SaveDisk, then
// Prepare with FromDisk) by reflink (FICLONE), in constant time whatever the
// box wrote, where the file system of the disk images supports it (XFS with
// reflink, btrfs), and by a sparse copy (O(data)) elsewhere. New checks
// which once. When the root's file system cannot reflink (ext4), the store
// keeps every disk image on the disk volume: a sparse file the size of the
// host file system, formatted XFS with reflink, loop-mounted with discard
// on <root>/disks in the host's mount namespace (the one mount the store
// makes itself; see Config.DiskVolume). New mounts it or reuses the one
// mounted already; Close unmounts it only when no writable layer is left,
// so a restarted daemon finds its running boxes' disks where they were.
// Mount sources of disks on the volume are /proc/<pid>/fd/<n>/... paths
// through an open descriptor of the volume, valid in every mount namespace
// of the process.
//
// Layout under the root:
//
//	layers/<key>/fs         committed layer (read-only by convention)
//	layers/<key>/meta.json  {parent, created, size}
//	active/<key>/meta.json  written first: a restarted daemon finds orphans
//	active/<key>/disk.img   sparse ext4 image holding upper/ and work/
//	                        (without a disk volume)
//	active/<key>/disk/      its mount point
//	pool/<n>/               pre-formatted default-size disk (disk.img, disk/)
//	templates/              formatted empty disks, one per size, cloned
//	saved/<name>/           a saved disk: disk.img and meta.json {parent, size}
//	l/<id>                  short symlinks to layers/<key>/fs for long chains
//	tmp/                    scratch; emptied by New
//	disks.img               the disk volume's image (when there is one)
//	disks/                  its mount point, holding instead of the above:
//	  active/<key>.img      a writable layer's disk
//	  pool/<n>.img          pre-formatted default-size disks
//	  templates/, saved/    as above
//	  tmp/                  scratch for copies; emptied by New
//
// Every copy is made in a tmp/ directory and renamed into place, so a crash
// leaves scratch that New removes and never a half-made disk.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

var (
	_ sandbox.LayerStore   = (*Store)(nil)
	_ sandbox.LayerMounter = (*Store)(nil)
	_ sandbox.DiskSaver    = (*Store)(nil)
)

// Store is the overlayfs layer store. It is safe for concurrent use.
type Store struct {
	root string
	opts options

	// disks is the directory that holds disk images (active, pool,
	// templates, saved, tmp): root, or the disk volume's mount point.
	disks string
	// vol is the disk volume, nil when disks is root.
	vol *volume
	// reflink is whether files under disks can be reflinked.
	reflink bool

	// mu serialises the checks and renames that keep parents and users
	// consistent (CreateLayer, RemoveLayer, SaveDisk, the start of
	// Prepare) and the pool.
	mu sync.Mutex
	// pool are pooled disk images ready to take, guarded by mu.
	pool []string

	// tplMu serialises the making of disk templates (see format).
	tplMu sync.Mutex
	// tplChecked holds the templates whose block size was checked (or
	// that were made) by this store. Guarded by tplMu.
	tplChecked map[string]bool

	// bg runs deletions of removed writable layers; Close waits for it.
	bg sync.WaitGroup

	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
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
	// Volume is true when the disk image is on the disk volume
	// (disks/active/<key>.img) rather than beside meta.json.
	Volume bool `json:"volume,omitempty"`
}

// New opens (creating it if needed) the store at root, mounts the disk
// volume (see Config.DiskVolume) or reuses the one mounted already,
// removes scratch left by a crash and starts the pool filler. Close stops
// it.
func New(root string, opts ...Opt) (_ *Store, retErr error) {
	o := options{defaultDiskBytes: DefaultDiskBytes, poolSize: DefaultPoolSize, volumeDirtyBytes: DefaultVolumeDirtyBytes}
	for _, opt := range opts {
		opt(&o)
	}
	if err := (Config{Root: root, DefaultDiskBytes: o.defaultDiskBytes, DiskVolume: o.diskVolume}).Validate(); err != nil {
		return nil, err
	}
	if o.diskVolume == "" {
		o.diskVolume = DiskVolumeAuto
	}
	o.defaultDiskBytes = (o.defaultDiskBytes + 4095) &^ 4095
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("overlay root: %w", err)
	}
	if o.mkfs == "" {
		o.mkfs = findMkfs()
	}
	if o.mkfsXFS == "" {
		o.mkfsXFS = findMkfsXFS()
	}
	ctx := storeContext(o)
	s := &Store{root: root, disks: root, opts: o, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	for _, d := range []string{"layers", "active", "pool", "saved", "l", "tmp", "empty"} {
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
	if err := emptyDir(s.path("tmp")); err != nil {
		return nil, fmt.Errorf("clean overlay scratch: %w", err)
	}
	if err := s.openVolume(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil && s.vol != nil {
			_ = s.vol.close(ctx, s.idle())
		}
	}()
	if s.vol != nil {
		for _, d := range []string{"active", "pool", "templates", "saved", "tmp"} {
			if err := os.MkdirAll(filepath.Join(s.disks, d), 0o700); err != nil {
				return nil, fmt.Errorf("make disk volume dirs: %w", err)
			}
		}
		if err := emptyDir(filepath.Join(s.disks, "tmp")); err != nil {
			return nil, fmt.Errorf("clean disk volume scratch: %w", err)
		}
		s.removeOrphanDisks(ctx)
		// Templates and pooled disks of the root are caches made before
		// the volume was: they cannot be reflinked from here.
		_ = os.RemoveAll(s.path("templates"))
	}
	s.reflink = canReflink(filepath.Join(s.disks, "tmp"))
	log.G(ctx).Info("overlay disk store", "dir", s.disks, "reflink", s.reflink, "volume", s.vol != nil, "flush", s.opts.diskFlush, "direct_io", s.opts.diskDirectIO, "volume_dirty_bytes", s.opts.volumeDirtyBytes)
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

// openVolume sets s.disks and s.vol as Config.DiskVolume says.
func (s *Store) openVolume(ctx context.Context) error {
	mode := s.opts.diskVolume
	image := mode
	switch mode {
	case DiskVolumeOff:
		return nil
	case DiskVolumeAuto:
		image = s.path("disks.img")
		if canReflink(s.path("tmp")) {
			return nil
		}
		if unix.Geteuid() != 0 {
			log.G(ctx).Info("no disk volume: not root; disk copies are not reflinks", "dir", s.root)
			return nil
		}
		if s.opts.mkfsXFS == "" {
			if _, err := os.Lstat(image); err != nil {
				log.G(ctx).Info("no disk volume: mkfs.xfs not found (install xfsprogs); disk copies are not reflinks", "dir", s.root)
				return nil
			}
		}
	}
	v, err := openVolume(ctx, s.path("disks"), image, s.opts.mkfsXFS)
	if err != nil {
		if mode == DiskVolumeAuto {
			log.G(ctx).Warn("no disk volume; disk copies are not reflinks", "error", err)
			return nil
		}
		return err
	}
	s.vol, s.disks = v, v.dir
	v.setDirtyLimit(ctx, s.opts.volumeDirtyBytes) // also 0: an earlier daemon may have set one
	return nil
}

// removeOrphanDisks removes disk images on the volume whose writable layer
// is gone.
func (s *Store) removeOrphanDisks(ctx context.Context) {
	ents, err := os.ReadDir(filepath.Join(s.disks, "active"))
	if err != nil {
		return
	}
	for _, e := range ents {
		key, ok := strings.CutSuffix(e.Name(), ".img")
		if ok {
			if _, err := os.Lstat(s.path("active", key)); err == nil {
				continue
			}
		}
		log.G(ctx).Info("removing orphan disk", "disk", e.Name())
		_ = os.RemoveAll(filepath.Join(s.disks, "active", e.Name()))
	}
}

// ctx is the context of the store's own work (New, Close, the pool
// filler): it carries the logger of WithLogger.
func (s *Store) ctx() context.Context { return storeContext(s.opts) }

func storeContext(o options) context.Context {
	if o.logger != nil {
		return log.WithLogger(context.Background(), o.logger)
	}
	return context.Background()
}

// idle reports whether no writable layer exists.
func (s *Store) idle() bool {
	active, err := s.Active(s.ctx())
	return err == nil && len(active) == 0
}

// emptyDir removes everything in dir.
func emptyDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Mkdir(dir, 0o700)
}

// Close stops the pool filler and waits for it and for deletions in
// progress. Pooled disks stay for the next New. It unmounts the disk
// volume when no writable layer is left (a daemon stopped while boxes
// still run from it leaves it for the next New).
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.bg.Wait()
		if s.vol != nil {
			ctx := s.ctx()
			idle := s.idle()
			if !idle {
				log.G(ctx).Info("disk volume left mounted: writable layers exist", "dir", s.vol.dir)
			}
			err = s.vol.close(ctx, idle)
		}
	})
	return err
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
// ErrFailedPrecondition, naming the user, while a writable layer, a saved
// disk or another layer has key as parent. A missing layer is success.
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
	disks, err := s.Disks(ctx)
	if err != nil {
		return err
	}
	for _, d := range disks {
		keys, _ := s.chainKeys(d.Parent)
		if slices.Contains(keys, key) {
			return fmt.Errorf("layer %s is in use by saved disk %s: %w", key, d.Name, errdefs.ErrFailedPrecondition)
		}
	}
	if err := s.trash(s.path("layers", key), false); err != nil {
		return fmt.Errorf("remove layer %s: %w", key, err)
	}
	_ = os.Remove(s.path("l", shortID(key)))
	log.G(ctx).Debug("layer removed", "layer", key)
	return nil
}

// trash renames dir (or a file) into the tmp directory of its file system
// (so it disappears atomically) and deletes it, in the background when
// async (New finishes what a crash interrupted).
func (s *Store) trash(dir string, async bool) error {
	t := s.path("tmp", "trash-"+randomHex())
	if s.vol != nil && strings.HasPrefix(dir, s.disks+"/") {
		t = filepath.Join(s.disks, "tmp", "trash-"+randomHex())
	}
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
	return atomicfile.Write(name, b, 0o644)
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
