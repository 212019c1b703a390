package image

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/archive"
	"github.com/corral-sandbox/corral/internal/image/source"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// Progress reports one step of a pull or load, for progress bars.
type Progress struct {
	// Layer is the diff ID of the layer concerned ("" for the image).
	Layer string `json:"layer,omitempty"`
	// Index and Count place the layer in the image (1-based).
	Index int `json:"index,omitempty"`
	Count int `json:"count,omitempty"`
	// Status is "exists" (already stored), "pulling", "extracted" or
	// "resolved" (the image's manifest and config were read).
	Status string `json:"status"`
	// Current and Total are the bytes of the stored (compressed) layer read
	// so far and in all; Total is -1 when unknown.
	Current int64 `json:"current,omitempty"`
	Total   int64 `json:"total,omitempty"`
}

// ProgressFunc receives progress; it must not block for long.
type ProgressFunc func(Progress)

// PullOptions tune Pull.
type PullOptions struct {
	// Name stores the image under this name instead of the reference.
	Name string
}

// Pull fetches the image ref from its registry (credentials from the
// docker config file) and stores it under ref or o.Name, replacing what
// that name pointed to. Layers already stored are not fetched again, so a
// pull interrupted half-way resumes where it stopped; nothing is recorded
// under the name until every layer is in place.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions, progress ProgressFunc) (sandbox.Image, error) {
	name := o.Name
	if name == "" {
		name = ref
	}
	if err := ValidateName(name); err != nil {
		return sandbox.Image{}, err
	}
	img, err := s.fetch(ctx, ref)
	if err != nil {
		return sandbox.Image{}, err
	}
	defer img.Close()
	release := s.Hold()
	defer release()
	return s.importHeld(ctx, name, "registry", img, progress)
}

func (s *Store) fetch(ctx context.Context, ref string) (*source.Image, error) {
	return source.Registry(ctx, ref, s.opts.registry)
}

// LoadOptions tune Load.
type LoadOptions struct {
	// Name stores the image under this name; without it, the name recorded
	// in the archive (docker save's tag, an OCI ref.name annotation).
	Name string
	// Ref selects the image when the archive holds several.
	Ref string
	// Label names the archive in errors (default "image archive PATH"):
	// a daemon that loads an upload from a temporary file says "the
	// uploaded archive" rather than a name the user never gave.
	Label string
}

// Load stores the image in the archive file (docker save output or an OCI
// archive, plain or gzip) or, when file is a directory, the OCI image
// layout there. Everything in it is untrusted: digests are verified and
// layers go through archive.Apply.
func (s *Store) Load(ctx context.Context, file string, o LoadOptions, progress ProgressFunc) (sandbox.Image, error) {
	release := s.Hold()
	defer release()
	return s.loadHeld(ctx, file, o, progress)
}

