// Package image is the image store: named records (sandbox.Image) whose top
// layer lives in the overlay layer store, imported from tarballs or host
// directories, plus the daemon's built-in images ("host" and "busybox").
package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/archive"
	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/image/source"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
)

// DefaultRoot is where image records live by default.
const DefaultRoot = "/var/lib/corral/images"

// Store maps image names to records. It is safe for concurrent use.
type Store struct {
	root   string
	layers *overlay.Store
	opts   options

	// mu serialises registering and removing records.
	mu sync.Mutex
	// gcMu keeps the collector (write lock) away from layers that an
	// import, pull or build (read lock) made but has not yet recorded.
	gcMu sync.RWMutex

	// getMu guards got.
	getMu sync.Mutex
	// got holds, by name, the records Get read, each with its file's
	// identity then; guarded by getMu.
	got map[string]gotRecord
}

// gotRecord is one image Get read, and the record file it came from.
type gotRecord struct {
	img  sandbox.Image
	file os.FileInfo
}

// Opt configures New.
type Opt func(*options)

type options struct {
	archive      archive.Options
	registry     source.RegistryOptions
	debianMirror string
	debootstrap  string
	hostEtc      string
	busybox      string
	hostRoot     string
	keepOwner    bool
}

// WithArchiveOptions bounds imported tarballs (size, entries).
func WithArchiveOptions(o archive.Options) Opt { return func(so *options) { so.archive = o } }

// WithRegistry sets how registries are reached (credentials, insecure
// registries, transport).
func WithRegistry(o source.RegistryOptions) Opt { return func(so *options) { so.registry = o } }

// WithDebianMirror sets the mirror Bootstrap uses by default.
func WithDebianMirror(url string) Opt { return func(so *options) { so.debianMirror = url } }

// WithDebootstrap sets the debootstrap binary (a name looked up in PATH, or
// a path).
func WithDebootstrap(bin string) Opt { return func(so *options) { so.debootstrap = bin } }

// WithHost sets where the host image copies its files from: the host's root
// directory (for the merged-usr symlinks), its /etc, and the busybox binary.
// Tests use it; the defaults are "/", "/etc" and "/bin/busybox".
func WithHost(root, etc, busybox string) Opt {
	return func(o *options) { o.hostRoot, o.hostEtc, o.busybox = root, etc, busybox }
}

// record is the file stored per image; BuiltinVersion rebuilds built-in
// images made by an older daemon.
type record struct {
	sandbox.Image
	// Source says where the image came from: "builtin", "import",
	// "registry", "archive", "layout", "bootstrap" or "build".
	Source string `json:"source,omitempty"`
	// Reference is what the image was made from: a registry reference, an
	// archive's tag, a bootstrap suite or a spec file.
	Reference string `json:"reference,omitempty"`
	// Digest is the manifest digest of a pulled or loaded image.
	Digest string `json:"digest,omitempty"`
	// Spec holds the runtime settings of an image built from a spec that
	// the Manager does not apply itself (network, secrets, ports).
	Spec           *RuntimeSpec `json:"spec,omitempty"`
	BuiltinVersion int          `json:"builtin_version,omitempty"`
}

// New opens (creating it if needed) the image store at root on layers.
func New(root string, layers *overlay.Store, opts ...Opt) (*Store, error) {
	o := options{hostRoot: "/", hostEtc: "/etc", busybox: "/bin/busybox", keepOwner: os.Geteuid() == 0}
	for _, opt := range opts {
		opt(&o)
	}
	o.archive.KeepOwners = o.keepOwner
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	s := &Store{root: root, layers: layers, opts: o, got: map[string]gotRecord{}}
	if err := s.migrate(context.Background()); err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	return s, nil
}

// recordPath is where the record of name lives: a digest of the name, since
// image names hold '/' and ':' (the record holds the name itself).
func (s *Store) recordPath(name string) string {
	sum := sha256.Sum256([]byte(name))
	return filepath.Join(s.root, hex.EncodeToString(sum[:16])+".json")
}

func (s *Store) read(name string) (record, error) {
	r, err := readRecord(s.recordPath(name))
	if err == nil && r.Name != name {
		return record{}, fmt.Errorf("image %s: record holds %q: %w", name, r.Name, fs.ErrNotExist)
	}
	r.Binds = s.withHostUsrHidden(r.Binds)
	return r, err
}

func readRecord(p string) (record, error) {
	var r record
	b, err := os.ReadFile(p)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("image record %s: %w", filepath.Base(p), err)
	}
	return r, nil
}

