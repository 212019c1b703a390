package sandbox

import (
	"context"
	"time"

	"github.com/corral-sandbox/corral/internal/network"
)

// RecordState is a sandbox's lifecycle state as the Manager records it.
type RecordState string

const (
	// StateCreating is written before any resource is made, so a crash
	// mid-create leaves a record that Recover removes with what it owns.
	StateCreating RecordState = "creating"
	StateRunning  RecordState = "running"
	// StateDeleting is written before teardown starts.
	StateDeleting RecordState = "deleting"
	// StateError marks a sandbox whose teardown failed; Delete with force
	// removes it.
	StateError RecordState = "error"
)

// Record is the persistent description of one sandbox. It holds everything
// needed to find and remove what the sandbox owns after a daemon restart:
// the runtime that made it and its layer key (its ID).
type Record struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Image     string            `json:"image"`
	Runtime   string            `json:"runtime"`
	State     RecordState       `json:"state"`
	Resources Resources         `json:"resources"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	User      string            `json:"user,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Created   time.Time         `json:"created"`
	// Deadline is when the sandbox's timeout removes it; zero means never.
	Deadline time.Time `json:"deadline,omitzero"`
	// AgentAddr is the runtime's address of the sandbox's agent.
	AgentAddr string `json:"agent_addr,omitempty"`
	// Ephemeral sandboxes belong to an operation of the daemon (a build
	// step): a restarted daemon removes them instead of recovering them.
	Ephemeral bool `json:"ephemeral,omitempty"`
	// Network is the box's egress settings; nil means mode none.
	Network *network.Settings `json:"network,omitempty"`
}

// CreateRequest asks for a new sandbox. Zero fields take the Manager's
// defaults.
type CreateRequest struct {
	Image     string
	Name      string
	Resources Resources
	Env       map[string]string
	Workdir   string
	User      string
	Labels    map[string]string
	// Timeout removes the sandbox that long after creation; 0 = never.
	Timeout time.Duration
	Runtime string

	// Base, when set, is the image to use instead of looking Image up
	// (Image is then only the name recorded). Builds use it for their
	// intermediate steps; the API never sets it.
	Base *Image
	// Ephemeral marks a sandbox that lives only as long as the daemon's
	// operation that made it (see Record.Ephemeral). Builds set it.
	Ephemeral bool
	// HostNetwork shares the host's network namespace instead of giving
	// the sandbox a loopback-only one. Only builds set it (their steps
	// fetch packages); the API never does.
	HostNetwork bool
	// Network is the box's egress policy, limits and secrets; nil means
	// mode none (loopback only).
	Network *network.Settings
}

// Store persists sandbox records (implemented by internal/meta). Writes are
// durable when they return.
type Store interface {
	// PutSandbox creates or replaces the record with rec.ID.
	PutSandbox(ctx context.Context, rec *Record) error
	// DeleteSandbox removes the record; a missing record is success.
	DeleteSandbox(ctx context.Context, id string) error
	// ListSandboxes returns every record.
	ListSandboxes(ctx context.Context) ([]*Record, error)
}

// ImageStore is what the Manager needs from the image store.
type ImageStore interface {
	// Get returns the image name; errdefs.ErrNotFound when unknown.
	Get(ctx context.Context, name string) (Image, error)
	// List returns every image (used to name the known ones in errors).
	List(ctx context.Context) ([]Image, error)
}

// LayerLister is implemented by layer stores that can list their writable
// (prepared, not committed) layers, so that Recover can remove those that
// no sandbox record owns.
type LayerLister interface {
	Active(ctx context.Context) ([]string, error)
}

// AgentReadyFunc returns nil once the agent at addr answers, or an error
// when ctx ends first.
type AgentReadyFunc func(ctx context.Context, addr string) error
