//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSlimAgent checks that boxes run the slim agent embedded by
// scripts/build.sh, installed in the daemon's root, and not the whole
// corral binary; and that a daemon restart reuses the installed file and
// removes agents no box refers to.
func TestSlimAgent(t *testing.T) {
	d := startDaemon(t)
	installed, err := filepath.Glob(filepath.Join(d.root, "agent", "corral-agent-*"))
	if err != nil || len(installed) != 1 {
		t.Fatalf("installed agents in %s/agent: %v, %v; want one", d.root, installed, err)
	}
	st, err := os.Stat(installed[0])
	if err != nil {
		t.Fatal(err)
	}
	whole, err := os.Stat(corralBin)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() >= whole.Size()/2 {
		t.Errorf("slim agent is %d bytes, corral %d: not slim", st.Size(), whole.Size())
	}

	id := d.create()
	out := d.must("exec", id, "--", "sh", "-c", "wc -c < /.corral/corral; tr '\\0' ' ' < /proc/1/cmdline")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("unexpected output %q", out)
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(lines[0]), 10, 64); err != nil || n != st.Size() {
		t.Errorf("the box's agent binary has %q bytes, the installed slim agent %d", lines[0], st.Size())
	}
	if !strings.HasPrefix(lines[1], "/.corral/corral agent --listen-fd 3") {
		t.Errorf("PID 1 is %q, want the agent", lines[1])
	}

	// An agent of an earlier build that no box refers to is removed at the
	// next start; the one the running box uses stays.
	stale := filepath.Join(d.root, "agent", "corral-agent-0000000000000000")
	if err := os.WriteFile(stale, []byte("old build"), 0o555); err != nil {
		t.Fatal(err)
	}
	d.stop()
	d.start()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale agent %s: %v; want it removed", stale, err)
	}
	again, _ := filepath.Glob(filepath.Join(d.root, "agent", "corral-agent-*"))
	st2, err := os.Stat(installed[0])
	if len(again) != 1 || err != nil || !os.SameFile(st, st2) {
		t.Errorf("after a restart: %v (%v); want the same single file", again, err)
	}
	if got := strings.TrimSpace(d.must("exec", id, "--", "echo", "alive")); got != "alive" {
		t.Errorf("exec after restart: %q", got)
	}
}
