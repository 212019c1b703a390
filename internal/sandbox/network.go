package sandbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/netpolicy"
)

// Networker serves the egress of boxes with network access (implemented
// by internal/network.Service).
type Networker interface {
	// Prepare makes the box's CA when it has secrets and returns its
	// certificate (PEM) for the box's trust store; nil without secrets.
	Prepare(id string, set netpolicy.Settings) ([]byte, error)
	// Attach wires the box's network namespace netns (State.NetNS) and
	// serves its egress; on an attached box it only updates the settings.
	// pid, when not 0, is the host pid of the box's PID 1 (State.Pid):
	// the egress log names the process behind each connection among its
	// descendants. A box whose processes are not host processes (a VM)
	// passes 0 and its connections are not attributed.
	Attach(ctx context.Context, id, netns string, pid int, set netpolicy.Settings) error
	// Detach stops serving the box; purge also removes its state.
	Detach(id string, purge bool) error
	// Attached reports whether the box is served.
	Attached(id string) bool
}

// EgressCounter is the optional part of a Networker that keeps what each
// box has used of its egress budget, so that a fork can start with its
// parent's count (the budget bounds a box and its copies together; only
// an explicit new budget, `corral net set`, gives a fork more).
type EgressCounter interface {
	// EgressUsed returns the bytes box id has sent and received through
	// the egress proxy over its life.
	EgressUsed(id string) (int64, error)
	// SetEgressUsed sets that count (before the box is attached).
	SetEgressUsed(id string, n int64) error
}

// Secrets is the daemon's secret store as the Manager uses it when a box
// binds secrets (implemented by internal/secrets.Store). The Manager keeps
// no rule of its own about secret names or placeholders.
type Secrets interface {
	// Check returns nil when name is a valid secret name whose value is
	// set: an error wrapping errdefs.ErrInvalidArgument for an invalid
	// name, errdefs.ErrNotFound for one that is not set.
	Check(name string) error
	// Placeholder returns a fresh placeholder, which the box's environment
	// holds instead of a secret's value.
	Placeholder() string
}

// CA trust-store paths inside a box, and the environment that points
// common TLS stacks at them.
const (
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	CACertPath   = "/etc/corral/ca.crt"
)

// validateNetwork checks set and completes it: secrets get placeholders
// (put into env) and default hosts (the allowlist's host rules).
func (m *Manager) validateNetwork(set *netpolicy.Settings, env map[string]string) error {
	if set == nil {
		return nil
	}
	if set.Mode == "" && len(set.Allow) > 0 {
		// Allow entries without a mode mean an allowlist, as --allow does
		// in the CLI; only an explicit none or full refuses them.
		set.Mode = netpolicy.ModeAllowlist
	}
	mode, err := netpolicy.ParseMode(string(set.Mode))
	if err != nil {
		return invalid("%v", err)
	}
	set.Mode = mode
	pol, err := netpolicy.NewPolicy(mode, set.Allow)
	if err != nil {
		return invalid("%v", err)
	}
	if err := m.checkAllow(pol, len(set.Allow)); err != nil {
		return err
	}
	if set.Limits.ConnectionsPerMinute < 0 || set.Limits.EgressBytes < 0 {
		return invalid("network limits must not be negative")
	}
	seen := map[string]bool{}
	for i := range set.Secrets {
		s := &set.Secrets[i]
		if seen[s.Name] {
			return invalid("secret %q is listed twice", s.Name)
		}
		seen[s.Name] = true
		if m.cfg.Network == nil {
			return invalid("secrets need the daemon's network service")
		}
		if m.cfg.Secrets == nil {
			return invalid("secrets need the daemon's secret store")
		}
		if err := m.cfg.Secrets.Check(s.Name); err != nil {
			switch {
			case errdefs.IsInvalidArgument(err):
				return invalid("secret %q: %v", s.Name, err)
			case errdefs.IsNotFound(err):
				return invalid("secret %q is not set (corral secret set %s)", s.Name, s.Name)
			}
			return err
		}
		if len(s.Hosts) == 0 {
			for _, r := range pol.Rules() {
				if r.Host != "" {
					s.Hosts = append(s.Hosts, r.Host)
				}
			}
		}
		if len(s.Hosts) == 0 {
			return invalid("secret %q: say which hosts may receive it (--secret %s=api.example.com); with network mode %s there is no allowlist to default to", s.Name, s.Name, mode)
		}
		for i, h := range s.Hosts {
			r, err := netpolicy.ParseRule(h)
			if err != nil || r.Host == "" || r.Port != 0 {
				return invalid("secret %q: host %q must be a domain name or *.domain (no port)", s.Name, h)
			}
			s.Hosts[i] = r.Host
		}
		if _, clash := env[s.Name]; clash {
			return invalid("secret %q is also set with --env", s.Name)
		}
		if s.Placeholder == "" {
			s.Placeholder = m.cfg.Secrets.Placeholder()
		}
		env[s.Name] = s.Placeholder
	}
	if len(set.Secrets) > 0 {
		env["REQUESTS_CA_BUNDLE"] = CABundlePath
		env["NODE_EXTRA_CA_CERTS"] = CACertPath
	}
	if set.Attached() && m.cfg.Network == nil {
		return invalid("network mode %s needs the daemon's network service", mode)
	}
	return nil
}

