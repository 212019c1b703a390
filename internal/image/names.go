package image

import (
	"cmp"
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

	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/netpolicy"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// ValidateName returns an errdefs.ErrInvalidArgument error when name is not
// a valid image name: a reference without a scheme, as docker writes them,
// [host[:port]/]path[:tag] with lowercase path components, at most 255
// characters ("py-agent", "debian:bookworm", "127.0.0.1:5000/team/py:1").
// The rule lives in package identifiers (ValidateImageName).
func ValidateName(name string) error { return identifiers.ValidateImageName(name) }

// Info is everything known about an image, for inspect.
type Info struct {
	sandbox.Image
	// ID is the image's content identity: its top layer key (images that
	// share it are the same file system).
	ID        string       `json:"id"`
	Source    string       `json:"source,omitempty"`
	Reference string       `json:"reference,omitempty"`
	Digest    string       `json:"digest,omitempty"`
	Spec      *RuntimeSpec `json:"spec,omitempty"`
	// LayerInfo lists the read-only layers, bottom first.
	LayerInfo []LayerInfo `json:"layers"`
}

// LayerInfo describes one layer of an image.
type LayerInfo struct {
	Key    string `json:"key"`
	DiffID string `json:"diff_id,omitempty"`
	Size   int64  `json:"size"`
}

// RuntimeSpec are the settings of a spec-built image that other parts of
// the daemon enforce (network policy, secrets, ports).
type RuntimeSpec struct {
	NetworkMode string   `json:"network_mode,omitempty"`
	Allow       []string `json:"allow,omitempty"`
	Secrets     []string `json:"secrets,omitempty"`
	Ports       []int    `json:"ports,omitempty"`
	// Tier is the spec's isolation tier, "" for the daemon's default.
	Tier string `json:"tier,omitempty"`
	// Volumes are the named volumes the image's sandboxes mount.
	Volumes []sandbox.VolumeMount `json:"volumes,omitempty"`
}

// Network is the sandboxes' default network settings from the spec; nil
// when the spec sets none (mode none, no secrets).
func (r *RuntimeSpec) Network() *netpolicy.Settings {
	if r == nil || ((r.NetworkMode == "" || r.NetworkMode == "none") && len(r.Secrets) == 0) {
		return nil
	}
	set := &netpolicy.Settings{Mode: netpolicy.Mode(cmp.Or(r.NetworkMode, "none")), Allow: slices.Clone(r.Allow)}
	if set.Mode == "open" {
		set.Mode = netpolicy.ModeFull
	}
	for _, name := range r.Secrets {
		set.Secrets = append(set.Secrets, netpolicy.SecretRef{Name: name})
	}
	return set
}

// Inspect returns everything known about the image name.
func (s *Store) Inspect(ctx context.Context, name string) (Info, error) {
	if _, err := s.Get(ctx, name); err != nil {
		return Info{}, err
	}
	r, err := s.read(name)
	if err != nil {
		return Info{}, err
	}
	info := Info{Image: r.Image, ID: r.TopLayer, Source: r.Source, Reference: r.Reference, Digest: r.Digest, Spec: r.Spec}
	if info.LayerInfo, info.Size, err = s.layerChain(r.TopLayer); err != nil {
		return Info{}, fmt.Errorf("image %s: %w", name, err)
	}
	info.Layers = len(info.LayerInfo)
	return info, nil
}

// Tag gives the image src the additional name dst (replacing what dst
// named, unless that is a built-in image). Both names share the layers.
func (s *Store) Tag(ctx context.Context, src, dst string) (sandbox.Image, error) {
	if err := ValidateName(dst); err != nil {
		return sandbox.Image{}, err
	}
	if _, err := s.Get(ctx, src); err != nil {
		return sandbox.Image{}, err
	}
	s.mu.Lock()
	r, err := s.read(src)
	s.mu.Unlock()
	if err != nil {
		return sandbox.Image{}, err
	}
	if old, err := s.read(dst); err == nil && old.Builtin {
		return sandbox.Image{}, fmt.Errorf("image %s is built in: %w", dst, errdefs.ErrFailedPrecondition)
	}
	r.Name, r.Builtin, r.BuiltinVersion, r.Created = dst, false, 0, time.Now().UTC()
	if r.Source == "builtin" {
		r.Source, r.Reference = "tag", src
	}
	return s.register(ctx, r, true)
}

// migrate renames records written by older daemons (<name>.json) to
// where this version looks for them.
func (s *Store) migrate(ctx context.Context) error {
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(s.root, e.Name())
		r, err := readRecord(p)
		if err != nil || ValidateName(r.Name) != nil || p == s.recordPath(r.Name) {
			continue
		}
		if _, err := os.Lstat(s.recordPath(r.Name)); !errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := os.Rename(p, s.recordPath(r.Name)); err != nil {
			return err
		}
		log.G(ctx).Info("image record migrated", "image", r.Name)
	}
	return nil
}

// tier is the spec's isolation tier; "" when r is nil or sets none.
func (r *RuntimeSpec) tier() string {
	if r == nil {
		return ""
	}
	return r.Tier
}
