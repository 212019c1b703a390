package agent

import "time"

// Config is the agent's configuration. It has no config file: cmd/corral
// fills it from flags and the environment set by the runtime backend.
//
// To add a field: document it here, give it a default in withDefaults, and
// wire a flag in cmd/corral.
type Config struct {
	// ListenFD is an inherited, already listening socket (the runtime passes
	// fd 3). Used when > 0 and Listen is empty.
	ListenFD int
	// Listen is an address to listen on instead: "unix:///path/agent.sock",
	// "unix://@name" (an abstract socket, which accepts only peers outside
	// the agent's pid namespace, as an inherited one does; see Listen) or
	// "tcp://127.0.0.1:0" (tests).
	Listen string
	// TokenFile, with a tcp:// Listen, is a file holding the connection
	// token (the gvisor tier): the agent reads it, removes it, and serves
	// only connections that send the token first; see tokenOnly.
	TokenFile string
	// PidsMax, when > 0, is the box's pids limit, which the agent writes
	// to pids.max of the cgroup at CgroupPath (v1 layout, pids/pids.max)
	// before it starts anything: the gvisor tier, where that cgroup is
	// gVisor's own and bounds the box's tasks inside its kernel; the
	// host's cgroup has headroom above it for gVisor's kernel (see
	// oci.RunscHostPids). 0 leaves the cgroup as the runtime made it.
	PidsMax int64
	// CgroupPath is where the box's own cgroup is mounted (default
	// /sys/fs/cgroup); used for OOM detection and memory metrics.
	CgroupPath string
	// PasswdPath and GroupPath are the user databases (default /etc/passwd
	// and /etc/group of the box).
	PasswdPath string
	GroupPath  string
	// DefaultUser runs commands and resolves relative paths when a request
	// names no user. Empty means the agent's own user.
	DefaultUser string
	// Workdir is the default working directory of commands (the sandbox's
	// --workdir). Empty means the user's home directory, or "/" when the
	// user has none.
	Workdir string
	// Env is the default environment of commands ("K=V"). Nil means the
	// agent's own environment minus CORRAL_* variables.
	Env []string
	// ExitGrace bounds how long output of an exited command is still read
	// while a background child keeps its pipes open (default 100ms).
	ExitGrace time.Duration
	// StopGrace is how long children get after SIGTERM before SIGKILL when
	// the agent stops (default 2s).
	StopGrace time.Duration
	// UnderInit says corral-init (PID 1 of the box) started this agent on
	// demand: the agent tunes itself as PID 1 would (one P, reserved
	// threads), keeps its live defaults in the memfd corral-init passes as
	// fd StateFD, and exits once idle for IdleExit.
	UnderInit bool
	// IdleExit is how long the agent stays without a request in flight, a
	// running command or a watcher before it exits (0 = never). Only with
	// UnderInit: corral-init starts the next agent on the next connection.
	IdleExit time.Duration
	// OutputBuffer is how many bytes of each command's output the agent
	// keeps for replay (Connect's replay, `corral logs`): a ring buffer
	// that drops the oldest output. 0 means DefaultOutputBuffer; negative
	// keeps none.
	OutputBuffer int
	// EndedKeep and EndedTTL bound the commands that ended which the agent
	// still reports (List's include_ended) and finds (Connect, for the exit
	// status and the output): at most EndedKeep of them (default 64), for
	// at most EndedTTL after they ended (default 15m).
	EndedKeep int
	EndedTTL  time.Duration
	// Warm marks a warm pool's box: its idle clock starts only with the
	// first request other than GET /health, so a pooled box keeps its agent
	// until it is handed out and used.
	Warm bool
}

// DefaultOutputBuffer is Config.OutputBuffer's default.
const DefaultOutputBuffer = 1 << 20

// StateFD is the fd of the memfd in which an agent under corral-init keeps
// its state for the next agent.
const StateFD = 4

func (c Config) withDefaults() Config {
	if c.CgroupPath == "" {
		c.CgroupPath = "/sys/fs/cgroup"
	}
	if c.PasswdPath == "" {
		c.PasswdPath = "/etc/passwd"
	}
	if c.GroupPath == "" {
		c.GroupPath = "/etc/group"
	}
	if c.ExitGrace == 0 {
		c.ExitGrace = 100 * time.Millisecond
	}
	if c.StopGrace == 0 {
		c.StopGrace = 2 * time.Second
	}
	if c.OutputBuffer == 0 {
		c.OutputBuffer = DefaultOutputBuffer
	}
	if c.EndedKeep == 0 {
		c.EndedKeep = 64
	}
	if c.EndedTTL == 0 {
		c.EndedTTL = 15 * time.Minute
	}
	return c
}
