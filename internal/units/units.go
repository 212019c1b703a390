// Package units parses and formats byte sizes as users write them on the
// command line and in corral.yaml: "512m", "2g", "1.5GiB", "1048576".
package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
)

// byteUnits are the suffixes ParseBytes knows; all are powers of 1024.
var byteUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseBytes parses a byte size: a non-negative number with an optional unit
// k, m, g or t (case-insensitive, optionally followed by "b" or "ib", all
// powers of 1024, optionally after a space) such as "512m", "1g", "1.5GiB",
// "64 MiB" or "1048576" (plain bytes). Fractions are rounded down to whole
// bytes. Errors wrap errdefs.ErrInvalidArgument.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	if num == "" {
		return 0, invalid("size %q: want a number with an optional unit (512m, 1g, 1.5GiB)", s)
	}
	mult, ok := byteUnits[unit]
	if !ok {
		return 0, invalid("size %q: unknown unit %q (use b, k, m, g or t)", s, unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, invalid("size %q: bad number %q", s, num)
	}
	v := math.Floor(f * mult)
	if v >= math.MaxInt64 {
		return 0, invalid("size %q: too large", s)
	}
	return int64(v), nil
}

// FormatBytes prints a byte count with a binary unit, rounded to one
// decimal: "512 B", "64 MiB", "1.5 GiB".
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f := float64(n)
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64) + " " + units[i]
}

// sizeError is a parse error classified as invalid input without adding
// the class's text to the message (flag errors print it as it is).
type sizeError struct{ msg string }

func (e *sizeError) Error() string { return e.msg }

func (e *sizeError) Unwrap() error { return errdefs.ErrInvalidArgument }

func invalid(format string, args ...any) error {
	return &sizeError{msg: fmt.Sprintf(format, args...)}
}
