package bench

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/client"
)

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 10; i >= 1; i-- { // unsorted on purpose
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	r := summarize("x", s, nil)
	if r.Median != 6*time.Millisecond {
		t.Errorf("summarize median = %v; want 6ms", r.Median)
	}
	if r.P90 != 9*time.Millisecond {
		t.Errorf("summarize p90 = %v; want 9ms", r.P90)
	}
	if s[0] != 10*time.Millisecond {
		t.Errorf("summarize sorted its input in place")
	}
	if e := summarize("y", nil, os.ErrNotExist); e.Err == "" || e.Median != 0 {
		t.Errorf("summarize of an error = %+v; want the error and no median", e)
	}
}

func TestPatchSpec(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(p, []byte(`{"ociVersion":"1.0.2","process":{"terminal":true,"args":["sh"],"cwd":"/"},"root":{"path":"rootfs"}}`), 0o644)
	if err := patchSpec(p, "/abs/rootfs"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	var spec struct {
		Process struct {
			Terminal bool     `json:"terminal"`
			Args     []string `json:"args"`
			Cwd      string   `json:"cwd"`
		} `json:"process"`
		Root struct{ Path string } `json:"root"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Process.Terminal || len(spec.Process.Args) != 1 || spec.Process.Args[0] != "/bin/true" || spec.Process.Cwd != "/" || spec.Root.Path != "/abs/rootfs" {
		t.Errorf("patchSpec result = %s", b)
	}
	if err := patchSpec(filepath.Join(t.TempDir(), "missing.json"), "/r"); err == nil {
		t.Errorf("patchSpec of a missing file succeeded")
	}
}

func TestPrint(t *testing.T) {
	rep := &Report{
		Results: []Result{
			{Name: "corral create+exec+rm", Samples: make([]time.Duration, 3), Median: 12 * time.Millisecond},
			{Name: "corral exec round trip", Samples: make([]time.Duration, 3), Median: 900 * time.Microsecond},
			{Name: "crun run true", Samples: make([]time.Duration, 3), Median: 10 * time.Millisecond},
			{Name: "bwrap run true", Err: "bwrap not installed"},
		},
		Ratios: map[string]float64{"crun": 1.2},
	}
	var buf bytes.Buffer
	Print(&buf, rep)
	out := buf.String()
	for _, want := range []string{"corral lifecycle / crun run: 1.20x", "target cold create -> first exec -> rm <= 1.5x raw crun run: met (1.20x: 12 ms vs 10 ms)", "target exec round trip <= 0.3x raw crun run: met (0.09x: 0.9 ms vs 10 ms)", "error: bwrap not installed"} {
		if !strings.Contains(out, want) {
			t.Errorf("Print output lacks %q:\n%s", want, out)
		}
	}
}

func TestPatchSpecWithMemory(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(p, []byte(`{"process":{"terminal":true,"args":["sh"]},"linux":{"resources":{"devices":[{"allow":false,"access":"rwm"}]}}}`), 0o644)
	if err := patchSpecWith(p, "/r", []string{"/bin/sleep", "9"}, 32<<20); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	var spec struct {
		Process struct{ Args []string } `json:"process"`
		Linux   struct {
			Resources struct {
				Devices []any `json:"devices"`
				Memory  struct {
					Limit int64 `json:"limit"`
				} `json:"memory"`
			} `json:"resources"`
		} `json:"linux"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	if spec.Linux.Resources.Memory.Limit != 32<<20 || len(spec.Linux.Resources.Devices) != 1 || spec.Process.Args[0] != "/bin/sleep" {
		t.Errorf("patchSpecWith result = %s", b)
	}
}

func TestTarDir(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "bin"), 0o755)
	os.WriteFile(filepath.Join(root, "bin", "busybox"), []byte("binary"), 0o755)
	os.Symlink("busybox", filepath.Join(root, "bin", "sh"))
	dst := filepath.Join(t.TempDir(), "r.tar")
	if err := tarDir(root, dst); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body) + h.Linkname
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s owned by %d:%d; want root", h.Name, h.Uid, h.Gid)
		}
	}
	want := map[string]string{"bin/": "", "bin/busybox": "binary", "bin/sh": "busybox"}
	if len(got) != len(want) {
		t.Errorf("tarDir entries = %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("tarDir entry %q = %q; want %q", k, got[k], v)
		}
	}
	if err := tarDir(root, dst); err == nil {
		t.Errorf("tarDir over an existing file succeeded")
	}
}

