package network

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/netpolicy"
)

// testBox is a boxNet with no listeners, enough to count bytes.
func testBox(t *testing.T, budget int64) *boxNet {
	t.Helper()
	s := &Service{cfg: Config{StateDir: t.TempDir()}, boxes: map[string]*boxNet{}}
	b := &boxNet{s: s, id: "box1", ctx: context.Background()}
	b.settings.Store(&netpolicy.Settings{Limits: netpolicy.Limits{EgressBytes: budget}})
	return b
}

// download pipes a server that sends size bytes to the box through the
// proxy's counted connections and returns how many bytes the box got.
func download(t *testing.T, b *boxNet, size int) int64 {
	t.Helper()
	box, proxySide := net.Pipe()
	proxyUp, server := net.Pipe()
	ev := &Event{}
	go pipe(&countedConn{Conn: proxySide, b: b, ev: ev}, &countedConn{Conn: proxyUp, b: b, ev: ev, upstream: true})
	go func() {
		defer server.Close()
		buf := make([]byte, 32<<10)
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := server.Write(buf[:min(len(buf), size-sent)]); err != nil {
				return
			}
		}
	}()
	got, _ := io.Copy(io.Discard, box)
	box.Close()
	return got
}

// TestBudgetCountsEachByteOnce: a download through the proxy stops at
// about the budget, not at half of it (each byte crosses two connections
// of the proxy; it is one byte of egress).
func TestBudgetCountsEachByteOnce(t *testing.T) {
	const budget = 1 << 20
	b := testBox(t, budget)
	got := download(t, b, 4*budget)
	// The proxy reads at most one buffer past the budget.
	if got < budget || got > budget+64<<10 {
		t.Errorf("download with a budget of %d bytes got %d bytes; want about the budget", budget, got)
	}
	if used := b.used.Load(); used != got {
		t.Errorf("used = %d after %d bytes; want each byte counted once", used, got)
	}
}

// TestUsageWrittenAsItGrows: the count reaches the state directory every
// UsageFlushBytes, without waiting for the box to stop (a daemon that is
// killed loses at most that much).
func TestUsageWrittenAsItGrows(t *testing.T) {
	b := testBox(t, 0)
	download(t, b, 3*UsageFlushBytes+100)
	stored, err := b.s.readUsage(b.id)
	if err != nil {
		t.Fatal(err)
	}
	if used := b.used.Load(); stored > used || used-stored >= UsageFlushBytes || stored == 0 {
		t.Errorf("stored count %d, live %d; want within %d of it", stored, used, UsageFlushBytes)
	}
	b.flushUsage()
	if stored, _ = b.s.readUsage(b.id); stored != b.used.Load() {
		t.Errorf("stored count after flush = %d; want %d", stored, b.used.Load())
	}
	if err := b.s.SetEgressUsed("fork1", 42); err != nil {
		t.Fatal(err)
	}
	if n, err := b.s.EgressUsed("fork1"); err != nil || n != 42 {
		t.Errorf("EgressUsed(fork1) = %d, %v; want 42", n, err)
	}
}

// TestBudgetSurvivesDetach: a box whose network is detached (stopped,
// suspended, or the daemon restarted) and attached again keeps what it
// used of its budget.
func TestBudgetSurvivesDetach(t *testing.T) {
	ns := boxNetNS(t)
	const budget = 256 << 10
	body := strings.Repeat("x", 4*budget)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	defer up.Close()
	f := newFakeNet(t, up.Listener.Addr().String())
	set := netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"allowed.test"}, Limits: netpolicy.Limits{EgressBytes: budget}}
	if err := f.svc.Attach(context.Background(), "box1", ns, nsPid(ns), set); err != nil {
		t.Fatal(err)
	}
	if _, got := get(t, ns, "192.0.2.10:80", "allowed.test"); len(got) >= len(body) {
		t.Fatalf("first download got %d bytes; want it cut at the budget of %d", len(got), budget)
	}
	used, _ := f.svc.EgressUsed("box1")
	if err := f.svc.Detach("box1", false); err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.EgressUsed("box1"); err != nil || n != used {
		t.Fatalf("EgressUsed after detach = %d, %v; want %d", n, err, used)
	}
	if err := f.svc.Attach(context.Background(), "box1", ns, nsPid(ns), set); err != nil {
		t.Fatal(err)
	}
	if resp, got := get(t, ns, "192.0.2.10:80", "allowed.test"); resp != nil && resp.StatusCode == http.StatusOK {
		t.Errorf("download after attaching again: %v, %d bytes; want it refused (budget used up)", resp, len(got))
	}
	var last Event
	f.svc.Events("box1", func(ev Event) error { last = ev; return nil })
	if last.Verdict != Deny || !strings.Contains(last.Reason, "budget") {
		t.Errorf("last event %+v; want a deny for the budget", last)
	}
}
