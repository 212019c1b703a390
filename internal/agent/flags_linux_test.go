package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/testutil"
)

func TestMainArguments(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"agent"}, 2, "one of --listen-fd and --listen is required"},
		{nil, 2, "one of --listen-fd and --listen is required"},
		{[]string{"agent", "--listen-fd", "3", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--no-such-flag"}, 2, "flag provided but not defined: -no-such-flag"},
		{[]string{"agent", "--help"}, 0, "-listen-fd"},
		{[]string{"agent", "--listen-fd", "3", "--idle-exit", "30s"}, 2, "--idle-exit and --warm need --under-init"},
		{[]string{"agent", "--listen-fd", "3", "--warm"}, 2, "--idle-exit and --warm need --under-init"},
		{[]string{"agent", "--listen-fd", "3", "--under-init", "--idle-exit", "-1s"}, 2, "--idle-exit must not be negative"},
		{[]string{"agent", "--listen-fd", "3", "--pids-max", "-1"}, 2, "--pids-max must not be negative"},
	} {
		var stderr bytes.Buffer
		code := Main(context.Background(), tc.args, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("Main(%q) = %d, %q; want %d and %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
}

// TestMainServes runs the slim binary's entry point as the runtime would
// start it, on a socket path instead of fd 3, and stops it by its context.
func TestMainServes(t *testing.T) {
	dir, err := os.MkdirTemp("", "agent-main")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a.sock")
	ctx, cancel := context.WithCancel(context.WithoutCancel(testutil.Context(t)))
	stderr := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"agent", "--listen", "unix://" + sock, "--workdir", "/tmp"}, stderr)
	}()

	c, err := agentclient.New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if err := c.WaitReady(rctx); err != nil {
		t.Fatalf("agent did not become ready: %v (stderr %q)", err, stderr.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit code %d after its context ended, stderr %q", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Main did not return after its context ended")
	}
}

// lockedBuffer is a bytes.Buffer that Main may write while the test reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
