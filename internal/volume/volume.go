// Package volume keeps named volumes: file systems that outlive the
// sandboxes that mount them.
//
// Each volume is an ext4 disk image, sparse, of a fixed size (writes past it
// fail with ENOSPC), under <root>/<name>/disk.img. The store mounts it once,
// through a loop device, on <root>/<name>/data in the daemon's mount
// namespace (root is a shared mount, so the mount reaches the runtimes'
// namespaces), and every sandbox using the volume shares that superblock:
// the runtime bind-mounts the directory into each box (idmapped for a box
// with a user namespace, so that the ids on disk are the box's own ids in
// every box). A record in the meta store is written before anything is
// made, so a daemon killed in the middle finds and removes what is left.
package volume

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/units"
)

// Default and bounds of a volume's size.
const (
	DefaultBytes = 1 << 30
	// MinBytes fits an ext4 file system with its journal and some room.
	MinBytes = 16 << 20
	// MaxBytes bounds a typo (1T for 1G); the image is sparse, so a large
	// volume costs only what is written.
	MaxBytes = 16 << 40
)

// State is a volume record's state.
type State string

const (
	// StateCreating: the record is written, the image may be half made.
	// A store that opens such a record removes what is left of it.
	StateCreating State = "creating"
	// StateReady: the image is made and mounted.
	StateReady State = "ready"
)

// Volume is a volume's record.
type Volume struct {
	Name string `json:"name"`
	// SizeBytes is the size of the file system's image, its hard limit.
	SizeBytes int64             `json:"size_bytes"`
	Labels    map[string]string `json:"labels,omitempty"`
	Created   time.Time         `json:"created"`
	State     State             `json:"state"`
}

// Usage is how much of a volume is used, from statfs of its mount.
type Usage struct {
	UsedBytes  uint64
	TotalBytes uint64
}

// Records persist volume records (implemented by internal/meta). Writes
// are durable when they return.
type Records interface {
	PutVolume(ctx context.Context, v *Volume) error
	// DeleteVolume removes the record; a missing record is success.
	DeleteVolume(ctx context.Context, name string) error
	ListVolumes(ctx context.Context) ([]*Volume, error)
}

// ValidateName checks a volume name: it becomes a path component.
func ValidateName(name string) error {
	return identifiers.Validate("volume name", name)
}

// ValidateSize checks a requested size (0: the default) and returns the
// size to make, rounded up to a whole MiB.
func ValidateSize(n int64) (int64, error) {
	if n == 0 {
		return DefaultBytes, nil
	}
	if n < MinBytes || n > MaxBytes {
		return 0, fmt.Errorf("volume size %s must be between %s and %s: %w", units.FormatBytes(n), units.FormatBytes(MinBytes), units.FormatBytes(MaxBytes), errdefs.ErrInvalidArgument)
	}
	return (n + 1<<20 - 1) &^ (1<<20 - 1), nil
}
