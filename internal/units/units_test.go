package units

import (
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"1048576", 1 << 20, false},
		{"512m", 512 << 20, false},
		{"512M", 512 << 20, false},
		{"1g", 1 << 30, false},
		{"1.5GiB", 3 << 29, false},
		{"1.5g", 3 << 29, false},
		{"2gb", 2 << 30, false},
		{"64 MiB", 64 << 20, false},
		{" 4k ", 4 << 10, false},
		{"10k", 10 << 10, false},
		{"1t", 1 << 40, false},
		{"0", 0, false},
		{"100b", 100, false},
		{"1.9", 1, false},
		{"", 0, true},
		{"m", 0, true},
		{"12x", 0, true},
		{"2mbit", 0, true},
		{"-1g", 0, true},
		{"1..5g", 0, true},
		{"1e3", 0, true},
		{"99999999999t", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseBytes(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseBytes(%q) error %v is not an invalid argument", tc.in, err)
		}
	}
}

func TestParseBytesMessage(t *testing.T) {
	_, err := ParseBytes("12x")
	if want := `size "12x": unknown unit "x" (use b, k, m, g or t)`; err == nil || err.Error() != want {
		t.Errorf("ParseBytes(%q) error = %v; want %q", "12x", err, want)
	}
}

func TestFormatBytes(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1 KiB"}, {64 << 20, "64 MiB"}, {3 << 29, "1.5 GiB"}, {5 << 40, "5 TiB"}, {5 << 50, "5120 TiB"},
	}
	for _, tc := range tests {
		if got := FormatBytes(tc.in); got != tc.want {
			t.Errorf("FormatBytes(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestRoundTrip checks that what FormatBytes prints for whole units parses
// back to the same count.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1 << 10, 3 << 29, 64 << 20, 7 << 40} {
		got, err := ParseBytes(FormatBytes(n))
		if err != nil || got != n {
			t.Errorf("ParseBytes(FormatBytes(%d)) = %d, %v; want %d", n, got, err, n)
		}
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"512m", "1.5GiB", "0", "99999999999t", "-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 0 {
			t.Errorf("ParseBytes(%q) = %d; want >= 0", s, n)
		}
	})
}
