// Package image is the image store: named records (sandbox.Image) whose top
// layer lives in the overlay layer store, imported from tarballs or host
// directories, plus the daemon's built-in images ("host" and "busybox").
package image

import (
	"context"
	"crypto/rand"
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
	"github.com/corral-sandbox/corral/internal/identifiers"
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
}

// Opt configures New.
type Opt func(*options)

type options struct {
	archive   archive.Options
	hostEtc   string
	busybox   string
	hostRoot  string
	keepOwner bool
}

// WithArchiveOptions bounds imported tarballs (size, entries).
func WithArchiveOptions(o archive.Options) Opt { return func(so *options) { so.archive = o } }

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
	BuiltinVersion int `json:"builtin_version,omitempty"`
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
	return &Store{root: root, layers: layers, opts: o}, nil
}

func (s *Store) recordPath(name string) string { return filepath.Join(s.root, name+".json") }

func (s *Store) read(name string) (record, error) {
	var r record
	b, err := os.ReadFile(s.recordPath(name))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("image %s record: %w", name, err)
	}
	return r, nil
}

func (s *Store) write(r record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	p := s.recordPath(r.Name)
	tmp := p + ".tmp-" + randomHex()
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write image %s: %w", r.Name, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write image %s: %w", r.Name, err)
	}
	return nil
}

// Get returns the image name; errdefs.ErrNotFound lists the known names.
func (s *Store) Get(ctx context.Context, name string) (sandbox.Image, error) {
	if err := identifiers.Validate("image name", name); err != nil {
		return sandbox.Image{}, err
	}
	r, err := s.read(name)
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

// withLayers fills img.Layers from the layer store's chain.
func (s *Store) withLayers(img sandbox.Image) sandbox.Image {
	if chain, err := s.layers.Chain(img.TopLayer); err == nil {
		img.Layers = len(chain)
	}
	return img
}

// List returns all images sorted by name.
func (s *Store) List(ctx context.Context) ([]sandbox.Image, error) {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("list images: %w", err)
	}
	var out []sandbox.Image
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || identifiers.Validate("image name", name) != nil {
			continue
		}
		r, err := s.read(name)
		if err != nil {
			log.G(ctx).Warn("skip unreadable image record", "image", name, "error", err)
			continue
		}
		out = append(out, s.withLayers(r.Image))
	}
	slices.SortFunc(out, func(a, b sandbox.Image) int { return strings.Compare(a.Name, b.Name) })
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
		_, err = archive.Apply(ctx, root, r, s.opts.archive)
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
	return s.importLayer(ctx, name, func(ctx context.Context, dst string) error {
		return copyTree(ctx, src, ".", dst, s.opts.archive)
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
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := archive.Write(pw, src, p)
		pw.CloseWithError(err)
		done <- err
	}()
	_, err = archive.Apply(ctx, root, pr, opts)
	pr.CloseWithError(errors.New("extraction stopped"))
	if werr := <-done; err == nil {
		err = werr
	}
	return err
}

func (s *Store) importLayer(ctx context.Context, name string, fill func(ctx context.Context, dir string) error) (sandbox.Image, error) {
	if err := identifiers.Validate("image name", name); err != nil {
		return sandbox.Image{}, err
	}
	if _, err := s.read(name); err == nil {
		return sandbox.Image{}, fmt.Errorf("image %q: %w", name, errdefs.ErrAlreadyExists)
	}
	key := "img-" + randomHex()
	if err := s.layers.CreateLayer(ctx, key, "", func(dir string) error { return fill(ctx, dir) }); err != nil {
		return sandbox.Image{}, fmt.Errorf("import image %s: %w", name, err)
	}
	img, err := s.register(ctx, record{Image: sandbox.Image{
		Name: name, TopLayer: key, Workdir: "/", Created: time.Now().UTC(),
		Env: []string{"PATH=" + defaultPath},
	}}, false)
	if err != nil {
		_ = s.layers.RemoveLayer(ctx, key)
		return sandbox.Image{}, err
	}
	return s.withLayers(img), nil
}

// register fills in the size and writes r, refusing to overwrite an
// existing record unless replace.
func (s *Store) register(ctx context.Context, r record, replace bool) (sandbox.Image, error) {
	size, err := s.layers.LayerSize(r.TopLayer)
	if err != nil {
		return sandbox.Image{}, err
	}
	r.Size = size
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.read(r.Name); err == nil && !replace {
		return sandbox.Image{}, fmt.Errorf("image %q: %w", r.Name, errdefs.ErrAlreadyExists)
	}
	if err := s.write(r); err != nil {
		return sandbox.Image{}, err
	}
	log.G(ctx).Info("image registered", "image", r.Name, "layer", r.TopLayer, "size", r.Size)
	return r.Image, nil
}

// Remove deletes the image name and its layer. Built-in images and images
// whose layer a sandbox uses fail with errdefs.ErrFailedPrecondition.
func (s *Store) Remove(ctx context.Context, name string) error {
	if err := identifiers.Validate("image name", name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.read(name)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if r.Builtin {
		return fmt.Errorf("image %s is built in: %w", name, errdefs.ErrFailedPrecondition)
	}
	if err := s.layers.RemoveLayer(ctx, r.TopLayer); err != nil {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	if err := os.Remove(s.recordPath(name)); err != nil {
		return fmt.Errorf("remove image %s: %w", name, err)
	}
	return nil
}

func randomHex() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
