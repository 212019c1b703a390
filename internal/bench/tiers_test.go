package bench

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestTierRatios checks the tiers section's verdicts: ratios of the
// medians measured in the run, met or not against their goal, and a
// series that failed named instead of a ratio. No timing is asserted:
// the durations are made up.
func TestTierRatios(t *testing.T) {
	r := &run{rep: &Report{}}
	ms := func(n int) []time.Duration {
		return []time.Duration{time.Duration(n) * time.Millisecond, time.Duration(n) * time.Millisecond, time.Duration(n) * time.Millisecond}
	}
	life := r.addTierResult(NameGVisorLifecycle, ms(110), nil)
	raw := r.addTierResult(PeerName("runsc"), ms(100), nil)
	r.addTierRatio("gvisor lifecycle / raw runsc run", life, raw, GoalGVisorLifecycle)
	ce := r.addTierResult(NameExecContainer, ms(1), nil)
	ge := r.addTierResult(NameExecGVisor, ms(4), nil)
	r.addTierRatio("gvisor exec / container exec", ge, ce, GoalGVisorExec)
	on := r.addTierResult(NameUserNSOn, nil, errors.New("daemon with userns = \"on\": it exited"))
	off := r.addTierResult(NameUserNSOff, ms(50), nil)
	r.addTierRatio("userns on / off, lifecycle", on, off, GoalUserNS)

	want := []struct {
		ratio float64
		met   bool
		err   string
	}{{1.1, true, ""}, {4, false, ""}, {0, false, "it exited"}}
	if len(r.rep.TierRatios) != len(want) {
		t.Fatalf("TierRatios = %+v; want %d", r.rep.TierRatios, len(want))
	}
	for i, w := range want {
		got := r.rep.TierRatios[i]
		if d := got.Ratio - w.ratio; d > 1e-9 || d < -1e-9 || got.Met() != w.met || !strings.Contains(got.Err, w.err) || (w.err == "") != (got.Err == "") {
			t.Errorf("TierRatios[%d] = %+v (met %v); want ratio %v, met %v, error %q", i, got, got.Met(), w.ratio, w.met, w.err)
		}
	}

	var buf bytes.Buffer
	Print(&buf, r.rep)
	out := buf.String()
	for _, s := range []string{
		"target gvisor lifecycle / raw runsc run <= 1.20x: met (1.10x)",
		"target gvisor exec / container exec <= 3.00x: NOT met (4.00x)",
		"target userns on / off, lifecycle <= 1.10x: not measured: ",
		"runsc run true",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("Print() lacks %q:\n%s", s, out)
		}
	}
	if strings.Contains(out, "corral/this\n") {
		t.Errorf("Print() of a run of the tiers section alone prints the empty lifecycle table:\n%s", out)
	}
	// The tiers' series are in their own table, not the lifecycle one
	// whose ratios are Corral's lifecycle over each peer.
	if strings.Count(out, "runsc run true") != 1 {
		t.Errorf("Print() shows runsc's series %d times; want once, in the tiers table:\n%s", strings.Count(out, "runsc run true"), out)
	}
}

// TestPeerNamesTiers: a run with the tiers section records raw runsc's
// version with the machine, as it records every peer's.
func TestPeerNamesTiers(t *testing.T) {
	cfg := Config{Peers: []string{"crun"}, Sections: []string{SectionLifecycle}}
	if got := peerNames(cfg); strings.Join(got, ",") != "crun" {
		t.Errorf("peerNames(lifecycle only) = %q; want [crun]", got)
	}
	cfg.Sections = append(cfg.Sections, SectionTiers)
	if got := peerNames(cfg); strings.Join(got, ",") != "crun,runsc" {
		t.Errorf("peerNames(with tiers) = %q; want [crun runsc]", got)
	}
}

// TestInTurns checks that the tiers section's exec series alternate, so
// the load of the machine weighs on both alike, and that a failed or
// missing series leaves the other one running. The order of calls is
// checked, never a duration.
func TestInTurns(t *testing.T) {
	var calls []int
	op := func(j int, failAt int) func(context.Context) error {
		n := 0
		return func(context.Context) error {
			calls = append(calls, j)
			n++
			if n == failAt {
				return errors.New("box gone")
			}
			return nil
		}
	}
	s, errs := inTurns(t.Context(), 3, 1, [2]func(context.Context) error{op(0, 0), op(1, 0)}, [2]error{})
	if want := []int{0, 1, 0, 1, 0, 1, 0, 1}; !slices.Equal(calls, want) {
		t.Errorf("inTurns calls = %v; want %v (in turns)", calls, want)
	}
	if len(s[0]) != 3 || len(s[1]) != 3 || errs[0] != nil || errs[1] != nil {
		t.Errorf("inTurns = %d and %d samples, errors %v; want 3 each after 1 warm-up, no error", len(s[0]), len(s[1]), errs)
	}

	calls = nil
	created := errors.New("create: no runsc")
	s, errs = inTurns(t.Context(), 3, 1, [2]func(context.Context) error{op(0, 2), nil}, [2]error{nil, created})
	if want := []int{0, 0}; !slices.Equal(calls, want) {
		t.Errorf("inTurns calls = %v; want %v (op 0 stops at its failure, op 1 never runs)", calls, want)
	}
	if errs[0] == nil || !errors.Is(errs[1], created) || len(s[0]) != 0 || len(s[1]) != 0 {
		t.Errorf("inTurns = %v samples, errors %v; want none, op 0's failure and the create error", s, errs)
	}
}

