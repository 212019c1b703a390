package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestWriteResolvConfKeepsInode: boxes bind-mount resolv.conf, so a
// daemon started again must not replace the file (a box would be left
// with a deleted file, which CRIU cannot restore): an unchanged file is
// left alone and a changed one is rewritten in place.
func TestWriteResolvConfKeepsInode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "network")
	p, err := writeResolvConf(dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(want), "nameserver ") {
		t.Fatalf("resolv.conf = %q; want a nameserver line", want)
	}
	ino := func() uint64 {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	first := ino()
	if _, err := writeResolvConf(dir); err != nil {
		t.Fatal(err)
	}
	if got := ino(); got != first {
		t.Errorf("second write replaced the file (inode %d, was %d)", got, first)
	}
	// An older daemon's longer text is overwritten where it is.
	if err := os.WriteFile(p, []byte(strings.Repeat("# old\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := writeResolvConf(dir); err != nil {
		t.Fatal(err)
	}
	if got := ino(); got != first {
		t.Errorf("rewrite replaced the file (inode %d, was %d)", got, first)
	}
	if got, _ := os.ReadFile(p); string(got) != string(want) {
		t.Errorf("after rewrite resolv.conf = %q; want %q", got, want)
	}
	if _, err := os.Stat(p + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("%s.tmp left behind (stat: %v)", p, err)
	}
}
