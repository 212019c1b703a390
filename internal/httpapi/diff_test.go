package httpapi

import (
	"net/http/httptest"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseDiffRequest(t *testing.T) {
	for _, tc := range []struct {
		query string
		ok    bool
	}{
		{"", true},
		{"format=patch&dir=/work&path=src/&path=*.py&max_file_bytes=10&max_bytes=20", true},
		{"format=tar", false},
		{"path=../etc", false},
		{"path=[", false},
		{"max_bytes=0", false},
		{"max_file_bytes=ten", false},
		{"format=patch&stat=true", true},
		{"format=stat&stat=true", false},
		{"format=patch&stat=yes", false},
	} {
		r := httptest.NewRequest("GET", "/v1/sandboxes/x/diff?"+tc.query, nil)
		_, err := parseDiffRequest(r)
		if (err == nil) != tc.ok || err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("parseDiffRequest(%q) = %v; want ok %v (or an invalid argument)", tc.query, err, tc.ok)
		}
	}
}
