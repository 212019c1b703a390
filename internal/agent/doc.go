// Package agent is the in-box agent: PID 1 of every sandbox. It serves the
// E2B envd-compatible Connect services process.Process and
// filesystem.Filesystem (api/gen), plus REST /health, /metrics and /files,
// over HTTP/1.1 and h2c on a unix socket handed over by the runtime.
//
// The agent forks commands itself (never through `runc exec`), reaps every
// child with one SIGCHLD reaper that fans exits out to waiters, streams output
// live with back-pressure, and reports OOM kills and timeouts in the end event.
//
// It imports no daemon-side package (enforced by deps_test.go): it must stay a
// small static binary that trusts nothing the box does.
package agent
