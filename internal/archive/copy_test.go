package archive

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCopy: the tree arrives, tee sees exactly the stream Write produces,
// and a symlink pointing out of the source is copied as a link.
func TestCopy(t *testing.T) {
	srcDir, dstDir := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(srcDir, "a/b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srcDir, "a/b/f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/shadow", filepath.Join(srcDir, "a/out")); err != nil {
		t.Fatal(err)
	}
	src, err := os.OpenRoot(srcDir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenRoot(dstDir)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var tee, want bytes.Buffer
	if err := Copy(context.Background(), src, ".", dst, Options{}, &tee); err != nil {
		t.Fatalf("Copy = %v", err)
	}
	if err := Write(&want, src, "."); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(tee.Bytes(), want.Bytes()) {
		t.Errorf("tee got %d bytes; want Write's %d", tee.Len(), want.Len())
	}
	if b, err := os.ReadFile(filepath.Join(dstDir, "a/b/f")); err != nil || string(b) != "data" {
		t.Errorf("a/b/f = %q, %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(dstDir, "a/out")); err != nil || l != "/etc/shadow" {
		t.Errorf("a/out = %q, %v; want the link itself", l, err)
	}
}
