// Package oci runs sandboxes as OCI containers with crun (default) or runc
// through their command line and a runtime-spec config.json. The sandbox's
// PID 1 is the agent ("/.corral/corral agent --listen-fd 3"), which gets its
// listening unix socket as fd 3; see Runtime for the mechanism and spec.go
// for the isolation settings. It works on Linux only; elsewhere New returns
// errdefs.ErrNotImplemented.
package oci
