package image

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

var _ sandbox.SnapshotStore = (*Store)(nil)

// SourceSnapshot is the Source of images made by `corral snapshot`.
const SourceSnapshot = "snapshot"

// AddSnapshot registers img, a snapshot whose Disk is a saved disk of the
// layer store, under img.Name. errdefs.ErrAlreadyExists when the name is
// taken.
func (s *Store) AddSnapshot(ctx context.Context, img sandbox.Image) error {
	if err := ValidateName(img.Name); err != nil {
		return err
	}
	if img.Disk == "" || img.TopLayer == "" {
		return fmt.Errorf("snapshot %s: disk and top layer are required: %w", img.Name, errdefs.ErrInvalidArgument)
	}
	if !s.layers.HasLayer(img.TopLayer) {
		return fmt.Errorf("snapshot %s: layer %s: %w", img.Name, img.TopLayer, errdefs.ErrNotFound)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.read(img.Name); err == nil {
		return fmt.Errorf("image %q: %w", img.Name, errdefs.ErrAlreadyExists)
	}
	img.Builtin = false
	if err := s.write(record{Image: img, Source: SourceSnapshot, Reference: img.Origin}); err != nil {
		return err
	}
	log.G(ctx).Info("snapshot registered", "image", img.Name, "disk", img.Disk, "origin", img.Origin)
	return nil
}

// releaseDisk removes saved disk disk unless another image record still
// refers to it (a tag of the snapshot). The caller holds s.mu and has
// removed its own record.
func (s *Store) releaseDisk(ctx context.Context, disk string) error {
	rs, err := s.records(ctx)
	if err != nil {
		return err
	}
	for _, r := range rs {
		if r.Disk == disk {
			return nil
		}
	}
	return s.layers.RemoveDisk(ctx, disk)
}
