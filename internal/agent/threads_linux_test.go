package agent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReserveThreads(t *testing.T) {
	before := threadCount()
	target := before + 6
	got := reserveThreads(target)
	if got < target {
		t.Fatalf("reserveThreads(%d) left %d threads (had %d)", target, got, before)
	}
	// Only the missing threads are made: the ones already there count.
	// (The runtime may start one or two of its own meanwhile.)
	if got > target+2 {
		t.Errorf("reserveThreads(%d) left %d threads (had %d): it made more than the missing ones", target, got, before)
	}
	// The threads stay: a second call creates none. (The runtime may
	// again start one of its own meanwhile: seen once under the race
	// detector, 18 after 17.)
	if again := reserveThreads(target); again < got || again > got+1 {
		t.Errorf("second reserveThreads(%d) = %d; want %d (no new threads; one of the runtime's own at most)", target, again, got)
	}
}

func TestThreadTarget(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                int
	}{
		{"v2 max", "pids.max", "max\n", agentThreads},
		{"v2 small", "pids.max", "18\n", 6},
		{"v1 large", "pids/pids.max", "1024\n", agentThreads},
		{"v1 small", "pids/pids.max", "12\n", 4},
		{"no pids controller", "memory.max", "1\n", agentThreads},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			f := filepath.Join(root, tc.file)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := threadTarget(root); got != tc.want {
				t.Errorf("threadTarget = %d; want %d", got, tc.want)
			}
		})
	}
}
