package identifiers

import (
	"errors"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"abc", true},
		{"a.b-c_d", true},
		{"sb-0123456789abcdef", true},
		{"", false},
		{"..", false},
		{"a/b", false},
		{"-a", false},
		{"a--b", false},
		{"a\x00b", false},
		{strings.Repeat("a", 76), true},
		{strings.Repeat("a", 77), false},
	} {
		err := Validate("id", tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%q) = %v; want ok=%v", tc.in, err, tc.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Validate(%q) = %v; want an ErrInvalidArgument", tc.in, err)
		}
	}
}
