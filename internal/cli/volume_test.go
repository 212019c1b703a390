package cli

import (
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/api/rest"
)

func TestParseVolumeMount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want rest.VolumeMount
		err  string
	}{
		{in: "data:/data", want: rest.VolumeMount{Name: "data", Target: "/data"}},
		{in: "data:/data:ro", want: rest.VolumeMount{Name: "data", Target: "/data", Readonly: true}},
		{in: "data:/data:rw", want: rest.VolumeMount{Name: "data", Target: "/data"}},
		{in: "data:/data:rx", err: "ro or rw"},
		{in: "data", err: "NAME:/PATH"},
		{in: "a:/b:ro:x", err: "NAME:/PATH"},
		{in: ":/data", err: "NAME:/PATH"},
		{in: "/srv:/data", err: "host path"},
		{in: "./srv:/data", err: "host path"},
	} {
		got, err := parseVolumeMount(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseVolumeMount(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseVolumeMount(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
