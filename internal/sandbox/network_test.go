package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestNetworkAllowRefused checks the allow entries that would be stored and
// never used: with a mode other than allowlist, and naming only addresses
// the guard blocks for every box (loopback, the host's own addresses, the
// boxes' gateway, private ranges the operator has not allowed). Create and
// SetNetwork refuse them, naming the field, and leave nothing behind.
func TestNetworkAllowRefused(t *testing.T) {
	ctx := testutil.Context(t)
	nw := &sandboxtest.Networker{}
	_, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) {
		cfg.Network = nw
		cfg.Guard = &netpolicy.Guard{
			AllowPrivate: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
			Extra:        []netip.Prefix{netip.MustParsePrefix("10.88.0.0/16")},
			HostAddrs:    func() []netip.Addr { return []netip.Addr{netip.MustParseAddr("192.0.2.1")} },
		}
	})
	box := mustCreate(t, m, sandbox.CreateRequest{Network: &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"a.example"}}})

	for _, tc := range []struct {
		name string
		set  netpolicy.Settings
		want string
	}{
		{"mode full", netpolicy.Settings{Mode: netpolicy.ModeFull, Allow: []string{"a.test"}},
			"network.allow: mode full allows every public destination and uses no allowlist: set mode allowlist"},
		{"mode open", netpolicy.Settings{Mode: "open", Allow: []string{"a.test"}},
			"network.allow: mode full allows every public destination"},
		{"mode none", netpolicy.Settings{Mode: netpolicy.ModeNone, Allow: []string{"a.test"}},
			"network.allow: mode none lets nothing leave the sandbox and uses no allowlist"},
		{"loopback", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"a.test", "127.0.0.1"}},
			`network.allow: "127.0.0.1": 127.0.0.1 is a loopback address; the guard blocks it for every sandbox`},
		{"loopback range", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"127.0.0.0/8:80"}},
			`network.allow: "127.0.0.0/8:80": every address in 127.0.0.0/8 is a loopback address`},
		{"IPv6 loopback", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"[::1]:443"}},
			`network.allow: "[::1]:443": ::1 is a loopback address`},
		{"localhost", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"localhost:8080"}},
			`network.allow: "localhost:8080": localhost names resolve to loopback addresses`},
		{"under localhost", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"*.app.localhost"}},
			`network.allow: "*.app.localhost": localhost names resolve to loopback addresses`},
		{"host address", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"192.0.2.1"}},
			`network.allow: "192.0.2.1": 192.0.2.1 is an address of this host; the guard blocks it for every sandbox`},
		{"gateway", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"10.88.0.1:3128"}},
			`network.allow: "10.88.0.1:3128": 10.88.0.1 is a blocked address (in 10.88.0.0/16)`},
		{"metadata", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"169.254.169.254"}},
			`network.allow: "169.254.169.254": 169.254.169.254 is a cloud metadata address`},
		{"private", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"192.168.1.0/24"}},
			`network.allow: "192.168.1.0/24": every address in 192.168.1.0/24 is a private address (allow it with network.allow_private)`},
		{"URL", netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"https://api.example.com"}},
			`allow entry "https://api.example.com": a URL is not an allow entry: write api.example.com:443, or api.example.com for every port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := m.List(ctx)
			_, err := m.Create(ctx, sandbox.CreateRequest{Network: tc.set.Clone()})
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create(%+v) = %v; want an invalid argument containing %q", tc.set, err, tc.want)
			}
			if after, _ := m.List(ctx); len(after) != len(before) {
				t.Errorf("a refused Create left %d sandboxes; want %d", len(after), len(before))
			}
			_, err = m.SetNetwork(ctx, box.ID, *tc.set.Clone())
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("SetNetwork(%+v) = %v; want an invalid argument containing %q", tc.set, err, tc.want)
			}
			if set, _ := nw.Settings(box.ID); !slices.Equal(set.Allow, []string{"a.example"}) {
				t.Errorf("after a refused SetNetwork the box is attached with %+v; want its allowlist unchanged", set)
			}
		})
	}

	// Allow entries without a mode mean an allowlist, as --allow does in
	// the CLI.
	if sb, err := m.Create(ctx, sandbox.CreateRequest{Network: &netpolicy.Settings{Allow: []string{"b.example"}}}); err != nil || sb.Network == nil || sb.Network.Mode != netpolicy.ModeAllowlist {
		t.Errorf("Create(allow without a mode) = %+v, %v; want mode allowlist", sb, err)
	}

	// What the guard lets through at least in part is accepted.
	for _, allow := range [][]string{{"10.20.0.5"}, {"10.0.0.0/8:443"}, {"192.0.2.0/24"}, {"203.0.113.7", "api.example.com:443"}, {"0.0.0.0/0"}} {
		if _, err := m.SetNetwork(ctx, box.ID, netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: allow}); err != nil {
			t.Errorf("SetNetwork(allowlist %v) = %v; want nil", allow, err)
		}
	}
}

// TestNetworkFromImageDropsUnusedAllow checks that a box made from an image
// saved with allow entries its mode never used (before they were refused)
// is created, without them.
func TestNetworkFromImageDropsUnusedAllow(t *testing.T) {
	ctx := testutil.Context(t)
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) { cfg.Network = &sandboxtest.Networker{} })
	img := sandbox.Image{Name: "old", TopLayer: "host-layer", Network: &netpolicy.Settings{Mode: netpolicy.ModeFull, Allow: []string{"a.test"}}}
	if err := env.Snapshots.AddSnapshot(ctx, img); err != nil {
		t.Fatal(err)
	}
	for _, req := range []sandbox.CreateRequest{
		{Image: "old"},
		{Image: "old", Network: &netpolicy.Settings{Limits: netpolicy.Limits{ConnectionsPerMinute: 5}}},
	} {
		rec, err := m.Create(ctx, req)
		if err != nil {
			t.Fatalf("Create(%+v) = %v; want nil", req, err)
		}
		if rec.Network == nil || rec.Network.Mode != netpolicy.ModeFull || len(rec.Network.Allow) != 0 {
			t.Errorf("Create(%+v) network = %+v; want mode full without allow entries", req, rec.Network)
		}
	}
}

// fakeSecrets is a secret store that knows the names in set.
type fakeSecrets struct{ set map[string]bool }

func (s fakeSecrets) Check(name string) error {
	switch {
	case strings.ToUpper(name) != name:
		return fmt.Errorf("secret name %q must be upper-case: %w", name, errdefs.ErrInvalidArgument)
	case !s.set[name]:
		return fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

func (fakeSecrets) Placeholder() string { return "placeholder-1" }

// TestNetworkSecrets checks that the Manager asks its secret store about
// every secret a box binds (the store's rules, not the Manager's, decide
// what a valid name is) and puts the store's placeholder into the box's
// environment; without a store, a box with secrets is refused.
func TestNetworkSecrets(t *testing.T) {
	ctx := testutil.Context(t)
	_, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) {
		cfg.Network = &sandboxtest.Networker{}
		cfg.Secrets = fakeSecrets{set: map[string]bool{"API_KEY": true}}
	})
	withSecret := func(name string) sandbox.CreateRequest {
		return sandbox.CreateRequest{Network: &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"api.example.org"},
			Secrets: []netpolicy.SecretRef{{Name: name}}}}
	}
	for _, tc := range []struct{ name, want string }{
		{"api_key", `secret "api_key": secret name "api_key" must be upper-case`},
		{"OTHER", `secret "OTHER" is not set (corral secret set OTHER)`},
	} {
		if _, err := m.Create(ctx, withSecret(tc.name)); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(secret %s) = %v; want an invalid argument containing %q", tc.name, err, tc.want)
		}
	}
	rec, err := m.Create(ctx, withSecret("API_KEY"))
	if err != nil {
		t.Fatalf("Create(secret API_KEY) = %v; want nil", err)
	}
	if got := rec.Env["API_KEY"]; got != "placeholder-1" {
		t.Errorf("Create(secret API_KEY) env API_KEY = %q; want the store's placeholder", got)
	}
	if hosts := rec.Network.Secrets[0].Hosts; !slices.Equal(hosts, []string{"api.example.org"}) {
		t.Errorf("Create(secret API_KEY) hosts = %v; want the allowlist's host", hosts)
	}

	_, m = newLifecycle(t, func(cfg *sandbox.ManagerConfig) { cfg.Network = &sandboxtest.Networker{} })
	if _, err := m.Create(ctx, withSecret("API_KEY")); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "secret store") {
		t.Errorf("Create(secret API_KEY) without a secret store = %v; want an invalid argument naming the secret store", err)
	}
}

// TestNetworkPlacedInRuntimesNetNS: a box's network is wired in the
// namespace its runtime reports (State.NetNS), not one derived from a pid,
// so a backend whose box is no host process (a VM's TAP device in a
// namespace) plugs in; a runtime that reports none is refused, and nothing
// is attached.
func TestNetworkPlacedInRuntimesNetNS(t *testing.T) {
	ctx := testutil.Context(t)
	nw := &sandboxtest.Networker{}
	env, m := newLifecycle(t, func(cfg *sandbox.ManagerConfig) { cfg.Network = nw })
	set := &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: []string{"example.com"}}
	rec := mustCreate(t, m, sandbox.CreateRequest{Network: set})
	if got, want := nw.NetNS(rec.ID), sandboxtest.NetNS(rec.ID); got != want {
		t.Errorf("attached in %q; want the runtime's State.NetNS %q", got, want)
	}
	if id, ns, err := m.NetNS(ctx, rec.ID); err != nil || id != rec.ID || ns != sandboxtest.NetNS(rec.ID) {
		t.Errorf("NetNS(%q) = %q, %q, %v; want %q, %q", rec.ID, id, ns, err, rec.ID, sandboxtest.NetNS(rec.ID))
	}

	// A runtime that reports a pid and no namespace.
	env.Runtime.StateFn = func(ctx context.Context, id string) (sandbox.State, error) {
		return sandbox.State{Status: sandbox.StatusRunning, Pid: 1}, nil
	}
	_, err := m.Create(ctx, sandbox.CreateRequest{Network: set})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "network namespace") {
		t.Errorf("Create with a runtime reporting no network namespace = %v; want failed precondition naming it", err)
	}
	if _, _, err := m.NetNS(ctx, rec.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("NetNS(%q) with a runtime reporting none = %v; want failed precondition", rec.ID, err)
	}
}
