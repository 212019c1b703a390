//go:build !linux

package archive

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// mknodWhiteout is Linux-only: overlayfs whiteouts exist only there.
func mknodWhiteout(int, string) error {
	return fmt.Errorf("overlayfs whiteouts: %w", errdefs.ErrNotImplemented)
}
