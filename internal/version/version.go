// Package version holds the build's version, set by the linker:
// -X github.com/corral-sandbox/corral/internal/version.Version=...
package version

// Version is the release or git description of this build.
var Version = "dev"
