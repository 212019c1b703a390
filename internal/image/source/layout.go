package source

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/containerd/errdefs"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Layout reads an image from the OCI image layout in the directory dir.
// ref selects a manifest of its index.json by its
// org.opencontainers.image.ref.name or io.containerd.image.name annotation
// (compared as image references) or by digest; "" selects the only one, and
// is an ErrInvalidArgument error listing the choices when there are
// several. An index is resolved to the manifest for DefaultPlatform. Files
// are opened only inside dir (symbolic links cannot leave it) and must be
// regular files.
func Layout(ctx context.Context, dir, ref string) (*Image, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("image layout: %w", classifyFS(err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("image layout %s is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	open := func(name string) (io.ReadCloser, error) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return nil, fmt.Errorf("image layout: %w", classifyFS(err))
		}
		defer root.Close()
		f, err := root.OpenFile(name, os.O_RDONLY|openFlags, 0)
		if err != nil {
			return nil, fmt.Errorf("image layout %s: %w", dir, classifyFS(err))
		}
		if err := checkRegular(f); err != nil {
			f.Close()
			return nil, fmt.Errorf("image layout %s: %w", dir, err)
		}
		return f, nil
	}
	return readLayout(ctx, open, ref, "image layout "+dir)
}

// readLayout reads an image from an OCI image layout whose files open
// opens by their path in the layout ("index.json", "blobs/sha256/<hex>").
// what names the layout in errors.
func readLayout(ctx context.Context, open func(name string) (io.ReadCloser, error), ref, what string) (*Image, error) {
	rc, err := open("oci-layout")
	if err != nil {
		if errdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%s is not an OCI image layout (no oci-layout file): %w", what, errdefs.ErrInvalidArgument)
		}
		return nil, err
	}
	b, err := readAll(rc, v1.Hash{}, -1, 4<<10, what+": oci-layout")
	if err != nil {
		return nil, err
	}
	var marker struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(b, &marker); err != nil || marker.Version == "" {
		return nil, fmt.Errorf("%s: malformed oci-layout file: %w", what, errdefs.ErrInvalidArgument)
	}
	if rc, err = open("index.json"); err != nil {
		return nil, err
	}
	b, err = readAll(rc, v1.Hash{}, -1, maxManifest, what+": index.json")
	if err != nil {
		return nil, err
	}
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: parse index.json: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	platform, err := parsePlatform("")
	if err != nil {
		return nil, err
	}
	desc, err := pickRef(idx.Manifests, ref, platform, what)
	if err != nil {
		return nil, err
	}
	s := layoutStore{open: open, what: what}
	raw, err := s.manifest(ctx, desc)
	if err != nil {
		return nil, err
	}
	label := what
	if n := descName(desc); n != "" {
		label = fmt.Sprintf("%s in %s", n, what)
	}
	img, err := resolve(ctx, s, desc, raw, platform, label)
	if err != nil {
		return nil, err
	}
	img.Ref = descName(desc)
	return img, nil
}

// layoutStore reads the blobs of an OCI image layout.
type layoutStore struct {
	open func(name string) (io.ReadCloser, error)
	what string
}

func (s layoutStore) manifest(ctx context.Context, desc v1.Descriptor) ([]byte, error) {
	rc, err := s.blob(ctx, desc.Digest)
	if err != nil {
		return nil, err
	}
	return readAll(rc, desc.Digest, desc.Size, maxManifest, fmt.Sprintf("%s: manifest %s", s.what, desc.Digest))
}

func (s layoutStore) blob(_ context.Context, d v1.Hash) (io.ReadCloser, error) {
	p, err := blobPath(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.what, err)
	}
	return s.open(p)
}

// classifyFS classifies a file system error: a missing file is
// ErrNotFound.
func classifyFS(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %w", err, errdefs.ErrNotFound)
	}
	return err
}

// checkRegular fails unless f is a regular file (not a directory, device
// or FIFO).
func checkRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file: %w", f.Name(), errdefs.ErrInvalidArgument)
	}
	return nil
}
