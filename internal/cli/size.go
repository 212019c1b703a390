package cli

import (
	"strconv"

	"github.com/corral-sandbox/corral/internal/units"
)

// ParseSize parses a byte size such as "512m", "1g", "1.5GiB" or "1048576";
// see units.ParseBytes.
func ParseSize(s string) (int64, error) { return units.ParseBytes(s) }

// FormatSize prints a byte count with a binary unit: "64 MiB", "1.5 GiB".
func FormatSize(n int64) string { return units.FormatBytes(n) }

// sizeFlag is a pflag.Value for byte sizes; cobra names the flag in errors.
type sizeFlag struct{ v *int64 }

func (f sizeFlag) String() string {
	if f.v == nil || *f.v == 0 {
		return ""
	}
	return strconv.FormatInt(*f.v, 10)
}

func (f sizeFlag) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*f.v = n
	return nil
}

func (sizeFlag) Type() string { return "size" }
