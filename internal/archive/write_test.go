package archive

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// tarHeaders returns the headers of the archive data.
func tarHeaders(t *testing.T, data []byte) []*tar.Header {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(data))
	var hdrs []*tar.Header
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs
		}
		must(t, err)
		hdrs = append(hdrs, hdr)
	}
}

func writeTree(t *testing.T, root *os.Root, layer bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	write := Write
	if layer {
		write = WriteLayer
	}
	if err := write(&buf, root, "."); err != nil {
		t.Fatalf("Write(layer=%v) = %v", layer, err)
	}
	return buf.Bytes()
}

func TestWriteDeterministic(t *testing.T) {
	src := t.TempDir()
	long := strings.Repeat("l", 120) + "/" + strings.Repeat("n", 150) // no USTAR split fits
	must(t, os.MkdirAll(filepath.Join(src, filepath.Dir(long)), 0o755))
	for _, name := range []string{"f", long, "héllo"} {
		must(t, os.WriteFile(filepath.Join(src, name), []byte(name), 0o644))
	}
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 987654321, time.UTC)
	must(t, os.Chtimes(filepath.Join(src, "f"), mtime, mtime))
	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()

	for _, layer := range []bool{false, true} {
		first := writeTree(t, root, layer)
		// Reading and new access times change nothing.
		atime := time.Now().Add(time.Hour)
		must(t, os.Chtimes(filepath.Join(src, "f"), atime, mtime))
		if again := writeTree(t, root, layer); !bytes.Equal(first, again) {
			t.Fatalf("Write(layer=%v) differs between two runs on the same tree", layer)
		}
		names := map[string]bool{}
		for _, hdr := range tarHeaders(t, first) {
			names[hdr.Name] = true
			if hdr.Format != tar.FormatUSTAR && hdr.Format != tar.FormatGNU {
				t.Errorf("%s: format %v; want USTAR or GNU", hdr.Name, hdr.Format)
			}
			if hdr.Uname != "" || hdr.Gname != "" || !hdr.AccessTime.IsZero() || !hdr.ChangeTime.IsZero() || hdr.ModTime.Nanosecond() != 0 {
				t.Errorf("%s: uname %q gname %q atime %v ctime %v mtime %v; want none and whole seconds",
					hdr.Name, hdr.Uname, hdr.Gname, hdr.AccessTime, hdr.ChangeTime, hdr.ModTime)
			}
			if hdr.Name == "f" && !hdr.ModTime.Equal(mtime.Truncate(time.Second)) {
				t.Errorf("mtime(f) = %v; want %v", hdr.ModTime, mtime.Truncate(time.Second))
			}
		}
		for _, name := range []string{"f", long, "héllo"} {
			if !names[name] {
				t.Errorf("Write(layer=%v) lacks %q", layer, name)
			}
		}
	}
}

func TestWriteLayerSpecialFiles(t *testing.T) {
	src := t.TempDir()
	must(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	must(t, syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644))
	root, err := os.OpenRoot(src)
	must(t, err)
	defer root.Close()
	if got := strings.Join(tarNames(t, writeTree(t, root, false)), " "); got != "f fifo" {
		t.Errorf("Write names = %q; want \"f fifo\"", got)
	}
	if got := strings.Join(tarNames(t, writeTree(t, root, true)), " "); got != "f" {
		t.Errorf("WriteLayer names = %q; want \"f\" (fifo skipped)", got)
	}

	must(t, os.WriteFile(filepath.Join(src, ".wh.f"), nil, 0o644))
	if err := WriteLayer(io.Discard, root, "."); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("WriteLayer(tree with .wh.f) = %v; want %v", err, errdefs.ErrInvalidArgument)
	}
	if err := Write(io.Discard, root, "."); err != nil {
		t.Errorf("Write(tree with .wh.f) = %v; want success", err)
	}
}
