package agent

import (
	"testing"

	pb "github.com/corral-sandbox/corral/api/gen/process"
)

// BenchmarkExecTrue is one exec round trip of `true` over the unix socket:
// Start, fork, start event, reap, end event.
func BenchmarkExecTrue(b *testing.B) {
	c := startAgent(b, Config{})
	req := &pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}}
	for b.Loop() {
		r, err := run(b.Context(), b, c, req, nil)
		if err != nil {
			b.Fatal(err)
		}
		if r.end.GetExitCode() != 0 {
			b.Fatalf("end = %v; want exit 0", r.end)
		}
	}
}
