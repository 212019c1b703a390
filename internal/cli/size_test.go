package cli

import "testing"

func TestParseSize(t *testing.T) {
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
		{"2gb", 2 << 30, false},
		{"64 MiB", 64 << 20, false},
		{"10k", 10 << 10, false},
		{"1t", 1 << 40, false},
		{"0", 0, false},
		{"100b", 100, false},
		{"", 0, true},
		{"m", 0, true},
		{"12x", 0, true},
		{"-1g", 0, true},
		{"1..5g", 0, true},
		{"99999999999t", 0, true},
	}
	for _, tc := range tests {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {64 << 20, "64 MiB"}, {3 << 29, "1.5 GiB"},
	}
	for _, tc := range tests {
		if got := FormatSize(tc.in); got != tc.want {
			t.Errorf("FormatSize(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
