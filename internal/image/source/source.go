package source

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Size limits for the JSON documents read from a source. Layers have no
// limit here: the consumer bounds what it extracts.
const (
	maxManifest = 4 << 20  // manifests, indexes, index.json, manifest.json
	maxConfig   = 16 << 20 // image configs
	maxNesting  = 4        // indexes inside indexes
)

// Annotations naming an image in an OCI layout or archive.
const (
	annotationRefName        = "org.opencontainers.image.ref.name" // OCI: a tag or a full reference
	annotationContainerdName = "io.containerd.image.name"          // containerd and docker: a full reference
)

// Layer is one image layer. Image.Layers lists them bottom first.
type Layer struct {
	// DiffID is the digest ("sha256:<hex>") of the uncompressed tar, from
	// the image config.
	DiffID string
	// Digest is the digest of the blob as stored (usually compressed);
	// "" when the source does not say (docker save archives).
	Digest string
	// Size is the size in bytes of the stored blob; -1 when unknown.
	Size int64
	// MediaType is the layer's media type as the source states it (or, for
	// docker save archives, as detected from its first bytes).
	MediaType string
	// Open returns the uncompressed tar stream of the layer. progress, when
	// not nil, is called from Read with the number of stored (compressed)
	// bytes read so far, at least every 256 KiB and once at the end, so a
	// progress bar can be drawn against Size. The stream verifies the
	// stored bytes against Digest and Size and the uncompressed bytes
	// against DiffID: on a mismatch, Read returns an error wrapping
	// errdefs.ErrDataLoss at the end of the stream instead of io.EOF, so
	// the stream must be read to io.EOF before its content is trusted.
	// Open may be called any number of times (to retry an interrupted
	// read) and from several goroutines; each stream is independent and
	// must be closed. For registry images, ctx bounds the whole download.
	Open func(ctx context.Context, progress func(read int64)) (io.ReadCloser, error)
}

// Config is the part of the image config that a sandbox uses.
type Config struct {
	Env        []string
	Workdir    string
	User       string
	Entrypoint []string
	Cmd        []string
	Labels     map[string]string
	// Created is zero when the config does not say.
	Created          time.Time
	OS, Architecture string
}

// Image is an image read from a source: its config and its layers. It
// reads the layers only when they are opened. An image from an archive
// holds the archive file open: Close it when done (otherwise the file is
// released only when the image is garbage collected).
type Image struct {
	// Ref names the image: for a registry, the normalised reference (such
	// as "127.0.0.1:5000/team/py:1"); for a layout or archive, the name it
	// is recorded under there ("" when it has none).
	Ref string
	// Digest is the digest of the image manifest ("sha256:<hex>"), for an
	// index the manifest of the chosen platform. docker save archives have
	// no manifest: there it is the digest of the config (the image ID).
	Digest string
	Config Config
	// Layers, bottom first; never empty.
	Layers []Layer

	close func() error // called once by Close; nil when nothing is held
}

// Close releases the files the image holds (only archive images hold any;
// a compressed archive is decompressed into an unlinked temporary file
// that Close frees). Layers cannot be opened after Close. Close is
// idempotent.
func (i *Image) Close() error {
	if i.close == nil {
		return nil
	}
	return i.close()
}

// store is where a source's manifests and blobs come from. Both methods
// are safe for concurrent use.
type store interface {
	// manifest returns the manifest desc points to, verified against desc.
	manifest(ctx context.Context, desc v1.Descriptor) ([]byte, error)
	// blob opens the stored bytes of blob d, unverified.
	blob(ctx context.Context, d v1.Hash) (io.ReadCloser, error)
}

// resolve turns the manifest raw (described by desc) into an Image,
// following indexes to the manifest for platform. what names the image in
// errors.
func resolve(ctx context.Context, s store, desc v1.Descriptor, raw []byte, platform v1.Platform, what string) (*Image, error) {
	for depth := 0; ; depth++ {
		mt, err := manifestType(desc.MediaType, raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		switch {
		case mt.IsImage():
			return readImage(ctx, s, desc, raw, what)
		case mt.IsSchema1():
			return nil, fmt.Errorf("%s: docker schema 1 manifests are not supported (push the image again with a current client): %w", what, errdefs.ErrInvalidArgument)
		case !mt.IsIndex():
			return nil, fmt.Errorf("%s is not an image (manifest media type %q): %w", what, mt, errdefs.ErrInvalidArgument)
		case depth >= maxNesting:
			return nil, fmt.Errorf("%s: image indexes nested more than %d deep: %w", what, maxNesting, errdefs.ErrInvalidArgument)
		}
		idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("%s: parse image index: %v: %w", what, err, errdefs.ErrInvalidArgument)
		}
		child, err := pickPlatform(idx.Manifests, platform, what)
		if err != nil {
			return nil, err
		}
		if raw, err = s.manifest(ctx, child); err != nil {
			return nil, err
		}
		desc = child
	}
}

