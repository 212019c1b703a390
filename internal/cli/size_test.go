package cli

import "testing"

// The parsing rules are tested in internal/units; these check the flag.

func TestSizeFlag(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"512m", 512 << 20, false},
		{"1.5GiB", 3 << 29, false},
		{"1048576", 1 << 20, false},
		{"12x", 7, true},
		{"", 7, true},
	}
	for _, tc := range tests {
		v := int64(7)
		err := sizeFlag{&v}.Set(tc.in)
		if (err != nil) != tc.wantErr || v != tc.want {
			t.Errorf("sizeFlag.Set(%q) = %d, %v; want %d, error %v", tc.in, v, err, tc.want, tc.wantErr)
		}
	}
	var zero int64
	if s := (sizeFlag{&zero}).String(); s != "" {
		t.Errorf("sizeFlag{0}.String() = %q; want \"\"", s)
	}
}

func TestFormatSize(t *testing.T) {
	if got := FormatSize(3 << 29); got != "1.5 GiB" {
		t.Errorf("FormatSize(%d) = %q; want %q", 3<<29, got, "1.5 GiB")
	}
}
