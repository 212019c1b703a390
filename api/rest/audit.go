package rest

import "time"

// Types of AuditEvent.
const (
	// AuditLifecycle is a change of a sandbox's record: created, a state
	// change, handed out of a pool, network settings, removed.
	AuditLifecycle = "lifecycle"
	// AuditExec is a command started through the API; AuditExecEnd its end.
	AuditExec    = "exec"
	AuditExecEnd = "exec_end"
	// AuditFile is a file operation through the API (/files and the
	// filesystem.Filesystem RPCs).
	AuditFile = "file"
	// AuditNetwork is a connection or DNS decision of the egress proxy.
	AuditNetwork = "network"
	// AuditAlert is a limit hit: 80%/90% of a limit, an OOM kill, a full
	// disk.
	AuditAlert = "alert"
	// AuditDropped says that events of the sandbox were lost: the oldest
	// ones to the per-sandbox bound, or new ones to a full queue.
	AuditDropped = "dropped"
)

// AuditEvent is one entry of a sandbox's audit trail (GET /v1/events,
// GET /v1/sandboxes/{id}/trajectory). Exactly one of the detail fields is
// set, as Type says.
type AuditEvent struct {
	// Seq orders the events of one sandbox (from 1, kept across daemon
	// restarts); events of different sandboxes are ordered by Time.
	Seq     uint64    `json:"seq"`
	Time    time.Time `json:"time"`
	Sandbox string    `json:"sandbox"`
	Type    string    `json:"type"`
	// Client is who asked, for the events of API requests (exec, file):
	// "uid=1000 pid=42" on the unix socket, the peer's address on TCP.
	Client string `json:"client,omitempty"`

	Lifecycle *LifecycleDetail `json:"lifecycle,omitempty"`
	Exec      *ExecDetail      `json:"exec,omitempty"`
	File      *FileDetail      `json:"file,omitempty"`
	Network   *NetworkEvent    `json:"network,omitempty"`
	Alert     *AlertDetail     `json:"alert,omitempty"`
	// Dropped is how many events of the sandbox were lost so far (a
	// "dropped" event).
	Dropped uint64 `json:"dropped,omitempty"`
}

// LifecycleDetail is a change of a sandbox's record.
type LifecycleDetail struct {
	// Change is created, state, handed_out, network, updated or removed.
	Change string `json:"change"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// ExecDetail is a command started through the API (exec) and how it
// ended (exec_end, which repeats the command).
type ExecDetail struct {
	// ID ties an exec_end to its exec: unique per sandbox and daemon run.
	ID   string   `json:"id"`
	Cmd  string   `json:"cmd"`
	Args []string `json:"args,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	User string   `json:"user,omitempty"`
	// Env are the names of the environment variables the request set;
	// their values are never recorded.
	Env []string `json:"env,omitempty"`
	Tag string   `json:"tag,omitempty"`
	// Pid is the command's pid in the box, once it started.
	Pid uint32 `json:"pid,omitempty"`
	// Start and End bound the command (End on exec_end).
	Start time.Time  `json:"start"`
	End   *time.Time `json:"end,omitempty"`
	// ExitCode is the exit status (-1: killed by a signal); Status
	// says it in words ("exit status 1", "signal: killed").
	ExitCode *int   `json:"exit_code,omitempty"`
	Status   string `json:"status,omitempty"`
	// Signal names the signal that killed the command ("killed").
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
	OOM      bool   `json:"oom_killed,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// StdoutBytes, StderrBytes and PtyBytes count the output streamed to
	// the client.
	StdoutBytes int64 `json:"stdout_bytes,omitempty"`
	StderrBytes int64 `json:"stderr_bytes,omitempty"`
	PtyBytes    int64 `json:"pty_bytes,omitempty"`
	// OutputBytes is all the output of a detached command, as its agent
	// counted it (its exec_end, recorded when it ended).
	OutputBytes int64 `json:"output_bytes,omitempty"`
	// CPUTimeUS is the CPU time (user and system) the command and the
	// descendants it waited for used, in microseconds; PeakMemoryBytes
	// the largest resident set size of one of them.
	CPUTimeUS       uint64 `json:"cpu_time_us,omitempty"`
	PeakMemoryBytes uint64 `json:"peak_memory_bytes,omitempty"`
	// Detached is set on an exec_end when the client left before the
	// command ended (exec -d): the exec_end is then recorded when the
	// command ends, from its agent, or with Error saying why its end
	// could not be learnt.
	Detached bool `json:"detached,omitempty"`
}

// FileDetail is a file operation through the API.
type FileDetail struct {
	// Op is read, write (/files; read_tar, write_tar for a tar stream of
	// a directory) or the filesystem.Filesystem RPC
	// (stat, make_dir, move, list_dir, remove, watch_dir, ...).
	Op   string `json:"op"`
	Path string `json:"path,omitempty"`
	// To is the destination of a move.
	To string `json:"to,omitempty"`
	// Bytes is what was read or written (/files).
	Bytes  int64  `json:"bytes,omitempty"`
	Status int    `json:"status"`
	User   string `json:"user,omitempty"`
}

// AlertDetail is a limit hit (package alerts).
type AlertDetail struct {
	Kind      string  `json:"kind"`
	Level     string  `json:"level"`
	Threshold float64 `json:"threshold,omitempty"`
	Value     float64 `json:"value"`
	Limit     float64 `json:"limit"`
	Message   string  `json:"message"`
}
