package sandbox

import (
	"bytes"
	"context"
	"fmt"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
)

// Agents is how the Manager reaches the agents in its boxes: the daemon's
// agent pool (internal/agentpool), which owns every connection to them.
// An agent is named by its address (Runtime.AgentAddr), whose scheme says
// how it is dialled.
type Agents interface {
	// Ready returns nil once the agent at addr answers its health check,
	// or an error when ctx ends first.
	Ready(ctx context.Context, addr string) error
	// Init sets the default environment, user and working directory of
	// the commands of the agent at addr (a warm pool's box handed out for
	// a request that asks for its own).
	Init(ctx context.Context, addr string, env []string, user, workdir string) error
	// ReadFile returns the regular file at path in the box, read as root;
	// errdefs.ErrNotFound when there is none.
	ReadFile(ctx context.Context, addr, path string) ([]byte, error)
	// WriteFile writes data to the file at path in the box, as root.
	WriteFile(ctx context.Context, addr, path string, data []byte) error
	// Warm runs a command that does nothing in a warm pool's new box
	// through the connections that requests use, so that the first
	// request after the hand-out finds a connection open and the agent's
	// exec path paged in.
	Warm(ctx context.Context, addr string) error
	// Drop closes the idle connections to the agent at addr: a
	// checkpoint cannot save a box with a connection to the daemon, and
	// an agent stopping on SIGTERM waits for them.
	Drop(addr string)
}

// installCA puts a box's CA certificate (pem) into its trust store
// through its agent at addr: its own file CACertPath (for
// NODE_EXTRA_CA_CERTS) and appended to the system bundle CABundlePath that
// OpenSSL, curl, Python and Go read. A bundle that cannot be read or
// written (a symlink, a read-only image) is logged, not fatal.
func (m *Manager) installCA(ctx context.Context, addr string, pem []byte) error {
	if err := m.cfg.Agents.WriteFile(ctx, addr, CACertPath, pem); err != nil {
		return err
	}
	bundle, err := m.cfg.Agents.ReadFile(ctx, addr, CABundlePath)
	switch {
	case errdefs.IsNotFound(err):
		bundle = nil // an image without a bundle gets one with the box's CA
	case err != nil:
		log.G(ctx).Warn("sandbox CA not added to the system bundle", "error", err)
		return nil
	}
	if len(bundle) > 0 && !bytes.HasSuffix(bundle, []byte("\n")) {
		bundle = append(bundle, '\n')
	}
	if err := m.cfg.Agents.WriteFile(ctx, addr, CABundlePath, append(bundle, pem...)); err != nil {
		log.G(ctx).Warn("sandbox CA not added to the system bundle", "error", err)
	}
	return nil
}

// ErrBusy is returned by WithAgent while an operation (a suspend, a
// pause, a removal) holds the box, or while it is not running.
var ErrBusy = fmt.Errorf("sandbox busy or not running: %w", errdefs.ErrUnavailable)

// WithAgent calls fn with the agent address of running sandbox id, while
// no lifecycle operation runs on it: a suspend's checkpoint cannot then
// find fn's connection to the agent open. It never waits for an
// operation: ErrBusy when one holds the box or it is not running,
// errdefs.ErrNotFound when it is gone. fn must be short (its own
// timeout): removing the box waits for it.
func (m *Manager) WithAgent(ctx context.Context, id string, fn func(ctx context.Context, addr string) error) error {
	m.mu.Lock()
	b, ok := m.boxes[id]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	}
	if !b.op.TryLock() {
		return ErrBusy
	}
	defer b.op.Unlock()
	m.mu.Lock()
	gone, rec := b.gone, b.rec
	m.mu.Unlock()
	switch {
	case gone:
		return fmt.Errorf("sandbox %q: %w", id, errdefs.ErrNotFound)
	case rec.State != StateRunning || rec.AgentAddr == "":
		return ErrBusy
	}
	return fn(ctx, rec.AgentAddr)
}