// TestIdleRatio checks the verdict on the user namespace's memory per idle
// box: on over off, both from the same run, and an error instead of a
// ratio when either measurement is not that of working idle boxes. The
// figures are made up; no timing is involved.
func TestIdleRatio(t *testing.T) {
	const mib = 1 << 20
	ok := func(name string, perBox int64) Density {
		return Density{Name: name, Boxes: 5, Running: 5, PerBox: perBox, ExecChecked: 5, ExecOK: 5}
	}
	on, off := ok(NameUserNSOnIdle, 21*mib), ok(NameUserNSOffIdle, 20*mib)
	tests := []struct {
		name    string
		on, off Density
		ratio   float64
		met     bool
		err     string
	}{
		{"within 10%", on, off, 1.05, true, ""},
		{"over 10%", ok(NameUserNSOnIdle, 25*mib), off, 1.25, false, ""},
		{"on failed", Density{Name: NameUserNSOnIdle, Boxes: 5, Running: 3, PerBox: mib, Err: "started 3 of 5: no space"}, off, 0, false, "started 3 of 5: no space (corral, userns on)"},
		{"off none running", on, Density{Name: NameUserNSOffIdle, Boxes: 5}, 0, false, "no box running (corral, userns off)"},
		{"exec failed", on, Density{Name: NameUserNSOffIdle, Boxes: 5, Running: 5, PerBox: mib, ExecChecked: 5, ExecOK: 4}, 0, false, "4 of 5 boxes answered exec (corral, userns off)"},
		{"no memory taken", ok(NameUserNSOnIdle, -mib), off, 0, false, "no memory taken"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := idleRatio(tc.on, tc.off)
			if d := got.Ratio - tc.ratio; d > 1e-9 || d < -1e-9 || got.Met() != tc.met || !strings.Contains(got.Err, tc.err) || (tc.err == "") != (got.Err == "") {
				t.Errorf("idleRatio() = %+v (met %v); want ratio %v, met %v, error %q", got, got.Met(), tc.ratio, tc.met, tc.err)
			}
			if got.Of != NameUserNSOnIdle || got.Over != NameUserNSOffIdle || got.Goal != GoalUserNS {
				t.Errorf("idleRatio() = %+v; want %q over %q against %v", got, NameUserNSOnIdle, NameUserNSOffIdle, GoalUserNS)
			}
		})
	}

	// Printed with the other tier verdicts, the two series in the density
	// table, and not taken for the density section's "corral" series.
	rep := &Report{
		Density:    []Density{on, off, {Name: "crun", Boxes: 5, Running: 5, PerBox: mib}},
		TierRatios: []TierRatio{idleRatio(on, off), idleRatio(on, Density{Name: NameUserNSOffIdle})},
	}
	var buf bytes.Buffer
	Print(&buf, rep)
	out := buf.String()
	for _, s := range []string{
		"target userns on / off, memory per idle box <= 1.10x: met (1.05x)",
		"target userns on / off, memory per idle box <= 1.10x: not measured: no box running (corral, userns off)",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("Print() lacks %q:\n%s", s, out)
		}
	}
	for name, perBox := range map[string]string{NameUserNSOnIdle: "21.00 MiB", NameUserNSOffIdle: "20.00 MiB"} {
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
			return strings.HasPrefix(l, name+" ") && strings.Contains(l, " "+perBox+" ")
		}) {
			t.Errorf("Print() has no density row %q with %s per box:\n%s", name, perBox, out)
		}
	}
	if strings.Contains(out, "idle host memory per box <=") {
		t.Errorf("Print() compares a userns series with crun as the density section's corral series:\n%s", out)
	}
	for _, g := range ChartOf(rep).Groups {
		for _, b := range g.Bars {
			if strings.HasPrefix(b.Label, "corral, userns") && !b.Corral {
				t.Errorf("ChartOf() bar %q is drawn as a peer's; want Corral's", b.Label)
			}
		}
	}
}

// TestUserNSCostNoDaemon: without a daemon binary to start, every userns
// verdict of the tiers section, memory per idle box included, says why it
// was not measured rather than missing from the report.
func TestUserNSCostNoDaemon(t *testing.T) {
	r := &run{rep: &Report{}}
	r.userNSCost(t.Context())
	var names []string
	for _, tr := range r.rep.TierRatios {
		names = append(names, tr.Name)
		if tr.Met() || !strings.Contains(tr.Err, "no daemon binary") {
			t.Errorf("userNSCost() verdict %+v; want not measured: no daemon binary", tr)
		}
	}
	if want := []string{"userns on / off, lifecycle", "userns on / off, memory per idle box"}; !slices.Equal(names, want) {
		t.Errorf("userNSCost() verdicts = %q; want %q", names, want)
	}
}
