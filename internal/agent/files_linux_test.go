package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/agentclient"
)

func filesURL(c *agentclient.Client, p string, extra ...string) string {
	q := url.Values{"path": {p}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return c.BaseURL + "/files?" + q.Encode()
}

func do(t *testing.T, c *agentclient.Client, method, u, ctype string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func TestFilesUploadDownload(t *testing.T) {
	c := startAgent(t, Config{})
	dir := t.TempDir()

	// Raw body (Corral extension), into a directory that does not exist yet.
	p := filepath.Join(dir, "a", "b", "raw.txt")
	if code, b := do(t, c, "POST", filesURL(c, p), "application/octet-stream", bytes.NewReader([]byte("raw data"))); code != 200 {
		t.Fatalf("POST raw = %d %s; want 200", code, b)
	}
	if code, b := do(t, c, "GET", filesURL(c, p), "", nil); code != 200 || string(b) != "raw data" {
		t.Errorf("GET %s = %d %q; want 200 %q", p, code, b, "raw data")
	}

	// Multipart (E2B style) overwrites.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", "ignored.txt")
	fw.Write([]byte("multi"))
	mw.Close()
	if code, b := do(t, c, "POST", filesURL(c, p), mw.FormDataContentType(), &body); code != 200 {
		t.Fatalf("POST multipart = %d %s; want 200", code, b)
	}
	if got, _ := os.ReadFile(p); string(got) != "multi" {
		t.Errorf("file after multipart = %q; want %q", got, "multi")
	}

	// Writing through a symlink as the last component is refused.
	target := filepath.Join(dir, "target")
	mustWrite(t, target, "keep")
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if code, _ := do(t, c, "POST", filesURL(c, link), "application/octet-stream", bytes.NewReader([]byte("evil"))); code != 400 {
		t.Errorf("POST through symlink = %d; want 400", code)
	}
	if got, _ := os.ReadFile(target); string(got) != "keep" {
		t.Errorf("symlink target = %q; want %q", got, "keep")
	}

	tests := []struct {
		name string
		path string
		code int
	}{
		{name: "missing", path: filepath.Join(dir, "nope"), code: 404},
		{name: "directory", path: dir, code: 400},
		{name: "device", path: "/dev/zero", code: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := do(t, c, "GET", filesURL(c, tc.path), "", nil); code != tc.code {
				t.Errorf("GET %q = %d; want %d", tc.path, code, tc.code)
			}
		})
	}
}

func TestFilesFifoDoesNotHang(t *testing.T) {
	c := startAgent(t, Config{})
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// The deadline only turns a hang into a failure; it is not a speed check.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, method := range []string{"GET", "POST"} {
		req, _ := http.NewRequestWithContext(ctx, method, filesURL(c, fifo), bytes.NewReader([]byte("x")))
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatalf("%s fifo: %v", method, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("%s fifo = %d; want 400", method, resp.StatusCode)
		}
	}
}

func TestFilesTarRoundTrip(t *testing.T) {
	c := startAgent(t, Config{})
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o755)
	mustWrite(t, filepath.Join(src, "top.txt"), "top")
	mustWrite(t, filepath.Join(src, "sub", "deep", "x.bin"), string(bytes.Repeat([]byte{1, 2, 3}, 100000)))
	os.Symlink("sub/deep/x.bin", filepath.Join(src, "ln"))
	os.Chmod(filepath.Join(src, "top.txt"), 0o4755) // setuid must not survive

	code, tarball := do(t, c, "GET", filesURL(c, src, "format", "tar"), "", nil)
	if code != 200 {
		t.Fatalf("GET tar = %d; want 200", code)
	}
	dst := filepath.Join(t.TempDir(), "new")
	if code, b := do(t, c, "POST", filesURL(c, dst, "format", "tar"), "application/x-tar", bytes.NewReader(tarball)); code != 204 {
		t.Fatalf("POST tar = %d %s; want 204", code, b)
	}
	for _, rel := range []string{"top.txt", "sub/deep/x.bin"} {
		a, _ := os.ReadFile(filepath.Join(src, rel))
		b, err := os.ReadFile(filepath.Join(dst, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s after round trip: %v, equal=%v; want identical", rel, err, bytes.Equal(a, b))
		}
	}
	if l, err := os.Readlink(filepath.Join(dst, "ln")); err != nil || l != "sub/deep/x.bin" {
		t.Errorf("Readlink(ln) = %q, %v; want %q", l, err, "sub/deep/x.bin")
	}
	if st, err := os.Stat(filepath.Join(dst, "top.txt")); err != nil || st.Mode()&os.ModeSetuid != 0 || st.Mode().Perm() != 0o755 {
		t.Errorf("top.txt mode = %v, %v; want 0755 without setuid", st.Mode(), err)
	}
}

