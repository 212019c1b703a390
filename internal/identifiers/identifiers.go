// Package identifiers validates the IDs and names that become path
// components, cgroup names and runtime IDs, after containerd's
// pkg/identifiers: runs of alphanumerics joined by single '.', '_' or '-',
// at most 76 characters.
package identifiers

import (
	"fmt"
	"regexp"

	"github.com/containerd/errdefs"
)

const maxLength = 76

var identifierRe = regexp.MustCompile(`^[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*$`)

// Validate returns an errdefs.ErrInvalidArgument error naming what (for
// example "sandbox id" or "image name") when s is not a safe identifier.
func Validate(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s must not be empty: %w", what, errdefs.ErrInvalidArgument)
	case len(s) > maxLength:
		return fmt.Errorf("%s %q is longer than %d characters: %w", what, s[:maxLength]+"...", maxLength, errdefs.ErrInvalidArgument)
	case !identifierRe.MatchString(s):
		return fmt.Errorf("%s %q must be letters and digits joined by single '.', '_' or '-': %w", what, s, errdefs.ErrInvalidArgument)
	}
	return nil
}
