//go:build integration

package integration

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// premadeNS lists the network namespaces the daemon made ahead
// (netns_pool_size): their directories under the runtime's run directory
// (one being made is "premade-<hex>.new" until it is whole).
func (d *daemon) premadeNS() []string {
	dirs, _ := filepath.Glob(filepath.Join(d.run, "*", "sandboxes", "premade-*"))
	return slices.DeleteFunc(dirs, func(p string) bool { return strings.HasSuffix(p, ".new") })
}

// waitPremade waits until the daemon has made n namespaces ahead.
func (d *daemon) waitPremade(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := d.premadeNS()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon made %d namespaces ahead in 20s (%v); want %d", len(got), got, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mountedUnder lists the mount points under dir in the host's and the
// daemon's mount namespace.
func (d *daemon) mountedUnder(dir string) []string {
	var found []string
	files := []string{"/proc/self/mountinfo"}
	if d.cmd != nil {
		files = append(files, filepath.Join("/proc", itoa(d.cmd.Process.Pid), "mountinfo"))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if fields := strings.Fields(l); len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
				found = append(found, fields[4]+" (in "+f+")")
			}
		}
	}
	return found
}

// TestNetNSPoolReclaimedAfterKill checks the namespaces made ahead for
// creates: a create takes one (its box works), a SIGKILLed daemon leaves
// them and the next one removes them (namespaces, mounts and directories)
// before it serves, and a daemon stopped gracefully removes its own.
func TestNetNSPoolReclaimedAfterKill(t *testing.T) {
	d := startDaemonWith(t, func(cfg *string, _ string) { *cfg += "netns_pool_size = 3\n" })
	before := d.waitPremade(t, 3)

	id := d.create()
	if out := d.must("exec", id, "cat", "/proc/self/uid_map"); strings.TrimSpace(out) == "" {
		t.Fatalf("exec in a box made from a made-ahead namespace: empty uid_map")
	}
	if after := d.premadeNS(); len(after) >= 3 && slices.Equal(after, before) {
		t.Fatalf("create took no made-ahead namespace: %v before and after", before)
	}
	d.must("rm", "-f", id)

	made := d.waitPremade(t, 3)
	d.kill()
	for _, p := range made {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("after SIGKILL: %s: %v; want the killed daemon's namespaces still there", p, err)
		}
	}

	d.start()
	// Recover removes them before the API answers.
	for _, p := range made {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("restarted daemon kept %s (stat: %v); want it removed", p, err)
		}
		if m := d.mountedUnder(p); len(m) > 0 {
			t.Errorf("restarted daemon kept the mounts of %s: %v", p, m)
		}
	}
	d.waitPremade(t, 3) // it makes its own
	d.stop()
	if p := d.premadeNS(); len(p) > 0 {
		t.Errorf("stopped daemon left made-ahead namespaces: %v", p)
	}
	d.requireNoLeftovers()
}
