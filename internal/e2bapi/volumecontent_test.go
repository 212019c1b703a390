package e2bapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// newVolumeFixture serves the volume content API on volume "data", whose
// files are in the returned directory; beside it lies a file the volume
// must not reach.
func newVolumeFixture(t *testing.T) (*fixture, string, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(base, "secret")
	if err := os.WriteFile(secret, []byte("host only"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: newFakeManager(testNow)}
	a, err := New(Config{
		Manager: f.m, Now: func() time.Time { return testNow },
		VolumeDir: func(name string) (string, error) {
			if name != "data" {
				return "", fmt.Errorf("volume %q: %w", name, errdefs.ErrNotFound)
			}
			return dir, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for p, h := range a.Routes() {
		mux.HandleFunc(p, h)
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f, dir, secret
}

// TestVolumeContent drives the volume content API as the SDK's Volume
// does: makeDir, writeFile, readFile, list, getInfo, updateMetadata,
// remove.
func TestVolumeContent(t *testing.T) {
	f, dir, _ := newVolumeFixture(t)
	ids := fmt.Sprintf("&uid=%d&gid=%d", os.Getuid(), os.Getgid())
	q := func(p string) string { return url.QueryEscape(p) }

	code, out, _ := f.do(t, "POST", "/volumecontent/data/dir?path="+q("/a/b")+ids+"&mode=448&force=true", "")
	var e volumeEntry
	if err := json.Unmarshal([]byte(out), &e); err != nil || code != http.StatusCreated || e.Type != "directory" || e.Path != "/a/b" || e.Mode != 0o700 {
		t.Fatalf("makeDir /a/b = %d %s; want 201, a directory /a/b with mode 0700", code, out)
	}
	if code, out, _ := f.do(t, "POST", "/volumecontent/data/dir?path="+q("/x/y")+ids, ""); code != http.StatusNotFound {
		t.Errorf("makeDir /x/y without force = %d %s; want 404 (no parent)", code, out)
	}
	code, out, _ = f.do(t, "PUT", "/volumecontent/data/file?path="+q("a/b/../b/f.txt")+ids, "hello")
	if err := json.Unmarshal([]byte(out), &e); err != nil || code != http.StatusCreated || e.Type != "file" || e.Size != 5 || e.Path != "/a/b/f.txt" {
		t.Fatalf("writeFile = %d %s; want 201, a 5-byte file /a/b/f.txt", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a", "b", "f.txt")); err != nil || string(b) != "hello" {
		t.Errorf("the volume's file = %q, %v; want hello", b, err)
	}
	if code, out, _ := f.do(t, "GET", "/volumecontent/data/file?path="+q("/a/b/f.txt"), ""); code != http.StatusOK || out != "hello" {
		t.Errorf("readFile = %d %q; want 200 hello", code, out)
	}
	code, out, _ = f.do(t, "GET", "/volumecontent/data/dir?path=/&depth=3", "")
	var list []volumeEntry
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != http.StatusOK {
		t.Fatalf("list / = %d %s; want 200", code, out)
	}
	var paths []string
	for _, e := range list {
		paths = append(paths, e.Path)
	}
	if want := []string{"/a", "/a/b", "/a/b/f.txt"}; !slices.Equal(paths, want) {
		t.Errorf("list / depth 3 = %q; want %q", paths, want)
	}
	if code, out, _ := f.do(t, "PATCH", "/volumecontent/data/path?path=/a/b/f.txt", `{"mode": 384}`); code != http.StatusOK || !strings.Contains(out, `"mode":384`) {
		t.Errorf("updateMetadata mode 0600 = %d %s; want 200 with mode 384", code, out)
	}
	if code, out, _ := f.do(t, "DELETE", "/volumecontent/data/path?path=/a", ""); code != http.StatusNoContent {
		t.Errorf("remove /a = %d %s; want 204", code, out)
	}
	if code, out, _ := f.do(t, "GET", "/volumecontent/data/path?path=/a", ""); code != http.StatusNotFound {
		t.Errorf("getInfo of a removed path = %d %s; want 404", code, out)
	}
	for _, tc := range []struct{ method, path string }{
		{"DELETE", "/volumecontent/data/path?path=/"},
		{"GET", "/volumecontent/data/dir"},
		{"PUT", "/volumecontent/data/file?path=/f&uid=x"},
		{"GET", "/volumecontent/data/dir?path=/&depth=0"},
	} {
		code, out, _ := f.do(t, tc.method, tc.path, "")
		wantError(t, tc.method+" "+tc.path, code, out, http.StatusBadRequest)
	}
	if code, out, _ := f.do(t, "GET", "/volumecontent/nope/path?path=/", ""); code != http.StatusNotFound {
		t.Errorf("a path of an unknown volume = %d %s; want 404", code, out)
	}
}

// TestVolumeContentStaysInside: neither ".." nor a symlink leads out of
// the volume, for reads, writes, listings and removals.
func TestVolumeContentStaysInside(t *testing.T) {
	f, dir, secret := newVolumeFixture(t)
	if err := os.Symlink(secret, filepath.Join(dir, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../", filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/abs", "/up/secret", "/../secret", "../../secret"} {
		code, out, _ := f.do(t, "GET", "/volumecontent/data/file?path="+url.QueryEscape(p), "")
		if strings.Contains(out, "host only") {
			t.Errorf("readFile %s = %d %q; want the host's file out of reach", p, code, out)
		}
		f.do(t, "PUT", "/volumecontent/data/file?path="+url.QueryEscape(p), "overwritten")
		f.do(t, "DELETE", "/volumecontent/data/path?path="+url.QueryEscape(p+"/x"), "")
	}
	for _, p := range []string{"/abs", "/up/secret"} {
		code, out, _ := f.do(t, "GET", "/volumecontent/data/file?path="+url.QueryEscape(p), "")
		wantError(t, "readFile "+p, code, out, http.StatusBadRequest)
	}
	if code, out, _ := f.do(t, "GET", "/volumecontent/data/dir?path=/up", ""); code == http.StatusOK {
		t.Errorf("list /up = %d %s; want it refused", code, out)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host only" {
		t.Errorf("the file beside the volume = %q, %v; want it untouched", b, err)
	}
	// "/../secret" is the volume's own /secret: written inside.
	if b, err := os.ReadFile(filepath.Join(dir, "secret")); err != nil || string(b) != "overwritten" {
		t.Errorf("/../secret in the volume = %q, %v; want the write kept inside the volume", b, err)
	}
	// The symlink itself is described, not followed.
	code, out, _ := f.do(t, "GET", "/volumecontent/data/path?path=/abs", "")
	if code != http.StatusOK || !strings.Contains(out, `"type":"symlink"`) {
		t.Errorf("getInfo /abs = %d %s; want 200, a symlink", code, out)
	}
}