func (s *Store) loadHeld(ctx context.Context, file string, o LoadOptions, progress ProgressFunc) (sandbox.Image, error) {
	if o.Name != "" {
		if err := ValidateName(o.Name); err != nil {
			return sandbox.Image{}, err
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		if o.Label != "" {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			return sandbox.Image{}, fmt.Errorf("load %s: %w", o.Label, err)
		}
		return sandbox.Image{}, fmt.Errorf("load %s: %w", file, err)
	}
	var img *source.Image
	kind := "archive"
	switch {
	case fi.IsDir():
		kind = "layout"
		img, err = source.Layout(ctx, file, o.Ref)
	case o.Label != "":
		img, err = source.ArchiveAs(ctx, file, o.Label, o.Ref)
	default:
		img, err = source.Archive(ctx, file, o.Ref)
	}
	if err != nil {
		return sandbox.Image{}, err
	}
	defer img.Close()
	name := o.Name
	if name == "" {
		name = img.Ref
	}
	if name == "" || ValidateName(name) != nil {
		return sandbox.Image{}, fmt.Errorf("the image has no usable name (%q): give one with --tag: %w", name, errdefs.ErrInvalidArgument)
	}
	return s.importHeld(ctx, name, kind, img, progress)
}

// importHeld stores img's layers (those not stored yet) and records it as
// name. The caller holds the collector off.
func (s *Store) importHeld(ctx context.Context, name, kind string, img *source.Image, progress ProgressFunc) (sandbox.Image, error) {
	if progress == nil {
		progress = func(Progress) {}
	}
	if old, err := s.read(name); err == nil && old.Builtin {
		return sandbox.Image{}, fmt.Errorf("image %s is built in: %w", name, errdefs.ErrFailedPrecondition)
	}
	progress(Progress{Status: "resolved", Count: len(img.Layers)})
	parent := ""
	for i, l := range img.Layers {
		if err := validDigest(l.DiffID); err != nil {
			return sandbox.Image{}, fmt.Errorf("layer %d: %w", i+1, err)
		}
		p := Progress{Layer: l.DiffID, Index: i + 1, Count: len(img.Layers), Total: l.Size}
		// The layer keeps its setuid and setgid bits, as a build step's
		// does, so it shares that key scheme (layerKey names the same
		// changes as older daemons stored them, bits dropped).
		key := committedKey(parent, l.DiffID)
		if s.layers.HasLayer(key) {
			p.Status = "exists"
			progress(p)
			parent = key
			continue
		}
		got, _, err := s.layers.AddLayer(ctx, parent, func(dir string) (string, string, error) {
			return key, l.DiffID, s.applyLayer(ctx, dir, l, func(n int64) {
				p.Status, p.Current = "pulling", n
				progress(p)
			})
		})
		if err != nil {
			return sandbox.Image{}, fmt.Errorf("layer %d of %d (%s): %w", i+1, len(img.Layers), short(l.DiffID), err)
		}
		p.Status = "extracted"
		progress(p)
		parent = got
	}
	env := slices.Clone(img.Config.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append(env, "PATH="+defaultPath)
	}
	created := img.Config.Created
	if created.IsZero() {
		created = time.Now().UTC()
	}
	r := record{
		Source: kind, Reference: img.Ref, Digest: img.Digest,
		Image: sandbox.Image{
			Name: name, TopLayer: parent, Env: env,
			Workdir: cmp.Or(img.Config.Workdir, "/"), User: img.Config.User, Created: created,
		},
	}
	out, err := s.register(ctx, r, true)
	if err != nil {
		return sandbox.Image{}, err
	}
	log.G(ctx).Info("image stored", "image", name, "source", kind, "reference", img.Ref, "layers", len(img.Layers))
	return s.withLayers(out), nil
}

// applyLayer extracts the layer l (an OCI tar) into dir, reading it to the
// end so that its diff ID is verified.
func (s *Store) applyLayer(ctx context.Context, dir string, l source.Layer, progress func(int64)) error {
	rc, err := l.Open(ctx, progress)
	if err != nil {
		return err
	}
	defer rc.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	opts := s.opts.archive
	opts.Whiteouts = true
	opts.KeepSetuid = true
	if _, err := archive.Apply(ctx, root, rc, opts); err != nil {
		return err
	}
	// Trailing bytes after the tar's end still count for the digest. Tar
	// writers pad to a record (10 KiB at most); more is refused, so that a
	// compressed bomb after the archive cannot keep the daemon busy.
	n, err := io.Copy(io.Discard, io.LimitReader(rc, maxTrailing+1))
	if err != nil {
		return err
	}
	if n > maxTrailing {
		return fmt.Errorf("layer has more than %d KiB after the end of its tar archive: %w", maxTrailing>>10, errdefs.ErrInvalidArgument)
	}
	return nil
}

// maxTrailing is how many bytes a layer may have after its tar archive ends.
const maxTrailing = 1 << 20

func short(digest string) string {
	if h, ok := strings.CutPrefix(digest, "sha256:"); ok && len(h) > 12 {
		return h[:12]
	}
	return digest
}
