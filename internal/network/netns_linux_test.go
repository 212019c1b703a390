package network

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"
)

// boxNetNS starts a process in a new network namespace (like a box's
// agent) and returns its namespace path.
func boxNetNS(t *testing.T) string { return boxNetNSB(t) }

// boxNetNSB is boxNetNS for tests and benchmarks.
func boxNetNSB(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	cmd := exec.Command("unshare", "--net", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skipf("unshare --net: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Wait until the child has unshared.
	self, _ := os.Readlink("/proc/self/ns/net")
	for i := 0; i < 200; i++ {
		if ns, err := os.Readlink(NSPath(cmd.Process.Pid)); err == nil && ns != self {
			return NSPath(cmd.Process.Pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("child never entered a new network namespace")
	return ""
}

func TestWireRedirectsTCP(t *testing.T) {
	ns := boxNetNS(t)
	box := BoxAddr("test")
	ls, err := wire(ns, box)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	got := make(chan netip.AddrPort, 1)
	go func() {
		c, err := ls.proxy.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		dst, err := originalDst(c)
		if err != nil {
			t.Error(err)
		}
		got <- dst
	}()
	c, err := DialInNS(ns, "tcp4", "203.0.113.9:443")
	if err != nil {
		t.Fatalf("dial from the box: %v", err)
	}
	c.Close()
	select {
	case dst := <-got:
		if dst.String() != "203.0.113.9:443" {
			t.Errorf("original destination = %s", dst)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy listener got nothing")
	}
	// Idempotent: a restarted daemon wires the namespace again.
	ls.Close()
	ls2, err := wire(ns, box)
	if err != nil {
		t.Fatalf("wire again: %v", err)
	}
	ls2.Close()
	// IPv6 leaves nothing: no route.
	if c, err := DialInNS(ns, "tcp6", "[2001:db8::1]:443"); err == nil {
		c.Close()
		t.Error("IPv6 connection from the box succeeded")
	}
}

// nsPid is the pid whose namespace ns is.
func nsPid(ns string) int {
	var pid int
	fmt.Sscanf(ns, "/proc/%d/ns/net", &pid)
	return pid
}
