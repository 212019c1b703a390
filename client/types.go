package client

import (
	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/units"
)

// The request and response types of the daemon's REST API, under the names
// a program using this package writes. They are aliases of the wire types
// in package api/rest (the Go mirror of the OpenAPI document), so a program
// needs to import only this package, and a value of one is a value of the
// other.

// Sandboxes.
type (
	// CreateOptions describe a sandbox for CreateSandbox: image, name,
	// limits, environment, lifetime, network policy and secrets. The zero
	// value is the daemon's default image with its default limits.
	CreateOptions = rest.CreateSandboxRequest
	// SandboxInfo describes a sandbox: its state, settings and (from
	// GetSandbox) its resource use. Sandbox is the handle for running
	// commands and moving files.
	SandboxInfo = rest.Sandbox
	// Resources are a sandbox's limits; zero fields take the daemon's
	// defaults. Write sizes with MiB and GiB or ParseBytes:
	// Resources{MemoryBytes: 512 * MiB, CPUs: 1}.
	Resources = rest.Resources
	// Usage is a sandbox's resource use, read from its cgroup.
	Usage = rest.Usage
	// Suspension is the saved state of a suspended sandbox.
	Suspension = rest.Suspension
	// ProcessesLost says when and why a resume lost the saved processes.
	ProcessesLost = rest.ProcessesLost
)

// Networks, secrets and ports.
type (
	// Network is a sandbox's egress policy (CreateOptions.Network,
	// SetNetwork).
	Network = rest.Network
	// NetworkLimits bound a sandbox's egress.
	NetworkLimits = rest.NetworkLimits
	// NetworkEvent is one egress attempt of a sandbox (NetworkLog).
	NetworkEvent = rest.NetworkEvent
	// ProcessRef names the process of a sandbox behind a NetworkEvent.
	ProcessRef = rest.ProcessRef
	// SecretBinding binds a stored secret to a sandbox at create.
	SecretBinding = rest.SecretBinding
	// Secret describes a stored secret; no call returns a value.
	Secret = rest.Secret
	// VolumeMount mounts a named volume into a sandbox at create.
	VolumeMount = rest.VolumeMount
	// Volume describes a named volume.
	Volume = rest.Volume
	// CreateVolumeOptions are the body of CreateVolume.
	CreateVolumeOptions = rest.CreateVolumeRequest
	// Port is an exposed port of a sandbox and the URL that reaches it.
	Port = rest.Port
)

// Images and builds.
type (
	// Image describes one image (ListImages) or snapshot.
	Image = rest.Image
	// ImageInfo is everything known about one image (InspectImage).
	ImageInfo = rest.ImageInfo
	// ImageLayer is one layer of an image.
	ImageLayer = rest.ImageLayer
	// ImageSpec are the runtime settings of an image built from a spec.
	ImageSpec = rest.ImageSpec
	// PullOptions name the image PullImage pulls and where it is stored.
	PullOptions = rest.PullRequest
	// BootstrapOptions describe the Debian image BootstrapImage makes.
	BootstrapOptions = rest.BootstrapRequest
	// PruneOptions tune PruneImages.
	PruneOptions = rest.PruneRequest
	// PruneReport is what PruneImages removed.
	PruneReport = rest.PruneReport
	// BuildOptions tune Build: the image's name, the spec's file name in
	// the build context and whether the cache is used.
	BuildOptions = rest.BuildOptions
	// Event is one event of a pull, load, bootstrap or build, passed to
	// the callback of those calls as it arrives.
	Event = rest.Event
	// Progress is the state of one layer of a pull or load.
	Progress = rest.Progress
	// ErrorBody is the failure of an "error" Event.
	ErrorBody = rest.ErrorBody
)

// Version is the daemon's version and capabilities (Version).
type Version = rest.Version

// Byte sizes, for Resources and the other byte counts of the API:
// 256 * MiB.
const (
	KiB = 1 << 10
	MiB = 1 << 20
	GiB = 1 << 30
	TiB = 1 << 40
)

// ParseBytes parses a byte size as the CLI and corral.yaml take it: a
// non-negative number with an optional unit k, m, g or t (case-insensitive,
// optionally followed by "b" or "ib", all powers of 1024) such as "512m",
// "1g", "1.5GiB", "64 MiB" or "1048576" (plain bytes). Fractions are rounded
// down to whole bytes. Errors are classified errdefs.ErrInvalidArgument.
func ParseBytes(s string) (int64, error) { return units.ParseBytes(s) }

// FormatBytes prints a byte count with a binary unit, rounded to one
// decimal: "512 B", "64 MiB", "1.5 GiB".
func FormatBytes(n int64) string { return units.FormatBytes(n) }
