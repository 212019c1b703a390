package netpolicy

import (
	"fmt"

	"github.com/containerd/errdefs"
)

// parseError is a parse error classified as invalid input without adding
// the class's text to the message, so the message reads as documented.
type parseError struct{ msg string }

func (e *parseError) Error() string { return e.msg }

func (e *parseError) Unwrap() error { return errdefs.ErrInvalidArgument }

func invalid(format string, args ...any) error {
	return &parseError{msg: fmt.Sprintf(format, args...)}
}
