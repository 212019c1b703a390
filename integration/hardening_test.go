//go:build integration

package integration

import (
	"debug/elf"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// agentPid returns the host PID of the sandbox's PID 1 (its agent): the
// process of its cgroup whose innermost PID namespace number is 1.
func (d *daemon) agentPid(id string) int {
	d.t.Helper()
	for _, p := range d.cgroupPids(id) {
		nspid := strings.Fields(field(readFile(filepath.Join("/proc", itoa(p), "status")), "NSpid:"))
		if len(nspid) >= 2 && nspid[len(nspid)-1] == "1" {
			return p
		}
	}
	d.t.Fatalf("no process of sandbox %s is PID 1 of a PID namespace (cgroup pids %v)", id, d.cgroupPids(id))
	return 0
}

// TestNamespaces checks that a sandbox's PID 1 has its own IPC, UTS, mount,
// PID, network and cgroup namespaces (not the test's, not the daemon's, not
// another sandbox's), and that the box's hostname and System V IPC objects
// are its own.
func TestNamespaces(t *testing.T) {
	d := startDaemon(t)
	a := d.create("--image", "busybox")
	b := d.create("--image", "busybox")
	pa, pb := d.agentPid(a), d.agentPid(b)
	d.must("exec", "--detach", a, "--", "sleep", "1000")
	if n := len(d.cgroupPids(a)); n < 2 {
		t.Fatalf("sandbox %s has %d processes after exec --detach sleep; want at least 2", a, n)
	}
	daemonPid := d.cmd.Process.Pid

	kinds := []string{"ipc", "uts", "mnt", "pid", "net", "cgroup"}
	ns := func(pid, kind string) string {
		l, err := os.Readlink(filepath.Join("/proc", pid, "ns", kind))
		if err != nil {
			t.Fatalf("readlink /proc/%s/ns/%s: %v", pid, kind, err)
		}
		return l
	}
	for _, kind := range kinds {
		boxNS := ns(itoa(pa), kind)
		if self := ns("self", kind); boxNS == self {
			t.Errorf("sandbox %s (host pid %d) shares the test process's %s namespace %s", a, pa, kind, self)
		}
		if dm := ns(itoa(daemonPid), kind); boxNS == dm {
			t.Errorf("sandbox %s (host pid %d) shares the daemon's %s namespace %s", a, pa, kind, dm)
		}
		if other := ns(itoa(pb), kind); boxNS == other {
			t.Errorf("sandboxes %s and %s share the %s namespace %s", a, b, kind, other)
		}
		// A process started by exec joins the box's namespaces, not the
		// host's.
		for _, p := range d.cgroupPids(a) {
			if l, err := os.Readlink(filepath.Join("/proc", itoa(p), "ns", kind)); err == nil && l != boxNS {
				t.Errorf("process %d of sandbox %s is in %s namespace %s; its PID 1 is in %s", p, a, kind, l, boxNS)
			}
		}
	}

	// The hostname inside is not the host's, and each box has its own.
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	ha := strings.TrimSpace(d.must("exec", a, "--", "hostname"))
	hb := strings.TrimSpace(d.must("exec", b, "--", "hostname"))
	if ha == "" || ha == host {
		t.Errorf("hostname inside sandbox %s = %q; want a non-empty name that is not the host's %q", a, ha, host)
	}
	if ha == hb {
		t.Errorf("sandboxes %s and %s have the same hostname %q", a, b, ha)
	}
	if k := strings.TrimSpace(d.must("exec", a, "--", "cat", "/proc/sys/kernel/hostname")); k != ha {
		t.Errorf("/proc/sys/kernel/hostname inside = %q; hostname says %q", k, ha)
	}
	// The box cannot rename itself (and so cannot rename the host).
	if _, _, err := d.corral("exec", a, "--", "hostname", "renamed-by-box"); err == nil {
		t.Errorf("hostname renamed-by-box inside the sandbox succeeded")
	}
	if now, _ := os.Hostname(); now != host {
		t.Fatalf("host's hostname changed from %q to %q while a sandbox ran", host, now)
	}

	// A System V shared memory segment of the host is invisible inside.
	const key = 0x43524c31 // "CRL1"
	shm, err := unix.SysvShmGet(key, 4096, unix.IPC_CREAT|unix.IPC_EXCL|0o600)
	if err != nil {
		t.Fatalf("shmget on the host: %v", err)
	}
	t.Cleanup(func() { _, _ = unix.SysvShmCtl(shm, unix.IPC_RMID, nil) })
	keyStr := strconv.Itoa(key)
	if !containsField(readFile("/proc/sysvipc/shm"), keyStr) {
		t.Fatalf("host's /proc/sysvipc/shm does not list key %s it just made", keyStr)
	}
	inside := d.must("exec", a, "--", "cat", "/proc/sysvipc/shm")
	if containsField(inside, keyStr) {
		t.Errorf("sandbox sees the host's System V shared memory segment (key %s):\n%s", keyStr, inside)
	}
}

// containsField reports whether any whitespace-separated field of text is f.
func containsField(text, f string) bool {
	for _, x := range strings.Fields(text) {
		if x == f {
			return true
		}
	}
	return false
}

// TestSocketMode checks that the API's unix socket is a socket with mode
// exactly 0660 (it has no authentication: only root and the socket's group
// may talk to it), also after a crash left the old socket file behind.
func TestSocketMode(t *testing.T) {
	d := startDaemon(t)
	check := func(when string) {
		t.Helper()
		fi, err := os.Lstat(d.socket)
		if err != nil {
			t.Fatalf("%s: stat socket: %v", when, err)
		}
		if fi.Mode().Type() != fs.ModeSocket {
			t.Errorf("%s: %s has type %v; want a socket", when, d.socket, fi.Mode().Type())
		}
		if perm := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); perm != 0o660 {
			t.Errorf("%s: socket %s mode = %#o (%v); want exactly 0660", when, d.socket, uint32(perm), fi.Mode())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != uint32(os.Geteuid()) {
			t.Errorf("%s: socket owned by uid %d; want the daemon's %d", when, st.Uid, os.Geteuid())
		}
	}
	check("fresh daemon")
	d.kill()
	if _, err := os.Lstat(d.socket); err == nil {
		// A permissive umask must not leak into the replaced socket.
		old := unix.Umask(0)
		d.start()
		unix.Umask(old)
	} else {
		d.start()
	}
	check("daemon restarted after SIGKILL")
}

// TestBinaryIsStatic checks that the corral binary has no ELF interpreter
// and needs no shared library, so it runs on any Linux host (and inside a
// box) without a matching libc.
func TestBinaryIsStatic(t *testing.T) {
	f, err := elf.Open(corralBin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			_, _ = p.ReadAt(b, 0)
			t.Errorf("%s has a PT_INTERP program header (%q); want a static binary", corralBin, strings.TrimRight(string(b), "\x00"))
		}
		if p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a PT_DYNAMIC program header; want a static binary", corralBin)
		}
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatalf("read DT_NEEDED of %s: %v", corralBin, err)
	}
	if len(libs) != 0 {
		t.Errorf("%s needs shared libraries %v (DT_NEEDED); want none", corralBin, libs)
	}
	if syms, err := f.ImportedSymbols(); err == nil && len(syms) != 0 {
		t.Errorf("%s imports %d dynamic symbols (first %v); want none", corralBin, len(syms), syms[0])
	}
}
