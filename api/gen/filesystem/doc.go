// Package filesystem is the generated Go code of the agent's
// filesystem.Filesystem protocol (api/proto/filesystem); see api/generate.go.
package filesystem