func (s *Store) write(r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := atomicfile.Write(s.recordPath(r.Name), b, 0o600); err != nil {
		return fmt.Errorf("write image %s: %w", r.Name, err)
	}
	return nil
}

// Get returns the image name; errdefs.ErrNotFound lists the known names.
func (s *Store) Get(ctx context.Context, name string) (sandbox.Image, error) {
	if err := ValidateName(name); err != nil {
		return sandbox.Image{}, err
	}
	// Get is on the create path, and a record only changes when its file
	// is replaced (atomicfile renames a new one in): a stat that finds the
	// file Get read last time saves opening, reading and decoding it
	// (BenchmarkGet measures it). The copy shares no memory
	// with the cached record, so callers may change it.
	fi, statErr := os.Stat(s.recordPath(name))
	if statErr == nil {
		s.getMu.Lock()
		c, ok := s.got[name]
		s.getMu.Unlock()
		if ok && sameFile(c.file, fi) {
			return c.img.Clone(), nil
		}
	}
	r, err := s.read(name)
	s.getMu.Lock()
	if err == nil && statErr == nil {
		// A file replaced between the stat and the read is cached under
		// the stat of the old one, which the next Get's stat does not
		// match: it reads again.
		s.got[name] = gotRecord{img: r.Image.Clone(), file: fi}
	} else {
		delete(s.got, name)
	}
	s.getMu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		var names []string
		if imgs, lerr := s.List(ctx); lerr == nil {
			for _, i := range imgs {
				names = append(names, i.Name)
			}
		}
		return sandbox.Image{}, fmt.Errorf("image %q not found (known: %s): %w", name, strings.Join(names, ", "), errdefs.ErrNotFound)
	}
	if err != nil {
		return sandbox.Image{}, err
	}
	// Get is on the create path: it does not walk the layer chain, so
	// Layers is left unset (List and imports fill it).
	return r.Image, nil
}

// sameFile reports whether a and b are stats of the same file, unchanged:
// the same inode, size and modification time.
func sameFile(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// withLayers fills img.Layers from the layer store's chain.
func (s *Store) withLayers(img sandbox.Image) sandbox.Image {
	if layers, size, err := s.layerChain(img.TopLayer); err == nil {
		img.Layers, img.Size = len(layers), size
	}
	return img
}

// maxLayerChain bounds the layers of one image that layerChain follows.
const maxLayerChain = 500

// layerChain returns the layers from top down to the base, bottom first,
// and the bytes they use together.
func (s *Store) layerChain(top string) ([]LayerInfo, int64, error) {
	var (
		out  []LayerInfo
		size int64
	)
	for k := top; k != ""; {
		l, err := s.layers.Layer(k)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, LayerInfo{Key: l.Key, DiffID: l.DiffID, Size: l.Size})
		size += l.Size
		k = l.Parent
		if len(out) > maxLayerChain {
			return nil, 0, fmt.Errorf("layer chain too long: %w", errdefs.ErrInvalidArgument)
		}
	}
	slices.Reverse(out)
	return out, size, nil
}

// List returns all images sorted by name.
func (s *Store) List(ctx context.Context) ([]sandbox.Image, error) {
	rs, err := s.records(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]sandbox.Image, len(rs))
	for i, r := range rs {
		out[i] = s.withLayers(r.Image)
	}
	return out, nil
}

// records reads every image record, sorted by name.
func (s *Store) records(ctx context.Context) ([]record, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var out []record
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(s.root, e.Name())
		r, err := readRecord(p)
		if err != nil {
			log.G(ctx).Warn("skip unreadable image record", "file", e.Name(), "error", err)
			continue
		}
		if ValidateName(r.Name) != nil || p != s.recordPath(r.Name) {
			log.G(ctx).Warn("skip misplaced image record", "file", e.Name(), "image", r.Name)
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b record) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ImportTar makes the image name from a tar stream (plain or gzip), which is
// untrusted: it goes through archive.Apply. A failure leaves nothing
// registered and no layer behind. ErrAlreadyExists when name exists.
func (s *Store) ImportTar(ctx context.Context, name string, r io.Reader) (sandbox.Image, error) {
	return s.importLayer(ctx, name, func(ctx context.Context, dir string) error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		opts := s.opts.archive
		opts.KeepSetuid = true // as pulled layers do
		_, err = archive.Apply(ctx, root, r, opts)
		return err
	})
}

