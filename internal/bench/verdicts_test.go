package bench

import (
	"strings"
	"testing"
	"time"
)

// fullReport has every series issue 27's verdicts compare, each within its
// bound (crun run true: 10 ms).
func fullReport() *Report {
	return &Report{
		Results: []Result{
			{Group: GroupLifecycle, Name: NameLifecycle, N: 30, Median: 15 * time.Millisecond},
			{Group: GroupLifecycle, Name: NamePoolLifecycle, N: 30, Median: 8 * time.Millisecond},
			{Group: GroupLifecycle, Name: NamePoolExec, N: 30, Median: 3 * time.Millisecond},
			{Group: GroupExec, Name: NameExec, N: 300, Median: 2 * time.Millisecond},
			{Group: GroupLifecycle, Name: PeerName("crun"), N: 30, Median: 10 * time.Millisecond},
			{Group: GroupFork, Name: ForkName(1 << 20), N: 5, Median: 20 * time.Millisecond, First: 25 * time.Millisecond},
			{Group: GroupFork, Name: ForkName(1 << 30), N: 5, Median: 24 * time.Millisecond, First: 30 * time.Millisecond},
			{Group: GroupFork, Name: ForkUnsyncedName(512 << 20), N: 5, Median: 22 * time.Millisecond},
			{Group: GroupSuspend, Name: NameResume, N: 5, Median: 50 * time.Millisecond},
		},
		Throughput: []Throughput{
			{Name: NameThroughput, Clients: 1, PerSecond: 40},
			{Name: NameThroughput, Clients: 4, PerSecond: 100},
			{Name: PeerName("crun"), Clients: 1, PerSecond: 200},
			{Name: PeerName("crun"), Clients: 4, PerSecond: 100},
		},
		Density: []Density{
			{Name: "corral", Boxes: 1000, Running: 1000, PerBox: 12 << 20 / 10, Returned: 0.98, ReturnedIn: 7 * time.Second},
			{Name: "crun", Boxes: 1000, Running: 1000, PerBox: 1 << 20, Returned: 1},
		},
	}
}

func TestVerdictsAllMet(t *testing.T) {
	vs := Verdicts(fullReport())
	want := []string{
		"target cold create -> first exec -> rm <= 1.5x raw crun run: met (1.50x: 15 ms vs 10 ms)",
		"target create -> first exec -> rm with a warm pool <= 1.5x raw crun run: met (0.80x: 8 ms vs 10 ms)",
		"target create -> first exec done with a warm pool <= 0.3x raw crun run: met (0.30x: 3 ms vs 10 ms)",
		"target exec round trip <= 0.3x raw crun run: met (0.20x: 2 ms vs 10 ms)",
		"target create+rm per second >= 1.0x raw crun run, 4 clients: met (1.00x: 100.0/s vs 100.0/s)",
		"target idle host memory per box <= 1.2x an idle crun container: met (1.20x: 1.20 MiB vs 1.00 MiB, 1000 and 1000 boxes)",
		"target memory back after 1000 idle boxes are removed >= 0.98x crun's, no memory cgroup left: met (0.98x: 98.0% vs 100.0% 7s after the last removal, memory cgroups +0)",
		"target fork right after 512 MiB written, not synced <= 1.2x a fork after 1 MiB: met (1.10x: 22 ms vs 20 ms)",
		"target fork after 1 GiB written and synced <= 1.2x a fork after 1 MiB: met (1.20x: 24 ms vs 20 ms; the first fork after the write 30 ms vs 25 ms)",
		"target memory restore (resume of a suspended idle box) <= 5x raw crun run: met (5.00x: 50 ms vs 10 ms)",
	}
	if len(vs) != len(want) {
		t.Fatalf("Verdicts gave %d verdicts; want %d:\n%v", len(vs), len(want), vs)
	}
	for i, v := range vs {
		if v.String() != want[i] {
			t.Errorf("verdict %d = %q; want %q", i, v, want[i])
		}
		if !v.Met {
			t.Errorf("verdict %q not met at its bound", v)
		}
		// Every target is a ratio: no bound in milliseconds or per second.
		if strings.Contains(v.Target, " ms") || strings.Contains(v.Target, "/s") || strings.Contains(v.Target, "MiB each") {
			t.Errorf("verdict %q has an absolute target", v.Target)
		}
	}
}

