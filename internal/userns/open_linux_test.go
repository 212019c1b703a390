package userns

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/osthread"
)

// ownerOf is the host uid that owns the user namespace of h.
func ownerOf(t *testing.T, h *Holder) uint32 {
	t.Helper()
	f, err := os.Open(h.NSPath("user"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	uid, err := unix.IoctlGetUint32(int(f.Fd()), unix.NS_GET_OWNER_UID)
	if err != nil {
		t.Fatalf("NS_GET_OWNER_UID: %v", err)
	}
	return uid
}

// TestHoldOwner checks that a box's user namespace is made by the box's
// base host uid, so that the kernel charges its per-user limits (inotify
// instances) to that uid rather than to host root, and that Hold falls
// back to root when that uid may not run the daemon's binary.
func TestHoldOwner(t *testing.T) {
	if os.Getenv("CORRAL_TEST_PRIVILEGED") != "1" || os.Geteuid() != 0 {
		t.Skip("needs root and CORRAL_TEST_PRIVILEGED=1")
	}
	r := Range{HostID: 1<<31 + 7*Size, Size: Size}
	h, err := Hold(r, unix.CLONE_NEWNET)
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(h.NSPath("user"))), "uid_map"))
	owner := ownerOf(t, h)
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if owner != r.HostID {
		t.Errorf("user namespace owned by host uid %d, want %d (the box's base uid)", owner, r.HostID)
	}
	if want := []string{"0", fmt.Sprint(r.HostID), fmt.Sprint(r.Size)}; err != nil || !slices.Equal(strings.Fields(string(m)), want) {
		t.Errorf("uid_map %q (%v), want %q", m, err, want)
	}

	// A binary only root may run: the box's uid cannot start the owner.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(exe, 0o700); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(exe, st.Mode().Perm())
	h, err = Hold(r, unix.CLONE_NEWNET)
	if err != nil {
		t.Fatalf("Hold with a binary only root may run: %v", err)
	}
	owner = ownerOf(t, h)
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if owner != 0 {
		t.Errorf("fallback user namespace owned by host uid %d, want 0", owner)
	}
}

