package daemon

import (
	"context"
	"testing"

	"github.com/corral-sandbox/corral/internal/alerts"
	"github.com/corral-sandbox/corral/internal/network"
)

type alertList []alerts.Alert

func (l *alertList) Alert(_ context.Context, a alerts.Alert) { *l = append(*l, a) }

// TestEgressDenialAlerts checks that the daemon's egress events raise an
// egress_denied alert for a denial, none for an allowed connection, and
// that what the box wrote is made printable.
func TestEgressDenialAlerts(t *testing.T) {
	var got alertList
	d := &Daemon{obs: &observability{}}
	d.obs.denials.Store(alerts.NewDenials(context.Background(), alerts.DenialsConfig{}, &got))
	events := d.networkEvents()
	events(network.Event{Sandbox: "a", Kind: "tcp", Addr: "203.0.113.7", Port: 443, Verdict: network.Allow})
	if len(got) != 0 {
		t.Fatalf("allowed connection: alerts = %+v; want none", got)
	}
	events(network.Event{Sandbox: "a", Kind: "dns", Host: "evil\x1b[2J.example", Port: 53, Verdict: network.Deny,
		Reason: "not in the allowlist", Process: &network.ProcRef{Pid: 14, Command: "curl"}})
	if len(got) != 1 {
		t.Fatalf("denied query: %d alerts; want 1", len(got))
	}
	want := "egress denied: dns evil?[2J.example (pid 14 curl): not in the allowlist"
	if a := got[0]; a.Kind != alerts.EgressDenied || a.Box != "a" || a.Message != want {
		t.Errorf("alert = %+v; want kind egress_denied, box a, message %q", a, want)
	}
	// Before the alerts are wired (the network opens first) nothing breaks.
	(&Daemon{obs: &observability{}}).networkEvents()(network.Event{Sandbox: "a", Verdict: network.Deny})
	(&Daemon{}).networkEvents()(network.Event{Sandbox: "a", Verdict: network.Deny})
}
