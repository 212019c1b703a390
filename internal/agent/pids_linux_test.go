package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetPidsMax: --pids-max writes the limit to the v1 pids cgroup at
// the cgroup root (gVisor's own, in a gvisor box) and fails naming the
// flag when it cannot; 0 leaves the cgroup alone.
func TestSetPidsMax(t *testing.T) {
	root := t.TempDir()
	f := filepath.Join(root, "pids", "pids.max")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("max\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := setPidsMax(root, 0); err != nil {
		t.Fatalf("setPidsMax(0) = %v; want nil", err)
	}
	if b, _ := os.ReadFile(f); string(b) != "max\n" {
		t.Errorf("pids.max after setPidsMax(0) = %q; want it untouched", b)
	}
	if err := setPidsMax(root, 12); err != nil {
		t.Fatalf("setPidsMax(12) = %v", err)
	}
	if b, _ := os.ReadFile(f); string(b) != "12" {
		t.Errorf("pids.max after setPidsMax(12) = %q; want 12", b)
	}
	// The agent then reserves threads within the new limit.
	if got := threadTarget(root); got != 12/agentPidsShare {
		t.Errorf("threadTarget after setPidsMax(12) = %d; want %d", got, 12/agentPidsShare)
	}
	if err := setPidsMax(filepath.Join(root, "missing"), 40); err == nil || !strings.Contains(err.Error(), "--pids-max 40") {
		t.Errorf("setPidsMax without a pids cgroup = %v; want an error naming --pids-max", err)
	}
}
