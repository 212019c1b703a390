package mount

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestUnder(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	const content = `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
30 22 0:30 / /run/corral/sb/a/rootfs rw - overlay overlay rw
31 30 7:1 / /run/corral/sb/a/rootfs/upper rw - ext4 /dev/loop1 rw
32 22 0:31 / /run/corral/sb/ab rw - tmpfs tmpfs rw
33 22 0:32 / /run/corral/sb/a/with\040space rw - tmpfs tmpfs rw
`
	if err := os.WriteFile(info, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Under(info, "/run/corral/sb/a/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/run/corral/sb/a/rootfs", "/run/corral/sb/a/rootfs/upper", "/run/corral/sb/a/with space"}
	if !slices.Equal(got, want) {
		t.Fatalf("Under = %q, want %q", got, want)
	}
	if _, err := Under(filepath.Join(t.TempDir(), "missing"), "/"); err == nil {
		t.Fatal("Under on a missing file: want an error")
	}
}

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`/a\040b`:    "/a b",
		`/a\134b`:    `/a\b`,
		`/a\0`:       `/a\0`,
		`/plain`:     "/plain",
		`/x\011\012`: "/x\t\n",
	} {
		if got := unescapeMountinfo(in); got != want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
