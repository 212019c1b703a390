// Package tunnel exposes ports of a sandbox on the daemon's tunnel listener:
// `corral port expose ID PORT` records an Exposure with a random token in the
// Registry, and Handler forwards authenticated HTTP and WebSocket traffic for
// it to 127.0.0.1:PORT inside the box through a Dialer the daemon provides.
//
// Two URL forms reach an exposure:
//
//   - path form, /t/{id}/{port}/{rest...}, on any host of the listener;
//   - host form, {port}-{id}.{Domain}, when Config.Domain is set.
//
// Every request carries the exposure's token (bearer header, the
// X-Corral-Tunnel-Token header, the corral_token query parameter or the
// cookie that parameter sets). A request without a valid token gets the same
// 401 whether or not the sandbox or the exposure exists, so the listener
// cannot be used to probe for sandboxes. The token never reaches the box.
//
// All sandboxes of the path form share one browser origin: a page served by
// one exposure can make same-origin requests to another whose cookie the
// browser holds. The host form gives each exposure its own origin and a
// host-only cookie; operators who expose untrusted web content to browsers
// should set a Domain with a wildcard DNS record.
//
// The Host header is forwarded unchanged (X-Forwarded-Host carries it too),
// as tunnels such as ngrok do by default; a dev server that checks Host must
// allow the tunnel's host name.
package tunnel

import (
	"cmp"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/identifiers"
)

// tokenBytes is the number of random bytes in a token.
const tokenBytes = 32

// fileVersion is the version of the registry file; a newer one is refused.
const fileVersion = 1

// Exposure is one exposed port of one sandbox.
type Exposure struct {
	Sandbox string    `json:"sandbox"`
	Port    int       `json:"port"`
	Token   string    `json:"token"` // 32 random bytes, base64url, no padding
	Created time.Time `json:"created"`
}

type key struct {
	sandbox string
	port    int
}

// file is the on-disk form of a Registry.
type file struct {
	Version   int        `json:"version"`
	Exposures []Exposure `json:"exposures"`
}

// Registry keeps exposures in memory and in one JSON file, which it rewrites
// atomically (temp file, fsync, rename, fsync of the directory; mode 0600)
// on every change. It is safe for concurrent use.
type Registry struct {
	path string

	mu sync.RWMutex
	// exp holds every exposure; guarded by mu.
	exp map[key]Exposure
}

// Open loads the registry stored at path, or starts an empty one when the
// file does not exist yet. The file's directory is created (mode 0700) if
// needed.
func Open(path string) (*Registry, error) {
	r := &Registry{path: path, exp: make(map[key]Exposure)}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("open tunnel registry: %w", err)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open tunnel registry: %w", err)
	}
	var f file
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read tunnel registry %s: %w", path, err)
	}
	if f.Version > fileVersion {
		return nil, fmt.Errorf("read tunnel registry %s: version %d is newer than %d: %w", path, f.Version, fileVersion, errdefs.ErrFailedPrecondition)
	}
	for _, e := range f.Exposures {
		if err := validate(e.Sandbox, e.Port); err != nil {
			return nil, fmt.Errorf("read tunnel registry %s: %w", path, err)
		}
		if e.Token == "" {
			return nil, fmt.Errorf("read tunnel registry %s: exposure %s:%d has no token: %w", path, e.Sandbox, e.Port, errdefs.ErrDataLoss)
		}
		r.exp[key{e.Sandbox, e.Port}] = e
	}
	return r, nil
}

