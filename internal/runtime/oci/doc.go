// Package oci runs sandboxes as OCI containers with crun (default) or runc
// through their command line and a runtime-spec config.json. The sandbox's
// PID 1 is the agent ("/.corral/corral agent --listen-fd 3"), which gets its
// listening unix socket as fd 3: the abstract socket "@corral-agent" inside
// the box's network namespace, which the daemon makes. See Runtime for the
// mechanism, spec.go for the isolation settings, pause_linux.go for the
// freezer and checkpoint_linux.go for CRIU checkpoints. It works on Linux
// only; elsewhere New returns errdefs.ErrNotImplemented.
package oci
