package oci

import "testing"

// TestExplainCRIU picks the reason of a failed dump out of CRIU's error
// lines (as they appear in dump.log and restore.log).
func TestExplainCRIU(t *testing.T) {
	tests := []struct {
		name         string
		errs         []string
		want         string
		wantExternal bool
	}{
		{"tcp", []string{
			"(criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted",
			"(criu/sk-inet.c:199): inet: Connected TCP socket, consider using --tcp-established option.",
			"(criu/cr-dump.c:2111): Dumping FAILED.",
		}, "a TCP connection is established, and CRIU does not save those (inet: Connected TCP socket)", false},
		{"unix", []string{
			"(criu/sk-unix.c:940): unix: External socket is used. Consider using --ext-unix-sk option.",
			"(criu/cr-dump.c:2111): Dumping FAILED.",
		}, "a unix socket is connected to a process outside the sandbox, such as an open connection from the daemon to the agent (unix: External socket is used)", true},
		{"file outside", []string{
			"(criu/files-reg.c:1790): Can't lookup mount=27 for fd=1 path=/run/x/agent.log",
		}, "a process has a file open outside the sandbox's mounts (Can't lookup mount=27 for fd=1 path=/run/x/agent.log)", false},
		{"rlimit of another user", []string{
			"(criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted",
			"(criu/cr-dump.c:371): Can't get rlimit 0: Operation not permitted",
			"(criu/cr-dump.c:1720): Dump core (pid: 27681) failed with -1",
			"(criu/cr-dump.c:2111): Dumping FAILED.",
		}, "a process of the sandbox runs as a user other than root, and the daemon may not read its limits: that takes CAP_SYS_RESOURCE, which the daemon lacks on this host (Can't get rlimit 0: Operation not permitted)", false},
		{"other", []string{
			"(criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted",
			"(criu/files-reg.c:2353): Can't open file tmp/held on restore: No such file or directory",
			"(criu/cr-restore.c:2320): Restoring FAILED.",
		}, "criu: Can't open file tmp/held on restore: No such file or directory", false},
		{"none", nil, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ext := explainCRIU(tc.errs)
			if got != tc.want || ext != tc.wantExternal {
				t.Errorf("explainCRIU() = %q, %v; want %q, %v", got, ext, tc.want, tc.wantExternal)
			}
		})
	}
}
