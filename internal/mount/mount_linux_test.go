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

func TestAt(t *testing.T) {
	info := filepath.Join(t.TempDir(), "mountinfo")
	const content = `22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
40 22 7:3 / /var/lib/corral/disks rw,relatime shared:5 - xfs /dev/loop3 rw
41 40 7:4 / /var/lib/corral/disks rw,relatime - xfs /dev/loop4 rw
42 22 0:33 / /srv/with\040space rw - tmpfs my\040tmpfs rw
`
	if err := os.WriteFile(info, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir, source, fstype string
		ok                  bool
	}{
		{"/var/lib/corral/disks", "/dev/loop4", "xfs", true}, // the topmost of two mounts, past an optional field
		{"/srv/with space", "my tmpfs", "tmpfs", true},
		{"/var/lib/corral", "", "", false},
	} {
		source, fstype, ok, err := At(info, c.dir)
		if err != nil || source != c.source || fstype != c.fstype || ok != c.ok {
			t.Errorf("At(%q) = %q, %q, %v, %v; want %q, %q, %v", c.dir, source, fstype, ok, err, c.source, c.fstype, c.ok)
		}
	}
	if _, _, _, err := At(filepath.Join(t.TempDir(), "missing"), "/"); err == nil {
		t.Fatal("At on a missing file: want an error")
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