// manifestType returns the media type of the manifest raw: the one it
// states, else the one its descriptor states, else one guessed from its
// fields (OCI makes mediaType optional).
func manifestType(declared types.MediaType, raw []byte) (types.MediaType, error) {
	var probe struct {
		SchemaVersion int             `json:"schemaVersion"`
		MediaType     types.MediaType `json:"mediaType"`
		Manifests     json.RawMessage `json:"manifests"`
		Config        json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return "", fmt.Errorf("parse manifest: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	known := func(mt types.MediaType) bool { return mt.IsImage() || mt.IsIndex() || mt.IsSchema1() }
	switch {
	case probe.MediaType != "":
		// Whatever the descriptor says must not make an index of an image
		// or the reverse.
		if known(declared) && (declared.IsIndex() != probe.MediaType.IsIndex() || declared.IsImage() != probe.MediaType.IsImage()) {
			return "", fmt.Errorf("manifest of media type %q is described as %q: %w", probe.MediaType, declared, errdefs.ErrInvalidArgument)
		}
		return probe.MediaType, nil
	case known(declared):
		return declared, nil
	case probe.SchemaVersion == 1:
		return types.DockerManifestSchema1, nil
	case probe.Manifests != nil:
		return types.OCIImageIndex, nil
	case probe.Config != nil:
		return types.OCIManifestSchema1, nil
	}
	return declared, nil
}

// readImage reads the config of the image manifest raw and describes its
// layers.
func readImage(ctx context.Context, s store, desc v1.Descriptor, raw []byte, what string) (*Image, error) {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: parse manifest: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	if !m.Config.MediaType.IsConfig() {
		return nil, fmt.Errorf("%s is not a container image (config media type %q): %w", what, m.Config.MediaType, errdefs.ErrInvalidArgument)
	}
	if err := checkDigest(m.Config.Digest); err != nil {
		return nil, fmt.Errorf("%s: config: %w", what, err)
	}
	rc, err := s.blob(ctx, m.Config.Digest)
	if err != nil {
		return nil, err
	}
	cfg, err := readAll(rc, m.Config.Digest, m.Config.Size, maxConfig, fmt.Sprintf("%s: config %s", what, m.Config.Digest))
	if err != nil {
		return nil, err
	}
	cf, err := parseConfig(cfg, len(m.Layers), what)
	if err != nil {
		return nil, err
	}
	img := &Image{Digest: desc.Digest.String(), Config: configOf(cf)}
	for i, l := range m.Layers {
		if err := checkLayerType(l.MediaType); err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", what, i+1, err)
		}
		if err := checkDigest(l.Digest); err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", what, i+1, err)
		}
		if l.Size < 0 {
			return nil, fmt.Errorf("%s: layer %d has size %d: %w", what, i+1, l.Size, errdefs.ErrInvalidArgument)
		}
		img.Layers = append(img.Layers, newLayer(blobSpec{
			open:   func(ctx context.Context) (io.ReadCloser, error) { return s.blob(ctx, l.Digest) },
			digest: l.Digest, size: l.Size, diffID: cf.RootFS.DiffIDs[i],
		}, string(l.MediaType)))
	}
	return img, nil
}

// parseConfig parses an image config and checks that it describes layers
// (layers of them, when layers ≥ 0).
func parseConfig(raw []byte, layers int, what string) (*v1.ConfigFile, error) {
	cf, err := v1.ParseConfigFile(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: parse image config: %v: %w", what, err, errdefs.ErrInvalidArgument)
	}
	if cf.RootFS.Type != "layers" || len(cf.RootFS.DiffIDs) == 0 {
		return nil, fmt.Errorf("%s is not a container image (its config lists no layers): %w", what, errdefs.ErrInvalidArgument)
	}
	if layers >= 0 && len(cf.RootFS.DiffIDs) != layers {
		return nil, fmt.Errorf("%s: the manifest has %d layers but the config %d diff IDs: %w", what, layers, len(cf.RootFS.DiffIDs), errdefs.ErrInvalidArgument)
	}
	for i, d := range cf.RootFS.DiffIDs {
		if err := checkDigest(d); err != nil {
			return nil, fmt.Errorf("%s: diff ID %d: %w", what, i+1, err)
		}
	}
	return cf, nil
}

func configOf(cf *v1.ConfigFile) Config {
	c := cf.Config
	return Config{
		Env: c.Env, Workdir: c.WorkingDir, User: c.User,
		Entrypoint: c.Entrypoint, Cmd: c.Cmd, Labels: c.Labels,
		Created: cf.Created.Time, OS: cf.OS, Architecture: cf.Architecture,
	}
}

