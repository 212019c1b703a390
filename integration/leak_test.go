//go:build integration

package integration

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// leftovers lists what sandboxes of d still own on the host: mounts under
// its directories (in the host's and in the daemon's mount namespace), loop
// devices backed by its files, cgroups under its parent, processes in them,
// and per-sandbox files. While the daemon runs, the network namespaces it
// made ahead for creates (netns_pool_size) are its own, not a sandbox's;
// once it stopped they count.
func (d *daemon) leftovers() []string {
	var found []string
	premade := func(p string) bool { return d.cmd != nil && strings.Contains(p, "/sandboxes/premade-") }
	mountFiles := []string{"/proc/self/mountinfo"}
	if d.cmd != nil {
		mountFiles = append(mountFiles, filepath.Join("/proc", itoa(d.cmd.Process.Pid), "mountinfo"))
	}
	for _, mf := range mountFiles {
		f, err := os.Open(mf)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			mp := fields[4]
			if mp == filepath.Join(d.root, "overlay", "disks") {
				continue // the layer store's disk volume, not a sandbox's
			}
			if mp == filepath.Join(d.root, "volumes") {
				continue // the volume store's shared root, the daemon's
			}
			if (strings.HasPrefix(mp, d.root+"/") || strings.HasPrefix(mp, d.run+"/")) && !premade(mp) {
				found = append(found, "mount "+mp+" (in "+mf+")")
			}
		}
		f.Close()
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, l := range loops {
		b, err := os.ReadFile(l)
		back := strings.TrimSpace(string(b))
		if err == nil && strings.HasPrefix(back, d.root+"/") && back != filepath.Join(d.root, "overlay", "disks.img") {
			found = append(found, "loop device "+l+" -> "+back)
		}
	}
	cgDirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + d.cgroup + "/*")
	v2, _ := filepath.Glob("/sys/fs/cgroup/" + d.cgroup + "/*")
	for _, c := range append(cgDirs, v2...) {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			found = append(found, "cgroup "+c)
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "/"+d.cgroup+"/") {
			found = append(found, "process "+filepath.Dir(p))
		}
	}
	// Per-runtime sandbox dirs (<run>/<runtime>/sandboxes/<id>) and
	// writable layers (<root>/overlay/active/<id>).
	perBox, _ := filepath.Glob(filepath.Join(d.run, "*", "sandboxes", "*"))
	active, _ := filepath.Glob(filepath.Join(d.root, "overlay", "active", "*"))
	for _, f := range append(perBox, active...) {
		if !premade(f) {
			found = append(found, "file "+f)
		}
	}
	return found
}

// diskVolume is the mount point of the layer store's disk volume (an XFS
// file the daemon mounts when the store's file system cannot reflink): it
// belongs to the daemon, not to a sandbox, and is unmounted when the daemon
// stops with no sandbox left.
func (d *daemon) diskVolume() string { return filepath.Join(d.root, "overlay", "disks") }

// netState is the host's network namespaces (held by any process) and
// network links, to compare before and after.
type netState struct {
	netns map[string]bool
	links map[string]bool
}

func snapshotNet() netState {
	st := netState{netns: map[string]bool{}, links: map[string]bool{}}
	nss, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	for _, n := range nss {
		if l, err := os.Readlink(n); err == nil {
			st.netns[l] = true
		}
	}
	named, _ := filepath.Glob("/run/netns/*")
	for _, n := range named {
		st.netns["named:"+n] = true
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		st.links[l.Name()] = true
	}
	return st
}

// newSince lists network namespaces and links present now but not in base.
func (base netState) newSince() []string {
	var found []string
	now := snapshotNet()
	for n := range now.netns {
		if !base.netns[n] {
			found = append(found, "network namespace "+n)
		}
	}
	for l := range now.links {
		if !base.links[l] {
			found = append(found, "network link "+l)
		}
	}
	return found
}

// waitLeftoversGone waits up to timeout for what removed sandboxes leave
// while the kernel and the daemon finish (see leftovers) to go.
func (d *daemon) waitLeftoversGone(timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for len(d.leftovers()) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
}

// requireNoLeftovers fails the test when anything of a sandbox remains.
func (d *daemon) requireNoLeftovers() {
	d.t.Helper()
	l := append(d.leftovers(), d.net.newSince()...)
	if len(l) > 0 {
		d.t.Fatalf("left behind after removal:\n  %s", strings.Join(l, "\n  "))
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
