package oci

// Opt tunes a Runtime beyond its Config (tests, embedding).
type Opt func(*Runtime)

// WithProcessArgs replaces the sandbox's PID 1 command line (by default
// "/.corral/corral agent --listen-fd 3"). Tests use it to run a stand-in
// such as busybox instead of the agent; the listening socket is still
// passed as fd 3.
func WithProcessArgs(args ...string) Opt {
	return func(r *Runtime) { r.processArgs = args }
}
