// Package oci runs sandboxes as OCI containers with crun (default) or runc
// through their command line and a runtime-spec config.json. The sandbox's
// PID 1 is corral-init ("/.corral/init /.corral/corral agent --listen-fd 3
// --under-init ...", when sandbox.Spec.InitBinary is set), which starts the
// agent on demand, or else the agent itself ("/.corral/corral agent
// --listen-fd 3"). PID 1 gets the agent's listening unix socket as fd 3: the
// abstract socket "@corral-agent" inside the box's network namespace, which
// the daemon makes. See Runtime for the
// mechanism, spec.go for the isolation settings, pause_linux.go for the
// freezer and checkpoint_linux.go for CRIU checkpoints. It works on Linux
// only; elsewhere New returns errdefs.ErrNotImplemented.
package oci
