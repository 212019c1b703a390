//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/corral-sandbox/corral/api/rest"
)

// createVolume makes a volume and removes it at the end of the test (after
// the sandboxes created later, whose removals run first); a volume left
// mounted by a failed test is detached.
func (d *daemon) createVolume(name string, args ...string) {
	d.t.Helper()
	if got := strings.TrimSpace(d.must(append([]string{"volume", "create", name}, args...)...)); got != name {
		d.t.Fatalf("corral volume create %s printed %q; want the name", name, got)
	}
	d.t.Cleanup(func() {
		_, _, _ = d.corral("volume", "rm", name)
		mp := filepath.Join(d.root, "volumes", name, "data")
		if strings.Contains(readFile("/proc/self/mountinfo"), " "+mp+" ") {
			d.t.Errorf("volume %s still mounted at the end of the test; detaching it", name)
			_ = syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	})
}

func (d *daemon) inspectVolume(name string) rest.Volume {
	d.t.Helper()
	var vs []rest.Volume
	if err := json.Unmarshal([]byte(d.must("volume", "inspect", name)), &vs); err != nil || len(vs) != 1 {
		d.t.Fatalf("volume inspect %s: %v, %v", name, vs, err)
	}
	return vs[0]
}

// TestVolumes: a named volume is shared by boxes with user namespaces of
// their own, its files are box root's in each, :ro is read-only, its size
// is a hard limit, its data outlives the boxes and a daemon restart, it
// cannot be removed while used, bad requests name the field and leave
// nothing, and its removal leaves nothing behind.
func TestVolumes(t *testing.T) {
	d := startDaemonWith(t, func(cfg *string, _ string) {
		// Four boxes at once: the pool of TestUserNamespace, wider.
		*cfg += "userns = \"on\"\nuserns_pool = \"2999975936:262144\"\n"
	})
	d.createVolume("data", "--size", "32m")

	// Bad requests: a 4xx naming the field, nothing made.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"volume", "create", "a..b"}, "volume name"},
		{[]string{"volume", "create", "x", "--size", "1k"}, "volume size"},
		{[]string{"volume", "create", "data"}, "already exists"},
		{[]string{"create", "--image", "busybox", "--volume", "nope:/data"}, "volumes[0].name"},
		{[]string{"create", "--image", "busybox", "--volume", "data:data"}, "must be absolute"},
		{[]string{"create", "--image", "busybox", "--volume", "data:/proc/x"}, "reserved"},
		{[]string{"create", "--image", "busybox", "--volume", "/etc:/data"}, "host path"},
		{[]string{"volume", "rm", "nope"}, "not found"},
	} {
		_, errOut, err := d.corral(tc.args...)
		if err == nil || !strings.Contains(errOut, tc.want) {
			t.Errorf("corral %s: %v, %q; want an error naming %q", strings.Join(tc.args, " "), err, errOut, tc.want)
		}
	}
	if got := d.must("volume", "ls", "-q"); got != "data\n" {
		t.Errorf("volume ls after bad requests = %q; want data alone", got)
	}
	if got := d.must("ls", "-q"); got != "" {
		t.Errorf("sandboxes after bad requests: %q; want none", got)
	}
	if code, e := d.post("/v1/sandboxes", map[string]any{"image": "busybox", "volumes": []map[string]any{{"name": "data", "target": "rel"}}}); code != 400 || !strings.Contains(e.Error.Message, "volumes[0].target") {
		t.Errorf("POST /v1/sandboxes with a relative volume target = %d %+v; want 400 naming volumes[0].target", code, e)
	}
	if code, e := d.post("/v1/volumes", map[string]any{"name": "../x"}); code != 400 || e.Error.Code != "invalid_argument" || !strings.Contains(e.Error.Message, "volume name") {
		t.Errorf("POST /v1/volumes with a bad name = %d %+v; want 400 naming the volume name", code, e)
	}

	a := d.create("--image", "busybox", "--volume", "data:/data")
	b := d.create("--image", "busybox", "--volume", "data:/mnt/d:ro")
	if ra, rb := d.boxRange(a), d.boxRange(b); ra == rb {
		t.Fatalf("boxes share host range %d", ra)
	}
	if out, ok := d.sh(a, "echo hi > /data/f && mkdir /data/u && chown 1000:1000 /data/u && stat -c '%u:%g' /data /data/f /data/u"); !ok || out != "0:0\n0:0\n1000:1000\n" {
		t.Errorf("in %s: %q, %v; want the files box root's and u 1000's", a, out, ok)
	}
	// The other box, in another host range, sees the same files with the
	// same owners, read-only.
	if out, ok := d.sh(b, "cat /mnt/d/f && stat -c '%u:%g' /mnt/d/f /mnt/d/u"); !ok || out != "hi\n0:0\n1000:1000\n" {
		t.Errorf("in %s: %q, %v; want hi, owned 0:0 and 1000:1000", b, out, ok)
	}
	if out, ok := d.sh(b, "touch /mnt/d/x"); ok || !strings.Contains(out, "Read-only") {
		t.Errorf("writing a :ro volume: %q, %v; want a read-only file system error", out, ok)
	}
	// The size is a hard limit.
	if out, ok := d.sh(a, "dd if=/dev/zero of=/data/big bs=1M count=64"); ok || !strings.Contains(out, "No space left") {
		t.Errorf("writing past the volume's size: %q, %v; want ENOSPC", out, ok)
	}
	d.sh(a, "rm -f /data/big")
	v := d.inspectVolume("data")
	if v.SizeBytes != 32<<20 || len(v.Sandboxes) != 2 || v.UsedBytes <= 0 {
		t.Errorf("volume inspect = %+v; want 32 MiB, some of it used, and two sandboxes", v)
	}
	var du rest.DiskUsage
	if err := json.Unmarshal([]byte(d.must("system", "df", "--json")), &du); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(du.Summary, func(r rest.DiskUsageRow) bool { return r.Type == "volumes" }); i < 0 ||
		du.Summary[i].Total != 1 || du.Summary[i].Active != 1 || du.Summary[i].SizeBytes <= 0 || du.Summary[i].ReclaimableBytes != 0 {
		t.Errorf("system df = %+v; want a volumes row: one volume, in use, not reclaimable", du.Summary)
	}

	// A symbolic link in a box's files cannot lead a volume's mount out of
	// the box's root: the target resolves inside it, where ".." stops at
	// the root and an absolute link names the box's own path.
	outside := filepath.Join(t.TempDir(), "made")
	d.must("exec", a, "--", "sh", "-c", "ln -s ../../../../../../tmp /up && ln -s "+outside+" /abs")
	d.must("snapshot", a, "--name", "evil")
	t.Cleanup(func() { _, _, _ = d.corral("snapshot", "rm", "evil") })
	e := d.create("--from", "evil", "--volume", "data:/up")
	if out, ok := d.sh(e, "cat /tmp/f"); !ok || out != "hi\n" {
		t.Errorf("volume mounted at /up, a link to ../../../../../../tmp: cat /tmp/f in the box = %q, %v; want hi (the link resolved in the box)", out, ok)
	}
	d.must("rm", "-f", e)
	// The box has no such directory: the runtime refuses rather than
	// make it, and nothing is made on the host.
	if out, errOut, err := d.corral("create", "--from", "evil", "--volume", "data:/abs"); err == nil {
		d.must("rm", "-f", strings.TrimSpace(out))
	} else if !strings.Contains(errOut, "/abs") {
		t.Errorf("create with a volume at /abs, a link to a host path: %v, %q; want an error naming /abs", err, errOut)
	}
	if _, err := os.Lstat(outside); !os.IsNotExist(err) {
		t.Errorf("the host's %s after mounting a volume at a link to it: %v; want nothing made", outside, err)
	}
	if got := d.must("ls", "-q"); len(strings.Fields(got)) != 2 {
		t.Errorf("sandboxes after the links: %q; want a and b alone", got)
	}

	// Removal is refused while a box, even a stopped one, mounts it.
	d.must("rm", "-f", a)
	d.must("stop", b)
	if _, errOut, err := d.corral("volume", "rm", "data"); err == nil || !strings.Contains(errOut, b) {
		t.Errorf("volume rm of a volume a stopped box mounts: %v, %q; want refused naming %s", err, errOut, b)
	}
	d.must("rm", "-f", b)

	// The data outlives the boxes and a daemon restart.
	d.stop()
	d.start()
	c := d.create("--image", "busybox", "--volume", "data:/data")
	if out, ok := d.sh(c, "cat /data/f"); !ok || out != "hi\n" {
		t.Errorf("after a restart, in a new box: %q, %v; want hi", out, ok)
	}
	d.must("rm", "-f", c)

	// An image's spec names volumes for its boxes.
	specFile := filepath.Join(t.TempDir(), "corral.yaml")
	if err := os.WriteFile(specFile, []byte("from: busybox\nvolumes: [\"data:/fromspec:ro\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.must("build", "-q", "-f", specFile, "-t", "withvol")
	t.Cleanup(func() { _, _, _ = d.corral("image", "rm", "withvol") })
	s := d.create("--image", "withvol")
	if out, ok := d.sh(s, "cat /fromspec/f && ! touch /fromspec/x"); !ok || !strings.HasPrefix(out, "hi\n") {
		t.Errorf("in a box of an image whose spec mounts data read-only: %q, %v; want hi, and no write", out, ok)
	}
	d.must("rm", "-f", s)

	d.must("volume", "rm", "data")
	if got := d.must("volume", "ls", "-q"); got != "" {
		t.Errorf("volume ls after rm = %q; want none", got)
	}
	if left := d.leftovers(); len(left) > 0 {
		t.Errorf("left after removing the volume: %v", left)
	}
	if _, err := os.Lstat(filepath.Join(d.root, "volumes", "data")); !os.IsNotExist(err) {
		t.Errorf("volume directory after rm: %v; want gone", err)
	}
}