type tarEntry struct {
	name, link string
	typ        byte
	body       string
}

func makeTar(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(e.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

func TestExtractTarRejectsEscapes(t *testing.T) {
	tests := []struct {
		name    string
		entries []tarEntry
	}{
		{name: "dotdot", entries: []tarEntry{{name: "../evil", typ: tar.TypeReg, body: "x"}}},
		{name: "nested dotdot", entries: []tarEntry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}},
		{name: "absolute", entries: []tarEntry{{name: "/evil", typ: tar.TypeReg, body: "x"}}},
		{name: "absolute symlink", entries: []tarEntry{{name: "l", link: "/etc", typ: tar.TypeSymlink}}},
		{name: "relative symlink out", entries: []tarEntry{{name: "a/l", link: "../../out", typ: tar.TypeSymlink}}},
		{name: "hardlink out", entries: []tarEntry{{name: "h", link: "../out/secret", typ: tar.TypeLink}}},
		{name: "write through symlink dir", entries: []tarEntry{
			{name: "d", link: ".", typ: tar.TypeSymlink},
			{name: "../evil", typ: tar.TypeReg, body: "x"},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			out := filepath.Join(base, "out")
			os.Mkdir(out, 0o755)
			mustWrite(t, filepath.Join(out, "secret"), "s")
			err := extractTar(filepath.Join(base, "root"), bytes.NewReader(makeTar(t, tc.entries)), nil)
			if !errors.Is(err, errInvalidArgument) {
				t.Errorf("extractTar(%s) = %v; want invalid argument", tc.name, err)
			}
			if _, err := os.Lstat(filepath.Join(base, "evil")); err == nil {
				t.Errorf("extractTar(%s) wrote outside the root", tc.name)
			}
		})
	}

	// A link already in the destination (the box's user made it) that
	// leaves it: os.Root refuses the path, and the caller gets a 400, not
	// a 500.
	t.Run("through an existing symlink", func(t *testing.T) {
		base := t.TempDir()
		root, out := filepath.Join(base, "root"), filepath.Join(base, "out")
		for _, d := range []string{root, out} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(out, filepath.Join(root, "l")); err != nil {
			t.Fatal(err)
		}
		err := extractTar(root, bytes.NewReader(makeTar(t, []tarEntry{{name: "l/evil", typ: tar.TypeReg, body: "x"}})), nil)
		if err == nil || httpStatus(err) != 400 || connectErr(err).(*connect.Error).Code() != connect.CodeInvalidArgument {
			t.Errorf("extractTar = %v (HTTP %d); want a 400 invalid argument", err, httpStatus(err))
		}
		if _, err := os.Lstat(filepath.Join(out, "evil")); err == nil {
			t.Error("wrote through the link, outside the root")
		}
	})

	t.Run("devices skipped", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "r")
		tb := makeTar(t, []tarEntry{{name: "null", typ: tar.TypeChar}, {name: "fifo", typ: tar.TypeFifo}, {name: "ok", typ: tar.TypeReg, body: "ok"}})
		if err := extractTar(root, bytes.NewReader(tb), nil); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"null", "fifo"} {
			if _, err := os.Lstat(filepath.Join(root, n)); err == nil {
				t.Errorf("%s was created; want skipped", n)
			}
		}
	})
}