// TestPrintForkFirst: the synced fork verdict is the ratio of the medians
// and shows the first forks after the write beside it.
func TestPrintForkFirst(t *testing.T) {
	rep := &Report{Results: []Result{
		{Group: GroupFork, Name: ForkName(1 << 20), N: 5, Median: 11 * time.Millisecond, First: 12 * time.Millisecond},
		{Group: GroupFork, Name: ForkName(1 << 30), N: 5, Median: 13 * time.Millisecond, First: 480 * time.Millisecond},
	}}
	var buf bytes.Buffer
	Print(&buf, rep)
	want := "target fork after 1 GiB written and synced <= 1.2x a fork after 1 MiB: met (1.18x: 13 ms vs 11 ms; the first fork after the write 480 ms vs 12 ms)"
	if out := buf.String(); !strings.Contains(out, want) {
		t.Errorf("Print output lacks %q:\n%s", want, out)
	}
	if got := summarize("s", []time.Duration{3, 1, 2}, nil); got.First != 3 || got.Median != 2 {
		t.Errorf("summarize(3, 1, 2) = first %v, median %v; want 3, 2", got.First, got.Median)
	}
}

func TestPrintSections(t *testing.T) {
	var buf bytes.Buffer
	Print(&buf, sampleReport())
	out := buf.String()
	for _, want := range []string{
		"machine: linux 6.1.0, 2 CPUs, 24.0 GiB RAM, cgroup hybrid",
		"crun run true", "2.67x", // lifecycle ratio column
		"error: podman not installed",
		"corral fork (1 GiB written)",
		"saved memory of a suspended idle sandbox: 5.00 MiB (median of 5)",
		"corral create+rm  4", "50.0/s", "0.50x", // corral 50/s vs crun 100/s with 4 clients
		"error: runc not installed",
		"3.00 MiB", "0.80 MiB", "99%", // density: per box, slab per box, memory back
		"target create+rm per second >= 1.0x raw crun run, 4 clients: NOT met (0.50x: 50.0/s vs 100.0/s)",
		"target fork after 1 GiB written and synced <= 1.2x a fork after 1 MiB: met (1.10x: 22 ms vs 20 ms; the first fork after the write 30 ms vs 21 ms)",
		"target create -> first exec done with a warm pool <= 0.3x raw crun run: met (0.27x: 4 ms vs 15 ms)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Print output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "target memory restore") {
		t.Errorf("Print output has a restore target for a failed resume series:\n%s", out)
	}
}

// TestPrintPoolTargets: the warm-pool lifecycle and create -> first exec
// and a resume are compared with raw crun.
func TestPrintPoolTargets(t *testing.T) {
	rep := &Report{Results: []Result{
		{Group: GroupLifecycle, Name: PeerName("crun"), N: 30, Median: 10 * time.Millisecond},
		{Group: GroupLifecycle, Name: NamePoolLifecycle, N: 30, Median: 9 * time.Millisecond},
		{Group: GroupLifecycle, Name: NamePoolExec, N: 30, Median: 1900 * time.Microsecond},
		{Group: GroupSuspend, Name: NameResume, N: 5, Median: 120 * time.Millisecond},
	}}
	var buf bytes.Buffer
	Print(&buf, rep)
	out := buf.String()
	for _, want := range []string{
		"target create -> first exec -> rm with a warm pool <= 1.5x raw crun run: met (0.90x: 9 ms vs 10 ms)",
		"target create -> first exec done with a warm pool <= 0.3x raw crun run: met (0.19x: 1.9 ms vs 10 ms)",
		"target memory restore (resume of a suspended idle box) <= 5x raw crun run: NOT met (12.00x: 120 ms vs 10 ms)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Print output lacks %q:\n%s", want, out)
		}
	}
}

func TestMs(t *testing.T) {
	for d, want := range map[time.Duration]string{
		900 * time.Microsecond:     "0.9 ms",
		976 * time.Microsecond:     "0.976 ms",
		2773 * time.Microsecond:    "2.77 ms",
		61340 * time.Microsecond:   "61.3 ms",
		141325 * time.Microsecond:  "141 ms",
		1019885 * time.Microsecond: "1020 ms",
		40 * time.Millisecond:      "40 ms",
		0:                          "0 ms",
	} {
		if got := ms(d); got != want {
			t.Errorf("ms(%s) = %q; want %q", d, got, want)
		}
	}
}

func TestRunValidates(t *testing.T) {
	if _, err := Run(t.Context(), Config{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Run without a client = %v; want invalid argument", err)
	}
	c, err := client.New(client.WithHost("unix:///nonexistent/corral.sock"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(t.Context(), Config{Client: c, Sections: []string{"lifecycle", "speed"}})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), `"speed"`) {
		t.Errorf("Run with an unknown section = %v; want invalid argument naming it", err)
	}
}

func TestRemoveCgroups(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"memory/x/conmon", "memory/x/libpod-1", "cpu/x", "x/conmon", "memory/y", "pids/busy/x-not"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A cgroup that cannot go (here: not empty) stays, its parent too.
	os.MkdirAll(filepath.Join(root, "pids/x/held"), 0o755)
	os.WriteFile(filepath.Join(root, "pids/x/held/tasks"), []byte("1"), 0o644)
	removeCgroups(root, "x")
	for _, gone := range []string{"memory/x", "cpu/x", "x"} {
		if _, err := os.Stat(filepath.Join(root, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{"memory/y", "pids/busy/x-not", "pids/x/held"} {
		if _, err := os.Stat(filepath.Join(root, kept)); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
}
