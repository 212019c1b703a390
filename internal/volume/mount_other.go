//go:build !linux

package volume

import (
	"context"
	"fmt"

	"github.com/containerd/errdefs"
)

var errNotLinux = fmt.Errorf("volumes: %w", errdefs.ErrNotImplemented)

func makeImage(context.Context, string, string, int64) error { return errNotLinux }
func mountImage(context.Context, string, string) error       { return errNotLinux }
func unmount(string) error                                   { return nil }
func shareRoot(string) error                                 { return nil }
func unshareRoot(string) error                               { return nil }
func usage(string) (Usage, error)                            { return Usage{}, errNotLinux }
func allocated(string) int64                                 { return 0 }
func findMkfs() string                                       { return "" }
