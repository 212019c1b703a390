package oci

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/internal/agentclient"
)

// BenchmarkAgentExec measures an exec round trip of /bin/true through the
// agent of a running box, at AgentAddr (the agent's socket in the box's
// network namespace), on a pooled connection (exec) and on a new
// connection each time (dial+exec).
func BenchmarkAgentExec(b *testing.B) {
	r := newTestRuntime(b, "crun")
	dir := b.TempDir()
	bin := filepath.Join(dir, "agent")
	build := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin, "./testdata/agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build agent: %v: %s", err, out)
	}
	spec := testSpec(b, defaultResources)
	spec.AgentBinary = bin
	ctx := context.Background()
	if err := r.Create(ctx, "bench", spec); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Delete(ctx, "bench") })
	if err := r.Start(ctx, "bench"); err != nil {
		b.Fatal(err)
	}
	newClient := func() *agentclient.Client {
		c, err := agentclient.New(r.AgentAddr("bench"))
		if err != nil {
			b.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := c.WaitReady(wctx); err != nil {
			b.Fatal(err)
		}
		return c
	}
	execTrue := func(c *agentclient.Client) {
		stream, err := c.Process.Start(ctx, connect.NewRequest(&pb.StartRequest{Process: &pb.ProcessConfig{Cmd: "/bin/true"}}))
		if err != nil {
			b.Fatal(err)
		}
		for stream.Receive() {
		}
		if err := stream.Err(); err != nil {
			b.Fatal(err)
		}
		stream.Close()
	}
	b.Run("exec", func(b *testing.B) {
		c := newClient()
		defer c.Close()
		execTrue(c)
		for b.Loop() {
			execTrue(c)
		}
	})
	b.Run("dial+exec", func(b *testing.B) {
		for b.Loop() {
			c, err := agentclient.New(r.AgentAddr("bench"))
			if err != nil {
				b.Fatal(err)
			}
			execTrue(c)
			c.Close()
		}
	})
}
