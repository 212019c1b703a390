package bench

import (
	"bytes"
	"errors"
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