// ImportDir makes the image name from a copy of the host directory dir.
// Symlinks are copied as symlinks and never followed, so nothing outside
// dir is read.
func (s *Store) ImportDir(ctx context.Context, name, dir string) (sandbox.Image, error) {
	src, err := os.OpenRoot(dir)
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("import %s: %w", dir, err)
	}
	defer src.Close()
	opts := s.opts.archive
	opts.KeepSetuid = true // as pulled layers do
	return s.importLayer(ctx, name, func(ctx context.Context, dst string) error {
		return copyTree(ctx, src, ".", dst, opts)
	})
}

// copyTree copies p under src into the directory dst through a tar stream,
// with all of archive.Apply's checks.
func copyTree(ctx context.Context, src *os.Root, p, dst string, opts archive.Options) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	return archive.Copy(ctx, src, p, root, opts, nil)
}

func (s *Store) importLayer(ctx context.Context, name string, fill func(ctx context.Context, dir string) error) (sandbox.Image, error) {
	if err := ValidateName(name); err != nil {
		return sandbox.Image{}, err
	}
	if _, err := s.read(name); err == nil {
		return sandbox.Image{}, fmt.Errorf("image %q: %w", name, errdefs.ErrAlreadyExists)
	}
	s.gcMu.RLock() // no collection between the layer and its record
	defer s.gcMu.RUnlock()
	key, _, err := s.layers.AddLayer(ctx, "", func(dir string) (string, string, error) {
		if err := fill(ctx, dir); err != nil {
			return "", "", err
		}
		diffID, err := digestTree(dir)
		if err != nil {
			return "", "", err
		}
		return layerKey("", diffID), diffID, nil
	})
	if err != nil {
		return sandbox.Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	img, err := s.register(ctx, record{Source: "import", Image: sandbox.Image{
		Name: name, TopLayer: key, Workdir: "/", Created: time.Now().UTC(),
		Env: []string{"PATH=" + defaultPath},
	}}, false)
	if err != nil {
		return sandbox.Image{}, err
	}
	return s.withLayers(img), nil
}

// register fills in the size (of all the image's layers) and writes r, refusing to overwrite an
// existing record unless replace.
func (s *Store) register(ctx context.Context, r record, replace bool) (sandbox.Image, error) {
	_, size, err := s.layerChain(r.TopLayer)
	if err != nil {
		return sandbox.Image{}, err
	}
	r.Size = size
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, err := s.read(r.Name); err == nil {
		if !replace {
			return sandbox.Image{}, fmt.Errorf("image %q: %w", r.Name, errdefs.ErrAlreadyExists)
		}
		if sameImage(old, r) {
			// The same image again (a fully cached build): it keeps its
			// creation time, as docker's does.
			r.Created = old.Created
		}
	}
	if err := s.write(r); err != nil {
		return sandbox.Image{}, err
	}
	log.G(ctx).Info("image registered", "image", r.Name, "layer", r.TopLayer, "size", r.Size)
	return r.Image, nil
}

// sameImage reports whether two records describe the same image: equal in
// everything but their creation time and measured size.
func sameImage(a, b record) bool {
	a.Created, b.Created, a.Size, b.Size = time.Time{}, time.Time{}, 0, 0
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// Remove deletes the image name, then the layers that no other image, no
// sandbox and no build-cache entry refers to. Built-in images fail with
// errdefs.ErrFailedPrecondition. Sandboxes made from the image keep
// running: their layers stay until they are gone (then `image prune`, or
// the next Remove, collects them).
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := ValidateName(name); err != nil {
		return err
	}
	s.mu.Lock()
	r, err := s.read(name)
	if errors.Is(err, fs.ErrNotExist) {
		s.mu.Unlock()
		return fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		s.mu.Unlock()
		return err
	}
	if r.Builtin {
		s.mu.Unlock()
		return fmt.Errorf("image %s is built in: %w", name, errdefs.ErrFailedPrecondition)
	}
	err = os.Remove(s.recordPath(name))
	if err == nil && r.Disk != "" {
		if derr := s.releaseDisk(ctx, r.Disk); derr != nil {
			log.G(ctx).Warn("remove snapshot disk", "image", name, "disk", r.Disk, "error", derr)
		}
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	log.G(ctx).Info("image removed", "image", name)
	// Collect now unless an import or build is under way (it holds the
	// collector off); the next prune does it then.
	if s.gcMu.TryLock() {
		defer s.gcMu.Unlock()
		if _, err := s.collect(ctx, false); err != nil {
			log.G(ctx).Warn("collect layers", "error", err)
		}
	}
	return nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
