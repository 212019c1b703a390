// Package rest holds the JSON types of Corral's control-plane REST API, the
// Go mirror of api/openapi.yaml (the source of truth; a test keeps the two in
// step). The data plane (exec, files) is the agent's Connect protocol under
// /v1/sandboxes/{id}/agent/, generated under api/gen.
package rest

import "time"

// APIVersion prefixes every control-plane path.
const APIVersion = "v1"

// Resources are a sandbox's limits. Zero fields take the daemon's defaults.
type Resources struct {
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	// Image is an image name; empty means the daemon's default image.
	Image string `json:"image,omitempty"`
	// Name is an optional unique name usable wherever an ID is.
	Name      string            `json:"name,omitempty"`
	Resources Resources         `json:"resources,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	User      string            `json:"user,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// TimeoutSeconds removes the sandbox that long after creation; 0 = never.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
	// Runtime selects the OCI runtime ("crun", "runc"); empty = default.
	Runtime string `json:"runtime,omitempty"`
}

// Usage is a sandbox's resource use, read from its cgroup.
type Usage struct {
	CPUNanos         uint64 `json:"cpu_ns"`
	MemoryBytes      uint64 `json:"memory_bytes"`
	MemoryPeakBytes  uint64 `json:"memory_peak_bytes,omitempty"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes,omitempty"`
	Pids             uint64 `json:"pids"`
	PidsLimit        uint64 `json:"pids_limit,omitempty"`
	OOMKills         uint64 `json:"oom_kills"`
}

// Sandbox describes one sandbox (GET /v1/sandboxes/{id}).
type Sandbox struct {
	ID        string            `json:"id"`
	Name      string            `json:"name,omitempty"`
	Image     string            `json:"image"`
	Runtime   string            `json:"runtime"`
	State     string            `json:"state"` // creating, running, stopped, deleting, error
	Resources Resources         `json:"resources"`
	Env       map[string]string `json:"env,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	User      string            `json:"user,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Created   time.Time         `json:"created"`
	// Deadline is when the sandbox is removed by its timeout, if any.
	Deadline *time.Time `json:"deadline,omitempty"`
	// Usage is filled by GET /v1/sandboxes/{id} (not by the list).
	Usage *Usage `json:"usage,omitempty"`
	// AgentPath is the path prefix of the sandbox's data plane on this API.
	AgentPath string `json:"agent_path"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// Image describes one image (GET /v1/images).
type Image struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Size    int64     `json:"size"`
	Layers  int       `json:"layers"`
	Builtin bool      `json:"builtin,omitempty"`
	Default bool      `json:"default,omitempty"`
}

// ImageList is the body of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
}

// Version is the body of GET /v1/version.
type Version struct {
	Version   string   `json:"version"`
	GoVersion string   `json:"go_version"`
	Runtimes  []string `json:"runtimes"`
	Cgroup    string   `json:"cgroup"` // "v1", "v2" or "hybrid"
}

// Error is the body of every error response.
type Error struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is a stable machine code plus a human message.
type ErrorBody struct {
	// Code is one of: invalid_argument, not_found, already_exists,
	// failed_precondition, unavailable, unauthorized, resource_exhausted,
	// deadline_exceeded, internal.
	Code    string `json:"code"`
	Message string `json:"message"`
}
