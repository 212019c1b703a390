package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, v := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRead(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		mode  Mode
		want  Stats
	}{
		{
			name: "v1",
			mode: Legacy,
			files: map[string]string{
				"memory/corral/sb/memory.usage_in_bytes":     "1000\n",
				"memory/corral/sb/memory.max_usage_in_bytes": "2000\n",
				"memory/corral/sb/memory.limit_in_bytes":     "4096\n",
				"memory/corral/sb/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
				"memory/corral/sb/memory.stat":               "cache 1\ninactive_file 2\ntotal_cache 600\ntotal_inactive_file 400\n",
				"cpuacct/corral/sb/cpuacct.usage":            "123456789\n",
				"pids/corral/sb/pids.current":                "7\n",
				"pids/corral/sb/pids.max":                    "64\n",
				"unified/corral/sb/cgroup.procs":             "",
			},
			want: Stats{CPUNanos: 123456789, MemoryBytes: 1000, MemoryPeakBytes: 2000, MemoryLimitBytes: 4096, Pids: 7, PidsLimit: 64, OOMKills: 3,
				CacheBytes: 600, InactiveFileBytes: 400},
		},
		{
			name: "v1 unlimited without pids or cpuacct",
			mode: Legacy,
			files: map[string]string{
				"memory/corral/sb/memory.usage_in_bytes":     "10\n",
				"memory/corral/sb/memory.max_usage_in_bytes": "20\n",
				"memory/corral/sb/memory.limit_in_bytes":     "9223372036854771712\n",
				"memory/corral/sb/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\n",
			},
			want: Stats{MemoryBytes: 10, MemoryPeakBytes: 20},
		},
		{
			name: "v2",
			mode: Unified,
			files: map[string]string{
				"cgroup.controllers":         "cpu memory pids\n",
				"corral/sb/memory.current":   "5000\n",
				"corral/sb/memory.peak":      "6000\n",
				"corral/sb/memory.max":       "max\n",
				"corral/sb/memory.events":    "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\noom_group_kill 0\n",
				"corral/sb/cpu.stat":         "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
				"corral/sb/memory.stat":      "anon 100\nfile 700\nactive_file 200\ninactive_file 500\n",
				"corral/sb/pids.current":     "3\n",
				"corral/sb/pids.max":         "max\n",
				"corral/sb/cgroup.procs":     "",
				"corral/other/memory.events": "",
			},
			want: Stats{CPUNanos: 1500000, MemoryBytes: 5000, MemoryPeakBytes: 6000, Pids: 3, OOMKills: 1, CacheBytes: 700, InactiveFileBytes: 500},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			if m := DetectMode(root); m != tc.mode {
				t.Errorf("DetectMode(%q) = %v; want %v", root, m, tc.mode)
			}
			got, err := Read(root, "/corral/sb")
			if err != nil {
				t.Fatalf("Read(%q) error: %v", "/corral/sb", err)
			}
			if got != tc.want {
				t.Errorf("Read(%q) = %+v; want %+v", "/corral/sb", got, tc.want)
			}
		})
	}
}

func TestWorkingSet(t *testing.T) {
	for _, tc := range []struct {
		s    Stats
		want uint64
	}{
		{Stats{MemoryBytes: 1000, InactiveFileBytes: 400}, 600},
		{Stats{MemoryBytes: 100, InactiveFileBytes: 400}, 0}, // read at different moments
	} {
		if got := tc.s.WorkingSet(); got != tc.want {
			t.Errorf("%+v.WorkingSet() = %d; want %d", tc.s, got, tc.want)
		}
	}
}

func TestReadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
	}{
		{"v1 missing memory", map[string]string{"pids/corral/sb/pids.current": "1"}},
		{"v1 garbage", map[string]string{
			"memory/corral/sb/memory.usage_in_bytes":     "lots\n",
			"memory/corral/sb/memory.max_usage_in_bytes": "1\n",
			"memory/corral/sb/memory.limit_in_bytes":     "1\n",
		}},
		{"v2 missing cpu.stat", map[string]string{
			"cgroup.controllers":       "",
			"corral/sb/memory.current": "1",
			"corral/sb/memory.max":     "1",
			"corral/sb/memory.events":  "oom_kill 0",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			if got, err := Read(root, "/corral/sb"); err == nil {
				t.Errorf("Read(%q) = %+v, nil; want an error", "/corral/sb", got)
			}
		})
	}
}

func TestDirsAndRemove(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"memory/corral/sb/child", "pids/corral/sb", "cpu,cpuacct/corral/sb", "unified/corral/sb", "memory/corral/other"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("cpu,cpuacct", filepath.Join(root, "cpuacct")); err != nil {
		t.Fatal(err)
	}
	dirs, err := Dirs(root, "/corral/sb")
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) != 4 {
		t.Errorf("Dirs(%q) = %q; want 4 directories", "/corral/sb", dirs)
	}
	if err := Remove(root, "/corral/sb"); err != nil {
		t.Fatalf("Remove(%q) = %v; want nil", "/corral/sb", err)
	}
	if dirs, _ := Dirs(root, "/corral/sb"); len(dirs) != 0 {
		t.Errorf("Dirs(%q) after Remove = %q; want none", "/corral/sb", dirs)
	}
	if _, err := os.Stat(filepath.Join(root, "memory/corral/other")); err != nil {
		t.Errorf("Remove(%q) removed a sibling: %v", "/corral/sb", err)
	}
	if err := Remove(root, "/corral/sb"); err != nil {
		t.Errorf("Remove(%q) again = %v; want nil", "/corral/sb", err)
	}
}

func TestSwapAccounting(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"v1 memsw", map[string]string{"memory/memory.memsw.limit_in_bytes": "1"}, true},
		{"v1 no memsw", map[string]string{"memory/memory.limit_in_bytes": "1"}, false},
		{"v2 swap", map[string]string{"cgroup.controllers": "memory", "cgroup.subtree_control": "memory", "a/memory.swap.max": "max"}, true},
		{"v2 no swap", map[string]string{"cgroup.controllers": "memory", "cgroup.subtree_control": "memory", "a/memory.max": "max"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			writeFiles(t, root, tc.files)
			if got := SwapAccounting(root); got != tc.want {
				t.Errorf("SwapAccounting(%q) = %v; want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestDropChargesV1(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "memory", "corral", "box")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	fe := filepath.Join(dir, "memory.force_empty")
	os.WriteFile(fe, nil, 0o644)
	if err := DropCharges(root, "/corral/box"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(fe); string(b) != "0" {
		t.Errorf("memory.force_empty = %q; want 0 written", b)
	}
	// No memory hierarchy, or the cgroup is gone: nothing to do.
	if err := DropCharges(root, "/corral/gone"); err != nil {
		t.Errorf("DropCharges of a missing cgroup = %v; want nil", err)
	}
}

func TestDropChargesV2(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644)
	dir := filepath.Join(root, "corral", "box")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "memory.current"), []byte("2052096\n"), 0o644)
	rec := filepath.Join(dir, "memory.reclaim")
	os.WriteFile(rec, nil, 0o644)
	if err := DropCharges(root, "/corral/box"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(rec); string(b) != "2052096" {
		t.Errorf("memory.reclaim = %q; want memory.current written", b)
	}
	// Nothing charged: no reclaim asked.
	os.WriteFile(filepath.Join(dir, "memory.current"), []byte("0\n"), 0o644)
	os.WriteFile(rec, nil, 0o644)
	if err := DropCharges(root, "/corral/box"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(rec); len(b) != 0 {
		t.Errorf("memory.reclaim = %q with nothing charged; want nothing written", b)
	}
	if err := DropCharges(root, "/corral/gone"); err != nil {
		t.Errorf("DropCharges of a missing cgroup = %v; want nil", err)
	}
}