// TestHoldOutlivesItsThread checks that a holder does not die with the OS
// thread that started it. Go ends a thread whose goroutine exits while
// locked to it (osthread.Throwaway, a failed return from a namespace),
// and any goroutine may have started a holder on that thread before: with
// a parent-death signal tied to the thread, concurrent creates failed with
// "holder: signal: killed".
func TestHoldOutlivesItsThread(t *testing.T) {
	if os.Getenv("CORRAL_TEST_PRIVILEGED") != "1" || os.Geteuid() != 0 {
		t.Skip("needs root and CORRAL_TEST_PRIVILEGED=1")
	}
	r := Range{HostID: 1<<31 + 9*Size, Size: Size}
	type started struct {
		h   *Holder
		tid int
		err error
	}
	ch := make(chan started, 1)
	osthread.Throwaway(func() { // the thread ends with this function
		h, err := Hold(r, unix.CLONE_NEWNET)
		ch <- started{h, unix.Gettid(), err}
	})
	s := <-ch
	if s.err != nil {
		t.Fatal(s.err)
	}
	task := fmt.Sprintf("/proc/self/task/%d", s.tid)
	for i := 0; ; i++ {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if i == 1000 {
			t.Fatalf("thread %d did not end", s.tid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The holder must still hold its namespaces after the thread ended.
	f, err := os.Open(s.h.NSPath("net"))
	if err != nil {
		t.Errorf("the holder's network namespace is gone after its starting thread ended: %v", err)
	} else {
		f.Close()
	}
	if err := s.h.Release(); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// useHelper makes Hold run the box init built from cmd/corral-init, as a
// build by scripts/build.sh does, until the test ends.
func useHelper(t *testing.T) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("needs gcc (scripts/deps.sh) to build cmd/corral-init")
	}
	bin := filepath.Join(t.TempDir(), "corral-init")
	out, err := exec.Command(gcc, "-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-o", bin, "../../cmd/corral-init/init.c").CombinedOutput()
	if err != nil {
		t.Fatalf("build cmd/corral-init: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	setHelper(t, b)
}

// setHelper makes Hold load the box init bin, until the test ends.
func setHelper(t *testing.T, bin []byte) {
	reset := func(bin func() []byte) {
		helper.Lock()
		helper.loaded, helper.f = false, nil
		helper.Unlock()
		helperBin = bin
	}
	old := helperBin
	reset(func() []byte { return bin })
	t.Cleanup(func() { reset(old) })
}

// TestHoldHelper checks that, with the box init embedded, one process of
// it makes and holds a box's namespaces instead of two starts of the
// daemon's binary, and that they are the same: owned by the box's base
// uid, with the box's mapping, setgroups allowed, a network namespace of
// their own.
func TestHoldHelper(t *testing.T) {
	if os.Getenv("CORRAL_TEST_PRIVILEGED") != "1" || os.Geteuid() != 0 {
		t.Skip("needs root and CORRAL_TEST_PRIVILEGED=1")
	}
	useHelper(t)
	r := Range{HostID: 1<<31 + 11*Size, Size: Size}
	h, err := Hold(r, unix.CLONE_NEWNET)
	if err != nil {
		t.Fatal(err)
	}
	proc := fmt.Sprintf("/proc/%d/", h.pid)
	exe, _ := os.Readlink(proc + "exe")
	direct := h.pid == h.cmd.Process.Pid
	var maps []string
	for _, f := range []string{"uid_map", "gid_map", "setgroups"} {
		b, err := os.ReadFile(proc + f)
		if err != nil {
			t.Error(err)
		}
		maps = append(maps, strings.Join(strings.Fields(string(b)), " "))
	}
	owner := ownerOf(t, h)
	netns, err := os.Readlink(h.NSPath("net"))
	if err != nil {
		t.Error(err)
	}
	self, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Error(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if !direct || !strings.Contains(exe, "corral-userns") {
		t.Errorf("holder pid %d is %q, started pid %d: want the daemon's child to be the holder, run from the corral-init memfd", h.pid, exe, h.cmd.Process.Pid)
	}
	if owner != r.HostID {
		t.Errorf("user namespace owned by host uid %d, want %d (the box's base uid)", owner, r.HostID)
	}
	m := fmt.Sprintf("0 %d %d", r.HostID, r.Size)
	if want := []string{m, m, "allow"}; !slices.Equal(maps, want) {
		t.Errorf("uid_map, gid_map, setgroups %q, want %q", maps, want)
	}
	if netns == self {
		t.Errorf("the holder is in the daemon's network namespace %s", self)
	}
}

// TestHoldHelperFails checks that a box init that cannot run (here, not a
// program at all) does not fail Hold: the daemon's binary makes the
// namespaces, owned by the box's uid still, and Hold stops trying it.
func TestHoldHelperFails(t *testing.T) {
	if os.Getenv("CORRAL_TEST_PRIVILEGED") != "1" || os.Geteuid() != 0 {
		t.Skip("needs root and CORRAL_TEST_PRIVILEGED=1")
	}
	setHelper(t, []byte("#!/nonexistent/interpreter\n"))
	r := Range{HostID: 1<<31 + 12*Size, Size: Size}
	for i := 0; i < 2; i++ {
		h, err := Hold(r, unix.CLONE_NEWNET)
		if err != nil {
			t.Fatalf("Hold %d with a box init that cannot run: %v", i, err)
		}
		owner := ownerOf(t, h)
		if err := h.Release(); err != nil {
			t.Fatal(err)
		}
		if owner != r.HostID {
			t.Errorf("Hold %d: user namespace owned by host uid %d, want %d", i, owner, r.HostID)
		}
	}
	helper.Lock()
	f := helper.f
	helper.Unlock()
	if f != nil {
		t.Errorf("Hold still uses a box init that failed where the daemon's binary did not")
	}
}
