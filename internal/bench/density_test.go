package bench

import (
	"strings"
	"testing"
)

const meminfoSample = `MemTotal:       24683520 kB
MemFree:        23946164 kB
MemAvailable:   24138020 kB
Buffers:           13576 kB
Cached:           471332 kB
Slab:             440156 kB
SReclaimable:     300000 kB
KernelStack:        1696 kB
Percpu:             5000 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
`

func TestParseMeminfo(t *testing.T) {
	m, err := parseMeminfo(strings.NewReader(meminfoSample))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]int64{
		"MemAvailable":    24138020 * 1024,
		"Slab":            440156 * 1024,
		"HugePages_Total": 0,
		"Hugepagesize":    2048 * 1024,
	} {
		if m[k] != want {
			t.Errorf("parseMeminfo %s = %d; want %d", k, m[k], want)
		}
	}
	if _, err := parseMeminfo(strings.NewReader("MemTotal: 1 kB\n")); err == nil {
		t.Errorf("parseMeminfo without MemAvailable succeeded")
	}
	if _, err := parseMeminfo(strings.NewReader("MemAvailable: lots kB\n")); err == nil {
		t.Errorf("parseMeminfo of a non-number succeeded")
	}
}

func TestDensityMath(t *testing.T) {
	const mib = 1 << 20
	tests := []struct {
		name                string
		before, idle, after int64
		n                   int
		wantPerBox          int64
		wantReturned        float64
	}{
		{"1000 boxes at 2 MiB, all back", 20000 * mib, 18000 * mib, 20000 * mib, 1000, 2 * mib, 1},
		{"half back", 1000 * mib, 800 * mib, 900 * mib, 100, 2 * mib, 0.5},
		{"more than before", 1000 * mib, 900 * mib, 1010 * mib, 10, 10 * mib, 1.1},
		{"no box", 1000 * mib, 1000 * mib, 1000 * mib, 0, 0, 1},
		{"memory grew meanwhile", 1000 * mib, 1001 * mib, 1000 * mib, 1, -mib, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := perBox(tc.before, tc.idle, tc.n); got != tc.wantPerBox {
				t.Errorf("perBox(%d, %d, %d) = %d; want %d", tc.before, tc.idle, tc.n, got, tc.wantPerBox)
			}
			if got := returnedFraction(tc.before, tc.idle, tc.after); got != tc.wantReturned {
				t.Errorf("returnedFraction(%d, %d, %d) = %v; want %v", tc.before, tc.idle, tc.after, got, tc.wantReturned)
			}
		})
	}
}

func TestGrowth(t *testing.T) {
	before := Meminfo{"Slab": 100, "AnonPages": 50, "Percpu": 7}
	after := Meminfo{"Slab": 160, "AnonPages": 40}
	g := growth(before, after, []string{"Slab", "AnonPages", "Percpu", "Missing"})
	if g["Slab"] != 60 || g["AnonPages"] != -10 {
		t.Errorf("growth = %v; want Slab 60, AnonPages -10", g)
	}
	if _, ok := g["Percpu"]; ok {
		t.Errorf("growth has a field missing after: %v", g)
	}
}

func TestParseRollup(t *testing.T) {
	const rollup = `00400000-7ffebea9f000 ---p 00000000 00:00 0                              [rollup]
Rss:               14768 kB
Pss:                3070 kB
Pss_Dirty:          3069 kB
Pss_Anon:           2836 kB
Pss_File:            234 kB
Shared_Clean:          8 kB
`
	ro, err := parseRollup(strings.NewReader(rollup))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Rollup{RSS: 14768 << 10, PSS: 3070 << 10, PSSAnon: 2836 << 10}); ro != want {
		t.Errorf("parseRollup = %+v; want %+v", ro, want)
	}
	if _, err := parseRollup(strings.NewReader("Rss: 12 pages\n")); err == nil {
		t.Errorf("parseRollup of a value without kB succeeded")
	}
}

func TestCgroupBase(t *testing.T) {
	tests := []struct{ in, want string }{
		{"9:name=systemd:/corral-bench/6de0603841d1\n4:memory:/corral-bench/6de0603841d1\n0::/\n", "6de0603841d1"},
		{"0::/\n", ""},
		{"0::/user.slice/session-1.scope\n", "session-1.scope"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := cgroupBase(strings.NewReader(tc.in)); got != tc.want {
			t.Errorf("cgroupBase(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestSizeName(t *testing.T) {
	for n, want := range map[int64]string{1 << 20: "1 MiB", 1 << 30: "1 GiB", 3 << 10: "3 KiB", 1000: "1000 B", 3<<20 + 1: "3145729 B"} {
		if got := sizeName(n); got != want {
			t.Errorf("sizeName(%d) = %q; want %q", n, got, want)
		}
	}
}

func TestAccounted(t *testing.T) {
	g := map[string]int64{"KernelStack": 100, "PageTables": 20, "SUnreclaim": 60, "Percpu": 20, "Cached": 1 << 40, "AnonPages": 1 << 40}
	if got := accounted(g, 800, 10); got != 100 {
		t.Errorf("accounted = %d; want (800 + 200) / 10 = 100 (page cache and AnonPages left out)", got)
	}
	if got := accounted(g, 800, 0); got != 0 {
		t.Errorf("accounted of no box = %d; want 0", got)
	}
}

func TestParseCgroupsCount(t *testing.T) {
	const cgroups = `#subsys_name	hierarchy	num_cgroups	enabled
cpuset	3	42	1
memory	4	132	1
pids	8	42	1
`
	if got := parseCgroupsCount(cgroups, "memory"); got != 132 {
		t.Errorf("parseCgroupsCount(memory) = %d; want 132", got)
	}
	if got := parseCgroupsCount(cgroups, "hugetlb"); got != -1 {
		t.Errorf("parseCgroupsCount(hugetlb) = %d; want -1", got)
	}
}
