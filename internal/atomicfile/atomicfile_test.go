package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	for name, write := range map[string]func(string, []byte, os.FileMode) error{"Write": Write, "WriteDurable": WriteDurable} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, "f.json")
			if err := write(p, []byte("one"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := write(p, []byte("two"), 0o555); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(p)
			if err != nil || string(b) != "two" {
				t.Fatalf("content %q, %v; want the second write", b, err)
			}
			if st, _ := os.Stat(p); st.Mode().Perm() != 0o555 {
				t.Errorf("mode %v, want 0555", st.Mode().Perm())
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Errorf("dir holds %d entries, want the file alone (no temporary file left)", len(entries))
			}
			// A failed write leaves the old file and no temporary file.
			if err := write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600); err == nil || !strings.Contains(err.Error(), "missing") {
				t.Errorf("write into a missing directory: %v", err)
			}
			if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := write(filepath.Join(dir, "d"), []byte("x"), 0o600); err == nil {
				t.Error("replacing a directory: no error")
			}
			entries, _ = os.ReadDir(dir)
			if len(entries) != 2 {
				t.Errorf("after failed writes the dir holds %d entries, want 2", len(entries))
			}
		})
	}
}

func TestTempFile(t *testing.T) {
	dir := t.TempDir()
	p, err := TempFile(dir, []byte("k"), 0o400)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(p) != dir || !strings.HasPrefix(filepath.Base(p), ".tmp-") {
		t.Errorf("temporary file %s, want %s/.tmp-*", p, dir)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o400 {
		t.Errorf("stat %v, %v; want mode 0400", st, err)
	}
	if _, err := TempFile(filepath.Join(dir, "missing"), nil, 0o600); err == nil {
		t.Error("missing directory: no error")
	}
	if err := SyncDir(filepath.Join(dir, "missing")); err == nil {
		t.Error("SyncDir of a missing directory: no error")
	}
}

func TestSync(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f, dir} {
		if err := Sync(p); err != nil {
			t.Errorf("Sync(%s) = %v", p, err)
		}
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(f, link); err != nil {
		t.Fatal(err)
	}
	if err := Sync(link); err == nil {
		t.Error("Sync(symlink) = nil; want an error (not followed)")
	}
	if err := Sync(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Sync(missing) = %v; want an error naming it", err)
	}
}