func validate(sandbox string, port int) error {
	if err := identifiers.Validate("sandbox id", sandbox); err != nil {
		return err
	}
	if port < 1 || port > 65535 {
		return fmt.Errorf("port %d is not in 1..65535: %w", port, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Expose records an exposure of port in sandbox with a new token and
// returns it. Exposing a port that is already exposed returns the existing
// exposure, token included. Errors: errdefs.ErrInvalidArgument for a bad
// sandbox ID or a port outside 1..65535.
func (r *Registry) Expose(sandbox string, port int) (Exposure, error) {
	if err := validate(sandbox, port); err != nil {
		return Exposure{}, fmt.Errorf("expose port: %w", err)
	}
	k := key{sandbox, port}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.exp[k]; ok {
		return e, nil
	}
	e := Exposure{Sandbox: sandbox, Port: port, Token: newToken(), Created: time.Now().UTC().Truncate(time.Second)}
	r.exp[k] = e
	if err := r.saveLocked(); err != nil {
		delete(r.exp, k)
		return Exposure{}, fmt.Errorf("expose port %d of sandbox %s: %w", port, sandbox, err)
	}
	return e, nil
}

// Unexpose removes the exposure of port in sandbox. Errors:
// errdefs.ErrNotFound when the port is not exposed.
func (r *Registry) Unexpose(sandbox string, port int) error {
	k := key{sandbox, port}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.exp[k]
	if !ok {
		return fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, sandbox, errdefs.ErrNotFound)
	}
	delete(r.exp, k)
	if err := r.saveLocked(); err != nil {
		r.exp[k] = e
		return fmt.Errorf("unexpose port %d of sandbox %s: %w", port, sandbox, err)
	}
	return nil
}

// List returns the exposures of sandbox, or of every sandbox when sandbox is
// "", sorted by sandbox and port.
func (r *Registry) List(sandbox string) []Exposure {
	r.mu.RLock()
	out := make([]Exposure, 0, len(r.exp))
	for k, e := range r.exp {
		if sandbox == "" || k.sandbox == sandbox {
			out = append(out, e)
		}
	}
	r.mu.RUnlock()
	slices.SortFunc(out, func(a, b Exposure) int {
		return cmp.Or(cmp.Compare(a.Sandbox, b.Sandbox), cmp.Compare(a.Port, b.Port))
	})
	return out
}

// RemoveSandbox drops every exposure of sandbox. It is idempotent: a sandbox
// without exposures is success.
func (r *Registry) RemoveSandbox(sandbox string) error {
	return r.drop(func(s string) bool { return s == sandbox })
}

// Keep drops the exposures of every sandbox for which alive returns false;
// the daemon calls it at start with a function that asks whether a sandbox
// still exists. alive is called once per sandbox, without the registry's
// lock held.
func (r *Registry) Keep(alive func(sandbox string) bool) error {
	r.mu.RLock()
	seen := make(map[string]bool)
	for k := range r.exp {
		seen[k.sandbox] = false
	}
	r.mu.RUnlock()
	for s := range seen {
		seen[s] = !alive(s)
	}
	return r.drop(func(s string) bool { return seen[s] })
}

// drop removes the exposures whose sandbox matches gone and saves the file
// if anything was removed.
func (r *Registry) drop(gone func(sandbox string) bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	removed := make(map[key]Exposure)
	for k, e := range r.exp {
		if gone(k.sandbox) {
			removed[k] = e
			delete(r.exp, k)
		}
	}
	if len(removed) == 0 {
		return nil
	}
	if err := r.saveLocked(); err != nil {
		for k, e := range removed {
			r.exp[k] = e
		}
		return fmt.Errorf("remove exposures: %w", err)
	}
	return nil
}

// lookup returns the exposure of port in sandbox.
func (r *Registry) lookup(sandbox string, port int) (Exposure, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e, ok := r.exp[key{sandbox, port}]
	return e, ok
}

// saveLocked writes the registry to its file atomically. r.mu must be held.
func (r *Registry) saveLocked() error {
	f := file{Version: fileVersion, Exposures: make([]Exposure, 0, len(r.exp))}
	for _, e := range r.exp {
		f.Exposures = append(f.Exposures, e)
	}
	slices.SortFunc(f.Exposures, func(a, b Exposure) int {
		return cmp.Or(cmp.Compare(a.Sandbox, b.Sandbox), cmp.Compare(a.Port, b.Port))
	})
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteDurable(r.path, append(b, '\n'), 0o600)
}

// newToken returns 32 random bytes, base64url without padding.
func newToken() string {
	var b [tokenBytes]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	return base64.RawURLEncoding.EncodeToString(b[:])
}
