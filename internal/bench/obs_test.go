package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRecordCosts checks that the recording costs are measured (every
// exec and event goes through the store, none is left out).
func TestRecordCosts(t *testing.T) {
	if d, err := recordExecCost(20); err != nil || d <= 0 {
		t.Errorf("recordExecCost(20) = %v, %v; want a positive cost", d, err)
	}
	if d, err := recordEventCost(20); err != nil || d <= 0 {
		t.Errorf("recordEventCost(20) = %v, %v; want a positive cost", d, err)
	}
}

// TestPrintObs checks the observability section's lines: the ratios and
// their verdicts, the /metrics time next to /health's.
func TestPrintObs(t *testing.T) {
	var b bytes.Buffer
	Print(&b, &Report{Obs: &Obs{
		RecordExec: 20 * time.Microsecond, Exec: time.Millisecond,
		CreateEvents: 4, RecordCreate: 40 * time.Microsecond, Create: 500 * time.Microsecond,
		MetricsBoxes: 1000, MetricsN: 30, Metrics: 4 * time.Millisecond, Health: 200 * time.Microsecond,
	}})
	out := b.String()
	for _, want := range []string{
		"target recording <= 5% of the exec round trip: met (20.0 µs of 1 ms: 2.00%)",
		"target recording <= 5% of a create: NOT met (4 events, 40.0 µs of 0.5 ms: 8.00%)",
		"target GET /metrics <= 10 ms with 1000 boxes: met (4 ms median; GET /health 0.2 ms: 20.0x)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Print has no %q:\n%s", want, out)
		}
	}
}