// modeWithoutAllowlist says what the modes that take no allowlist do.
var modeWithoutAllowlist = map[netpolicy.Mode]string{
	netpolicy.ModeNone: "lets nothing leave the sandbox",
	netpolicy.ModeFull: "allows every public destination",
}

// checkAllow refuses allow entries that would be stored and never used:
// entries with a mode other than allowlist, and entries that name only
// addresses the guard blocks in every mode (loopback, the host's own
// addresses, the sandboxes' gateway, private ranges the operator has not
// allowed, ...). Such an entry would let nothing through.
func (m *Manager) checkAllow(pol *netpolicy.Policy, entries int) error {
	if entries == 0 {
		return nil
	}
	if does, ok := modeWithoutAllowlist[pol.Mode()]; ok {
		return invalid("network.allow: mode %s %s and uses no allowlist: set mode allowlist to allow only the listed destinations, or drop the allow entries", pol.Mode(), does)
	}
	for _, r := range pol.Rules() {
		if r.Host != "" {
			if base := strings.TrimPrefix(r.Host, "*."); base == "localhost" || strings.HasSuffix(base, ".localhost") {
				return invalid("network.allow: %q: localhost names resolve to loopback addresses; the guard blocks them for every sandbox, so the entry would allow nothing", r.String())
			}
			continue
		}
		if err := m.cfg.Guard.CheckPrefix(r.Prefix); err != nil {
			return invalid("network.allow: %q: %v; the guard blocks it for every sandbox, so the entry would allow nothing", r.String(), err)
		}
	}
	return nil
}

// attachNetwork wires a started box's network when its settings ask.
func (m *Manager) attachNetwork(ctx context.Context, rec Record) error {
	if !rec.Network.Attached() || m.cfg.Network == nil {
		return nil
	}
	rt := m.cfg.Runtimes[rec.Runtime]
	st, err := rt.State(ctx, rec.ID)
	if err != nil {
		return err
	}
	if st.NetNS == "" {
		return fmt.Errorf("sandbox %s has no network namespace (is it running?): %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	return m.cfg.Network.Attach(ctx, rec.ID, st.NetNS, st.Pid, *rec.Network)
}

// SetNetwork changes a running box's network settings (mode, allowlist,
// limits; secrets are fixed at create). New connections follow them at once.
func (m *Manager) SetNetwork(ctx context.Context, idOrName string, set netpolicy.Settings) (Record, error) {
	b, err := m.lookup(idOrName)
	if err != nil {
		return Record{}, err
	}
	b.op.Lock()
	defer b.op.Unlock()
	m.mu.Lock()
	gone, rec := b.gone, b.rec
	m.mu.Unlock()
	if gone {
		return Record{}, fmt.Errorf("sandbox %q: %w", idOrName, errdefs.ErrNotFound)
	}
	if rec.State != StateRunning {
		return Record{}, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	if len(set.Secrets) > 0 {
		return Record{}, invalid("secrets are set when a sandbox is created; they cannot be changed")
	}
	if err := m.validateNetwork(&set, map[string]string{}); err != nil {
		return Record{}, err
	}
	if rec.Network != nil {
		set.Secrets = rec.Network.Secrets
		if set.Limits == (netpolicy.Limits{}) {
			set.Limits = rec.Network.Limits
		}
	}
	rec.Network = &set
	switch {
	case set.Attached():
		if err := m.attachNetwork(ctx, rec); err != nil {
			return Record{}, err
		}
	case m.cfg.Network != nil && m.cfg.Network.Attached(rec.ID):
		// Mode none on a wired box: keep the wiring, deny everything.
		if err := m.cfg.Network.Attach(ctx, rec.ID, "", 0, set); err != nil {
			return Record{}, err
		}
	}
	if err := m.save(ctx, b, rec); err != nil {
		return Record{}, err
	}
	log.G(ctx).Info("network settings changed", "sandbox", rec.ID, "mode", set.Mode, "allow", len(set.Allow))
	return rec, nil
}

// NetNS returns the ID of the running sandbox idOrName and its network
// namespace as its runtime reports it (State.NetNS): tunnels dial into it.
func (m *Manager) NetNS(ctx context.Context, idOrName string) (string, string, error) {
	b, err := m.lookup(idOrName)
	if err != nil {
		return "", "", err
	}
	m.mu.Lock()
	rec := b.rec
	m.mu.Unlock()
	if rec.State != StateRunning {
		return "", "", fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition)
	}
	st, err := m.cfg.Runtimes[rec.Runtime].State(ctx, rec.ID)
	if err != nil {
		return "", "", err
	}
	if st.NetNS == "" {
		return "", "", fmt.Errorf("sandbox %s has no network namespace (is it running?): %w", rec.ID, errdefs.ErrFailedPrecondition)
	}
	return rec.ID, st.NetNS, nil
}
