package agent

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/corral-sandbox/corral/api/gen/filesystem"
	"github.com/corral-sandbox/corral/internal/agentclient"
)

// TestFilesTrailingSlash: a trailing slash names a directory, as in POSIX.
// A directory given as "dir/" works wherever a directory does; a regular
// file given as "file/" is an error and is neither read nor written, and
// "new/" never creates a regular file "new".
func TestFilesTrailingSlash(t *testing.T) {
	c := startAgent(t, Config{})
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	mustWrite(t, file, "data")
	sub := filepath.Join(dir, "d")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(sub, "in.txt"), "in")

	t.Run("dir/ tar download", func(t *testing.T) {
		code, b := do(t, c, "GET", filesURL(c, sub+"/", "format", "tar"), "", nil)
		if code != 200 {
			t.Fatalf("GET %s/ tar = %d %s; want 200", sub, code, b)
		}
		if got := tarFiles(t, b); got["in.txt"] != "in" {
			t.Errorf("tar of %s/ = %v; want in.txt=%q", sub, got, "in")
		}
	})
	t.Run("dir/ tar upload", func(t *testing.T) {
		dst := filepath.Join(dir, "newdir") + "/"
		tb := makeTar(t, []tarEntry{{name: "x", typ: tar.TypeReg, body: "x"}})
		if code, b := do(t, c, "POST", filesURL(c, dst, "format", "tar"), "application/x-tar", bytes.NewReader(tb)); code != 204 {
			t.Fatalf("POST %s tar = %d %s; want 204", dst, code, b)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "newdir", "x")); err != nil || string(got) != "x" {
			t.Errorf("newdir/x = %q, %v; want %q", got, err, "x")
		}
	})
	t.Run("dir/ stat and list", func(t *testing.T) {
		st, err := c.Filesystem.Stat(t.Context(), connect.NewRequest(&fspb.StatRequest{Path: sub + "/"}))
		if err != nil || st.Msg.GetEntry().GetType() != fspb.FileType_FILE_TYPE_DIRECTORY {
			t.Errorf("Stat(%s/) = %v, %v; want a directory", sub, st, err)
		}
		ls, err := c.Filesystem.ListDir(t.Context(), connect.NewRequest(&fspb.ListDirRequest{Path: sub + "/"}))
		if err != nil || len(ls.Msg.GetEntries()) != 1 || ls.Msg.GetEntries()[0].GetName() != "in.txt" {
			t.Errorf("ListDir(%s/) = %v, %v; want [in.txt]", sub, ls, err)
		}
	})

	tests := []struct {
		name   string
		method string
		path   string
		extra  []string
		code   int
	}{
		// A directory is not a regular file, with or without the slash.
		{name: "GET dir/", method: "GET", path: sub + "/", code: 400},
		{name: "GET file/", method: "GET", path: file + "/", code: 400},
		{name: "GET file/ tar", method: "GET", path: file + "/", extra: []string{"format", "tar"}, code: 400},
		{name: "GET missing/", method: "GET", path: filepath.Join(dir, "nope") + "/", code: 404},
		{name: "POST dir/", method: "POST", path: sub + "/", code: 400},
		{name: "POST file/", method: "POST", path: file + "/", code: 400},
		{name: "POST new/", method: "POST", path: filepath.Join(dir, "new") + "/", code: 400},
		{name: "POST file/ tar", method: "POST", path: file + "/", extra: []string{"format", "tar"}, code: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			ctype := ""
			if tc.method == "POST" {
				ctype = "application/octet-stream"
				body = bytes.NewReader([]byte("overwritten"))
				if len(tc.extra) > 0 {
					ctype = "application/x-tar"
					body = bytes.NewReader(makeTar(t, []tarEntry{{name: "y", typ: tar.TypeReg, body: "y"}}))
				}
			}
			code, b := do(t, c, tc.method, filesURL(c, tc.path, tc.extra...), ctype, body)
			if code != tc.code {
				t.Errorf("%s %q = %d %.200q; want %d", tc.method, tc.path, code, b, tc.code)
			}
			if code == 200 && tc.method == "GET" && bytes.Contains(b, []byte("data")) {
				t.Errorf("%s %q returned the file's content", tc.method, tc.path)
			}
		})
	}

	// Nothing above may have changed the file or created "new".
	if got, err := os.ReadFile(file); err != nil || string(got) != "data" {
		t.Errorf("%s = %q, %v; want %q untouched", file, got, err, "data")
	}
	if _, err := os.Lstat(filepath.Join(dir, "new")); err == nil {
		t.Errorf("POST new/ created %s", filepath.Join(dir, "new"))
	}
	if got, err := os.ReadFile(filepath.Join(sub, "in.txt")); err != nil || string(got) != "in" {
		t.Errorf("d/in.txt = %q, %v; want %q untouched", got, err, "in")
	}
}

