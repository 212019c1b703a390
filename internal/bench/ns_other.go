//go:build !linux

package bench

import (
	"fmt"
	"os/exec"

	"github.com/containerd/errdefs"
)

// nsThread needs Linux mount namespaces.
type nsThread struct{}

var errNotLinux = fmt.Errorf("private mount namespace: %w", errdefs.ErrNotImplemented)

func newNSThread() (*nsThread, error)           { return nil, errNotLinux }
func (*nsThread) start(*exec.Cmd) error         { return errNotLinux }
func (*nsThread) run(*exec.Cmd) ([]byte, error) { return nil, errNotLinux }
func (*nsThread) close()                        {}
