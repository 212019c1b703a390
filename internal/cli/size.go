package cli

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize knows; all are powers of 1024.
var sizeUnits = map[string]float64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}

// ParseSize parses a byte size: a number with an optional unit k, m, g or t
// (case-insensitive, optionally followed by "b" or "ib", all powers of 1024)
// such as "512m", "1g", "1.5GiB" or "1048576". Fractions are rounded down to
// whole bytes.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	}
	if num == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (512m, 1g, 1.5GiB)", s)
	}
	mult, ok := sizeUnits[unit]
	if !ok {
		return 0, fmt.Errorf("size %q: unknown unit %q (use b, k, m, g or t)", s, unit)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: bad number %q", s, num)
	}
	v := math.Floor(f * mult)
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return int64(v), nil
}

// FormatSize prints a byte count with a binary unit: "64 MiB", "1.5 GiB".
func FormatSize(n int64) string {
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