// tarFiles reads a tar stream into name -> content of its regular files.
func tarFiles(t testing.TB, b []byte) map[string]string {
	t.Helper()
	out, err := readTarFiles(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readTarFiles is tarFiles for goroutines that must not call t.Fatal.
// Symlinks are recorded as "-> target".
func readTarFiles(b []byte) (map[string]string, error) {
	out := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read tar: %w", err)
		}
		switch h.Typeflag {
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("read tar entry %s: %w", h.Name, err)
			}
			out[h.Name] = string(data)
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		}
	}
}

// doNoFatal is do for goroutines other than the test's.
func doNoFatal(c *agentclient.Client, method, u, ctype string, body io.Reader) (int, []byte, error) {
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		return 0, nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// swapRace exchanges two entries of root, one inside the root and one a
// symlink out of it, with renameat2(RENAME_EXCHANGE) (atomic: each name is
// always one or the other) until check is called. out holds the canary file
// "secret" that no request may read or write.
type swapRace struct {
	root, out, canary string
	swaps             atomic.Int64
	stop              chan struct{}
	done              chan error
}

// newSwapRace creates base/root and base/out/secret, lets setup create the
// two entries of root to exchange (it returns their names), and starts the
// swapper. It returns once the first exchange has happened.
func newSwapRace(t *testing.T, setup func(root, out string) (a, b string)) *swapRace {
	t.Helper()
	base := t.TempDir()
	s := &swapRace{
		root:   filepath.Join(base, "root"),
		out:    filepath.Join(base, "out"),
		canary: "CANARY-" + rand.Text(),
		stop:   make(chan struct{}),
		done:   make(chan error, 1),
	}
	for _, d := range []string{s.root, s.out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mustWrite(t, filepath.Join(s.out, "secret"), s.canary)
	a, b := setup(s.root, s.out)
	pa, pb := filepath.Join(s.root, a), filepath.Join(s.root, b)
	started := make(chan struct{})
	go func() {
		defer close(s.done)
		for i := 0; ; i++ {
			if err := unix.Renameat2(unix.AT_FDCWD, pa, unix.AT_FDCWD, pb, unix.RENAME_EXCHANGE); err != nil {
				s.done <- fmt.Errorf("exchange %s and %s: %w", pa, pb, err)
				return
			}
			if i == 0 {
				close(started)
			}
			s.swaps.Add(1)
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}()
	t.Cleanup(s.finish)
	select {
	case <-started:
	case err := <-s.done:
		t.Fatal(err)
	}
	return s
}

func (s *swapRace) finish() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	for range s.done {
	}
}

// check stops the swapper and asserts out holds exactly the untouched canary.
func (s *swapRace) check(t *testing.T) {
	t.Helper()
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	for err := range s.done {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(s.out)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"secret"}) {
		t.Errorf("outside directory holds %v; want only [secret]: something was written outside the root", names)
	}
	if got, err := os.ReadFile(filepath.Join(s.out, "secret")); err != nil || string(got) != s.canary {
		t.Errorf("canary = %q, %v; want %q: it was written through the swapped link", got, err, s.canary)
	}
	if s.swaps.Load() == 0 {
		t.Errorf("no exchange happened; the race was not exercised")
	}
}

// swapOps is how many requests of each kind race the swapper: a count, so
// the test's length does not depend on the machine's speed.
const swapOps = 1000

// TestFilesTarSwapDirForSymlinkRace exchanges a directory inside the tar
// root with a symlink to a directory outside it while tar downloads and
// uploads of the root run. The tar endpoints work through os.Root, so no
// download may ever contain the canary outside the root, and no upload may
// create or overwrite anything there.
func TestFilesTarSwapDirForSymlinkRace(t *testing.T) {
	c := startAgent(t, Config{})
	// root/d (a directory) and root/l (a symlink out) trade places.
	race := newSwapRace(t, func(root, out string) (string, string) {
		d := filepath.Join(root, "d")
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(d, "inside"), "inside")
		if err := os.Symlink(out, filepath.Join(root, "l")); err != nil {
			t.Fatal(err)
		}
		return "d", "l"
	})

	// One entry per upload, so that some land while their directory is
	// the real one and both sides of the race are exercised.
	uploads := [][]byte{
		makeTar(t, []tarEntry{{name: "d/secret", typ: tar.TypeReg, body: "PWNED"}}),
		makeTar(t, []tarEntry{{name: "l/secret", typ: tar.TypeReg, body: "PWNED"}}),
		makeTar(t, []tarEntry{{name: "d/sub/new", typ: tar.TypeReg, body: "PWNED"}}),
		makeTar(t, []tarEntry{{name: "l/sub/new", typ: tar.TypeReg, body: "PWNED"}}),
	}
	var (
		wg              sync.WaitGroup
		sawLink, sawDir atomic.Int64
		mu              sync.Mutex
		uploadCodes     = map[int]int{}
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for range swapOps {
			code, b, err := doNoFatal(c, "GET", filesURL(c, race.root, "format", "tar"), "", nil)
			if err != nil {
				t.Errorf("GET tar: %v", err)
				return
			}
			if code != 200 {
				t.Errorf("GET tar = %d %s; want 200", code, b)
				return
			}
			files, err := readTarFiles(b)
			if err != nil {
				// A file may change size under the walk; the tar itself
				// must still be well formed.
				t.Errorf("GET tar: %v", err)
				return
			}
			for name, data := range files {
				if data == race.canary {
					t.Errorf("tar download of the root holds %s with the canary from outside the root", name)
					return
				}
			}
			if files["d"] != "" || files["l"] != "" {
				sawLink.Add(1)
			}
			if _, ok := files["d/inside"]; ok {
				sawDir.Add(1)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range swapOps {
			code, _, err := doNoFatal(c, "POST", filesURL(c, race.root, "format", "tar"), "application/x-tar", bytes.NewReader(uploads[i%len(uploads)]))
			if err != nil {
				t.Errorf("POST tar: %v", err)
				return
			}
			// Refusals vary with where the exchange hits: 400, 409 (a
			// file that reappeared between remove and create) or 500
			// (os.Root's "path escapes from parent" is not classified).
			mu.Lock()
			uploadCodes[code]++
			mu.Unlock()
		}
	}()
	wg.Wait()
	race.check(t)
	if uploadCodes[204] == 0 {
		t.Errorf("no upload succeeded (status counts %v); the in-root side of the race was not exercised", uploadCodes)
	}
	t.Logf("%d exchanges; downloads saw the link %d times and the directory %d times; upload statuses %v",
		race.swaps.Load(), sawLink.Load(), sawDir.Load(), uploadCodes)
}

// TestFilesWriteSwapFileForSymlinkRace exchanges a regular file with a
// symlink to a canary file outside the root while uploads write to both
// names and single-file tar downloads read them. A plain upload does not
// follow a symlink as the last component (O_NOFOLLOW on the open itself, so
// no check-then-use window), and a tar download stores a link as a link: the
// canary must never be overwritten or sent.
func TestFilesWriteSwapFileForSymlinkRace(t *testing.T) {
	c := startAgent(t, Config{})
	race := newSwapRace(t, func(root, out string) (string, string) {
		mustWrite(t, filepath.Join(root, "f"), "inside")
		if err := os.Symlink(filepath.Join(out, "secret"), filepath.Join(root, "l")); err != nil {
			t.Fatal(err)
		}
		return "f", "l"
	})
	f, l := filepath.Join(race.root, "f"), filepath.Join(race.root, "l")

	var (
		wg                    sync.WaitGroup
		wrote, refused, links atomic.Int64
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range swapOps {
			p := f
			if i%2 == 1 {
				p = l
			}
			code, b, err := doNoFatal(c, "POST", filesURL(c, p), "application/octet-stream", bytes.NewReader([]byte("PWNED")))
			if err != nil {
				t.Errorf("POST %s: %v", p, err)
				return
			}
			switch code {
			case 200:
				wrote.Add(1)
			case 400:
				refused.Add(1)
			default:
				t.Errorf("POST %s = %d %s; want 200, or 400 for a symlink", p, code, b)
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range swapOps {
			p := f
			if i%2 == 1 {
				p = l
			}
			code, b, err := doNoFatal(c, "GET", filesURL(c, p, "format", "tar"), "", nil)
			if err != nil {
				t.Errorf("GET %s tar: %v", p, err)
				return
			}
			if code != 200 {
				// Only a stat racing the exchange could fail, and both
				// names always exist; anything else is a bug.
				t.Errorf("GET %s tar = %d %s; want 200", p, code, b)
				return
			}
			files, err := readTarFiles(b)
			if err != nil {
				t.Errorf("GET %s tar: %v", p, err)
				return
			}
			for name, data := range files {
				if data == race.canary {
					t.Errorf("tar download of %s holds %s with the canary from outside the root", p, name)
					return
				}
				if len(data) > 3 && data[:3] == "-> " {
					links.Add(1)
				}
			}
		}
	}()
	wg.Wait()
	race.check(t)
	if wrote.Load() == 0 {
		t.Errorf("no upload succeeded; the regular-file side of the race was not exercised")
	}
	t.Logf("%d exchanges; uploads %d written, %d refused; downloads saw a link %d times",
		race.swaps.Load(), wrote.Load(), refused.Load(), links.Load())
}
