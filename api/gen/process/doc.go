// Package process is the generated Go code of the agent's process.Process
// protocol (api/proto/process); see api/generate.go.
package process
