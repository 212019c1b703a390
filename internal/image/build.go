package image

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// What builds need from the store: resolving a spec's "from", adding and
// committing layers, the build cache, and recording the result. A build
// holds the collector off (Hold) from start to finish, so that the layers
// it made are never collected before they are cached or recorded.

// Hold keeps the collector from running until release is called.
func (s *Store) Hold() (release func()) {
	s.gcMu.RLock()
	return s.gcMu.RUnlock
}

// Resolve returns the image a spec's "from" names, making it when needed:
//
//	NAME                    a stored image
//	debian:SUITE            bootstrapped when not stored
//	docker://REF            pulled from its registry (REF as for Pull)
//	oci-layout:DIR[@REF]    loaded from an OCI image layout on the daemon's host
//	archive:FILE[@REF]      loaded from a docker-save or OCI archive file on the daemon's host
//	HOST/PATH[:TAG]         pulled when not stored (a name with a registry host)
//
// Pull and load progress go to progress, bootstrap output to logw. The
// caller holds the collector off (Hold).
func (s *Store) Resolve(ctx context.Context, from string, progress ProgressFunc, logw io.Writer) (sandbox.Image, error) {
	switch {
	case strings.HasPrefix(from, "docker://"):
		ref := strings.TrimPrefix(from, "docker://")
		if img, err := s.Get(ctx, ref); err == nil {
			return img, nil
		}
		return s.pullHeld(ctx, ref, progress)
	case strings.HasPrefix(from, "oci-layout:"), strings.HasPrefix(from, "archive:"):
		kind, rest, _ := strings.Cut(from, ":")
		path, ref, _ := strings.Cut(rest, "@")
		if !strings.HasPrefix(path, "/") {
			return sandbox.Image{}, fmt.Errorf("from %q: %s needs an absolute path on the daemon's host: %w", from, kind, errdefs.ErrInvalidArgument)
		}
		name := "local/" + strings.Trim(strings.ToLower(sanitizeName(path)), "/")
		if ref != "" {
			name += ":" + sanitizeTag(ref)
		}
		return s.loadHeld(ctx, path, LoadOptions{Name: name, Ref: ref}, progress)
	}
	if img, err := s.Get(ctx, from); err == nil {
		return img, nil
	} else if !errdefs.IsNotFound(err) {
		return sandbox.Image{}, err
	}
	if _, err := ParseBootstrapRef(from); err == nil {
		return s.bootstrapHeld(ctx, from, BootstrapOptions{}, logw)
	}
	if first, _, ok := strings.Cut(from, "/"); ok && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return s.pullHeld(ctx, from, progress)
	}
	return s.Get(ctx, from) // the not-found error, naming the known images
}

// CommitLayer makes a layer of the changes in the writable layer active (whose
// sandbox is deleted from its runtime) and returns its key. The layer keeps
// setuid and setgid bits: a build step that installs sudo makes an image
// whose sandboxes can use it when its spec allows privilege escalation
// (and where it does not, no_new_privs leaves the bits inert).
func (s *Store) CommitLayer(ctx context.Context, active string) (string, error) {
	opts := s.opts.archive
	opts.KeepSetuid = true
	key, _, err := s.layers.Commit(ctx, active, func(parent string, upper *os.Root, dir string) (string, string, error) {
		diffID, err := copyLayer(ctx, upper, dir, opts)
		if err != nil {
			return "", "", err
		}
		return committedKey(parent, diffID), diffID, nil
	})
	return key, err
}

// committedKey is the key of a layer that keeps its setuid and setgid
// bits: one CommitLayer makes or one pulled or loaded. It differs from
// layerKey(parent, diffID), the key under which older daemons stored the
// same changes with those bits dropped, so that those layers are never
// taken for these.
func committedKey(parent, diffID string) string {
	return keyPrefix + sha256Hex("setuid "+parent+" "+diffID)
}

// AddLayer makes a layer on parent filled by fill and returns its
// (content-addressed) key.
func (s *Store) AddLayer(ctx context.Context, parent string, fill func(dir string) error) (string, error) {
	key, _, err := s.layers.AddLayer(ctx, parent, func(dir string) (string, string, error) {
		if err := fill(dir); err != nil {
			return "", "", err
		}
		diffID, err := digestTree(dir)
		if err != nil {
			return "", "", err
		}
		return layerKey(parent, diffID), diffID, nil
	})
	return key, err
}

// LayerDirs returns the directories of the layer key and those beneath it,
// top first, for reading (never writing) what the stack holds.
func (s *Store) LayerDirs(key string) ([]string, error) {
	if key == "" {
		return nil, nil
	}
	dirs, err := s.layers.Chain(key)
	if err != nil {
		return nil, err
	}
	slices.Reverse(dirs)
	return dirs, nil
}

// Built describes the result of a build for RegisterBuilt.
type Built struct {
	Name     string
	TopLayer string
	Env      []string
	Workdir  string
	User     string
	// SpecFile names the spec the image was built from.
	SpecFile  string
	Resources sandbox.Resources
	Runtime   *RuntimeSpec
	// AllowPrivilegeEscalation is the spec's allow_privilege_escalation.
	AllowPrivilegeEscalation bool
}

// volumes returns the spec's volume mounts, nil for none.
func (r *RuntimeSpec) volumes() []sandbox.VolumeMount {
	if r == nil {
		return nil
	}
	return slices.Clone(r.Volumes)
}

// RegisterBuilt records a built image, replacing what the name pointed to
// (unless that is a built-in image).
func (s *Store) RegisterBuilt(ctx context.Context, b Built) (sandbox.Image, error) {
	if err := ValidateName(b.Name); err != nil {
		return sandbox.Image{}, err
	}
	if old, err := s.read(b.Name); err == nil && old.Builtin {
		return sandbox.Image{}, fmt.Errorf("image %s is built in: %w", b.Name, errdefs.ErrFailedPrecondition)
	}
	img, err := s.register(ctx, record{
		Source: "build", Reference: b.SpecFile, Spec: b.Runtime,
		Image: sandbox.Image{
			Name: b.Name, TopLayer: b.TopLayer, Env: b.Env, Workdir: b.Workdir, User: b.User,
			Resources: b.Resources, Created: time.Now().UTC(), Network: b.Runtime.Network(),
			Tier:                     b.Runtime.tier(),
			Volumes:                  b.Runtime.volumes(),
			AllowPrivilegeEscalation: b.AllowPrivilegeEscalation,
		},
	}, true)
	if err != nil {
		return sandbox.Image{}, err
	}
	return s.withLayers(img), nil
}

func (s *Store) pullHeld(ctx context.Context, ref string, progress ProgressFunc) (sandbox.Image, error) {
	img, err := s.fetch(ctx, ref)
	if err != nil {
		return sandbox.Image{}, err
	}
	defer img.Close()
	return s.importHeld(ctx, ref, "registry", img, progress)
}

func sanitizeName(p string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(p) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '/' {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	out := strings.Trim(strings.ReplaceAll(b.String(), "//", "/"), "-/")
	for strings.Contains(out, "--") {
		out = strings.ReplaceAll(out, "--", "-")
	}
	out = strings.ReplaceAll(strings.ReplaceAll(out, "/-", "/"), "-/", "/")
	return cmp.Or(out, "image")
}

func sanitizeTag(t string) string {
	var b strings.Builder
	for _, r := range t {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteRune('-')
		}
	}
	return strings.TrimLeft(cmp.Or(b.String(), "latest"), ".-")
}