func TestVerdictsMissed(t *testing.T) {
	rep := fullReport()
	for i := range rep.Results {
		r := &rep.Results[i]
		switch r.Name {
		case NameLifecycle:
			r.Median = 15100 * time.Microsecond // just over 1.5x
		case ForkUnsyncedName(512 << 20):
			r.Median = 1187 * time.Millisecond
		case NameResume:
			r.Median = 97 * time.Millisecond
		}
	}
	rep.Throughput[1].PerSecond = 47
	rep.Density[0].PerBox = 2 << 20
	rep.Density[0].Returned = 0.99
	rep.Density[0].MemcgsLeft = 5 // 99% back but cgroups left: missed
	missed := map[string]bool{}
	for _, v := range Verdicts(rep) {
		if !v.Met {
			missed[strings.SplitN(v.Target, " ", 3)[0]+" "+strings.SplitN(v.Target, " ", 3)[1]] = true
		}
	}
	for _, want := range []string{"cold create", "fork right", "memory restore", "create+rm per", "idle host", "memory back"} {
		if !missed[want] {
			t.Errorf("no missed verdict starting %q; missed: %v", want, missed)
		}
	}
	if len(missed) != 6 {
		t.Errorf("missed %d verdicts; want 6: %v", len(missed), missed)
	}
}

// TestVerdictsNeedThePeer: a verdict whose peer (or own series) failed or
// was not run is left out, never printed as met.
func TestVerdictsNeedThePeer(t *testing.T) {
	rep := fullReport()
	for i := range rep.Results {
		if rep.Results[i].Name == PeerName("crun") {
			rep.Results[i] = Result{Group: GroupLifecycle, Name: PeerName("crun"), Err: "crun not installed"}
		}
		if rep.Results[i].Name == ForkName(1<<20) {
			rep.Results[i].Err = "fork failed"
		}
	}
	rep.Throughput = rep.Throughput[:2] // no crun series
	rep.Density[1] = Density{Name: "crun", Boxes: 1000, Err: "crun not installed"}
	if vs := Verdicts(rep); len(vs) != 0 {
		t.Errorf("Verdicts without the peers = %v; want none", vs)
	}
}

// TestThroughputPair: 4 clients when both have it, else the most clients
// both measured; a failed peer series does not count.
func TestThroughputPair(t *testing.T) {
	crun := PeerName("crun")
	for _, tc := range []struct {
		name string
		tp   []Throughput
		want int
	}{
		{"four", []Throughput{{Name: NameThroughput, Clients: 8, PerSecond: 1}, {Name: NameThroughput, Clients: 4, PerSecond: 1}, {Name: crun, Clients: 4, PerSecond: 1}, {Name: crun, Clients: 8, PerSecond: 1}}, 4},
		{"most", []Throughput{{Name: NameThroughput, Clients: 1, PerSecond: 1}, {Name: NameThroughput, Clients: 2, PerSecond: 1}, {Name: crun, Clients: 1, PerSecond: 1}, {Name: crun, Clients: 2, PerSecond: 1}}, 2},
		{"peer failed", []Throughput{{Name: NameThroughput, Clients: 1, PerSecond: 1}, {Name: NameThroughput, Clients: 4, PerSecond: 1}, {Name: crun, Clients: 1, PerSecond: 1}, {Name: crun, Clients: 4, Err: "x"}}, 1},
		{"none", []Throughput{{Name: NameThroughput, Clients: 4, PerSecond: 1}}, 0},
	} {
		c, p := throughputPair(&Report{Throughput: tc.tp}, crun)
		got := 0
		if c != nil {
			got = c.Clients
			if p.Clients != c.Clients || p.Name != crun {
				t.Errorf("%s: pair %+v, %+v; want the same clients", tc.name, c, p)
			}
		}
		if got != tc.want {
			t.Errorf("%s: pair with %d clients; want %d", tc.name, got, tc.want)
		}
	}
}

func TestUnsyncedForkBytes(t *testing.T) {
	for _, n := range []int64{512 << 20, 1 << 30, 3 << 10, 7} {
		if got, ok := unsyncedForkBytes(ForkUnsyncedName(n)); !ok || got != n {
			t.Errorf("unsyncedForkBytes(%q) = %d, %v; want %d", ForkUnsyncedName(n), got, ok, n)
		}
	}
	for _, name := range []string{ForkName(512 << 20), NameForkMemoryState, "corral fork (x MiB written, not synced)", "corral fork (0 MiB written, not synced)"} {
		if _, ok := unsyncedForkBytes(name); ok {
			t.Errorf("unsyncedForkBytes(%q) ok; want not a series of unsynced forks", name)
		}
	}
}

func TestBack(t *testing.T) {
	for _, tc := range []struct {
		returned float64
		left     int
		want     bool
	}{{0.98, 0, true}, {1.02, -1, true}, {0.97, 0, false}, {0.995, 1, false}} {
		if got := back(tc.returned, tc.left); got != tc.want {
			t.Errorf("back(%v, %d) = %v; want %v", tc.returned, tc.left, got, tc.want)
		}
	}
}