// checkLayerType accepts the media types of tar layers, plain or
// compressed with gzip or zstd.
func checkLayerType(mt types.MediaType) error {
	switch mt {
	case types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.DockerLayer, types.DockerUncompressedLayer:
		return nil
	}
	if !mt.IsDistributable() {
		return fmt.Errorf("non-distributable (foreign) layers are not supported (media type %q): %w", mt, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("unsupported layer media type %q: %w", mt, errdefs.ErrInvalidArgument)
}

// checkDigest accepts digests whose algorithm this package can verify.
// v1.Hash values are parsed, so the hex part is well formed.
func checkDigest(h v1.Hash) error {
	if _, err := v1.Hasher(h.Algorithm); err != nil || h.Hex == "" {
		return fmt.Errorf("unsupported digest %q: %w", h, errdefs.ErrInvalidArgument)
	}
	return nil
}

// blobPath is the path of blob d in an OCI image layout.
func blobPath(d v1.Hash) (string, error) {
	if err := checkDigest(d); err != nil {
		return "", err
	}
	if strings.Trim(d.Hex, "0123456789abcdef") != "" {
		return "", fmt.Errorf("malformed digest %q: %w", d, errdefs.ErrInvalidArgument)
	}
	return "blobs/" + d.Algorithm + "/" + d.Hex, nil
}

// DefaultPlatform is the platform images are resolved for when none is
// given: the one this process runs on.
func DefaultPlatform() string { return runtime.GOOS + "/" + runtime.GOARCH }

// parsePlatform parses "os/arch[/variant]"; "" means DefaultPlatform.
func parsePlatform(s string) (v1.Platform, error) {
	if s == "" {
		s = DefaultPlatform()
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch[/variant]: %w", s, errdefs.ErrInvalidArgument)
	}
	return *p, nil
}

// pickPlatform returns the first manifest for want. A requested variant
// must match (arm64 without a variant counts as v8); without one, any
// variant does. Manifests without a platform are taken only when none has
// a matching one.
func pickPlatform(ms []v1.Descriptor, want v1.Platform, what string) (v1.Descriptor, error) {
	var bare []v1.Descriptor
	var avail []string
	for _, m := range ms {
		if !m.MediaType.IsImage() && !m.MediaType.IsIndex() && m.MediaType != "" {
			continue // attestations, signatures and other artifacts
		}
		if m.Platform == nil {
			bare = append(bare, m)
			continue
		}
		if platformMatches(*m.Platform, want) {
			return m, nil
		}
		if s := m.Platform.String(); s != "" && m.Platform.OS != "unknown" && !slices.Contains(avail, s) {
			avail = append(avail, s)
		}
	}
	if len(bare) > 0 {
		return bare[0], nil
	}
	list := "none"
	if len(avail) > 0 {
		list = strings.Join(avail, ", ")
	}
	return v1.Descriptor{}, fmt.Errorf("%s has no image for platform %s (available: %s): %w", what, want, list, errdefs.ErrNotFound)
}

func platformMatches(have, want v1.Platform) bool {
	if have.OS != want.OS || have.Architecture != want.Architecture {
		return false
	}
	if want.Variant == "" {
		return true
	}
	norm := func(p v1.Platform) string {
		if p.Architecture == "arm64" && p.Variant == "" {
			return "v8"
		}
		return p.Variant
	}
	return norm(have) == norm(want)
}

// pickRef selects from the manifests of an OCI layout's index the one ref
// names: by either name annotation (compared as references, so that
// "team/app:1" finds "docker.io/team/app:1") or by digest. "" selects the
// only one. Several matches are resolved by platform. what names the
// layout in errors.
func pickRef(ms []v1.Descriptor, ref string, platform v1.Platform, what string) (v1.Descriptor, error) {
	if ref == "" {
		switch len(ms) {
		case 0:
			return v1.Descriptor{}, fmt.Errorf("%s holds no images: %w", what, errdefs.ErrNotFound)
		case 1:
			return ms[0], nil
		}
		return v1.Descriptor{}, fmt.Errorf("%s holds %d images; choose one of %s: %w", what, len(ms), choices(ms), errdefs.ErrInvalidArgument)
	}
	var found []v1.Descriptor
	for _, m := range ms {
		if m.Digest.String() == ref || sameRef(m.Annotations[annotationRefName], ref) || sameRef(m.Annotations[annotationContainerdName], ref) {
			found = append(found, m)
		}
	}
	switch len(found) {
	case 0:
		return v1.Descriptor{}, fmt.Errorf("no image %q in %s (it holds %s): %w", ref, what, choices(ms), errdefs.ErrNotFound)
	case 1:
		return found[0], nil
	}
	d, err := pickPlatform(found, platform, fmt.Sprintf("%s (%q)", what, ref))
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%q names %d images: %w", ref, len(found), err)
	}
	return d, nil
}

// choices lists manifests for an error message, by name where they have
// one.
func choices(ms []v1.Descriptor) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%q", cmp.Or(descName(m), m.Digest.String())))
	}
	const most = 10
	if len(s) > most {
		s = append(s[:most], fmt.Sprintf("and %d more", len(s)-most))
	}
	return strings.Join(s, ", ")
}

// descName is the name of a manifest in an OCI layout: the full reference
// containerd records if present, else the OCI ref name.
func descName(m v1.Descriptor) string {
	return cmp.Or(m.Annotations[annotationContainerdName], m.Annotations[annotationRefName])
}

// sameRef reports whether a and b name the same image, literally or once
// normalised as references.
func sameRef(a, b string) bool {
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	ra, err := name.ParseReference(a)
	if err != nil {
		return false
	}
	rb, err := name.ParseReference(b)
	return err == nil && ra.Name() == rb.Name()
}
