package agentclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/testutil"
)

const netnsHelperEnv = "CORRAL_AGENTCLIENT_NETNS_HELPER"

// TestDialAbstractInNetNS serves /health on an abstract socket inside a
// child's own network namespace and reaches it with a unix-abstract://
// address naming /proc/<pid>/ns/net; the same name is not reachable from
// this process's namespace.
func TestDialAbstractInNetNS(t *testing.T) {
	if name := os.Getenv(netnsHelperEnv); name != "" {
		serveHealth(name)
		return
	}
	testutil.RequiresRoot(t)
	name := fmt.Sprintf("corral-test-%d", os.Getpid())
	cmd := exec.Command(os.Args[0], "-test.run=^TestDialAbstractInNetNS$")
	cmd.Env = append(os.Environ(), netnsHelperEnv+"="+name)
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWNET, Pdeathsig: unix.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if l, _ := bufio.NewReader(out).ReadString('\n'); l != "listening\n" {
		t.Fatalf("helper said %q; want listening", l)
	}

	addr := UnixAbstractAddr(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), name)
	c, err := New(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := c.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady(%q) = %v", addr, err)
	}
	if _, err := net.Dial("unix", "@"+name); err == nil {
		t.Errorf("dial @%s from the host's network namespace succeeded; want it only in the child's", name)
	}
	// The dialing thread went back to this process's namespace.
	self, _ := os.Readlink("/proc/thread-self/ns/net")
	proc, _ := os.Readlink("/proc/self/ns/net")
	if self != proc {
		t.Errorf("thread namespace %s != process namespace %s after dialing", self, proc)
	}

	for _, tc := range []struct {
		addr string
		want error
	}{
		{UnixAbstractAddr("/nonexistent/netns", name), errdefs.ErrNotFound},
		{UnixAbstractAddr("/etc/hostname", name), errdefs.ErrNotFound}, // not a namespace
	} {
		if _, err := Dial(ctx, tc.addr); !errors.Is(err, tc.want) {
			t.Errorf("Dial(%q) = %v; want %v", tc.addr, err, tc.want)
		}
	}
}

// serveHealth is the helper of TestDialAbstractInNetNS: in its own network
// namespace, it answers 204 to GET /health over h2c on "@name".
func serveHealth(name string) {
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		fmt.Println("listen:", err)
		os.Exit(1)
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	srv := &http.Server{Protocols: &protos, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})}
	fmt.Println("listening")
	_ = srv.Serve(ln)
	os.Exit(0)
}
