//go:build !linux

package agent

import (
	"context"
	"errors"
)

// Run is only implemented on Linux.
func Run(ctx context.Context, cfg Config) error {
	return errors.New("agent: only supported on linux")
}
