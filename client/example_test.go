package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/client/clienttest"
)

// Runs a command against a fake daemon (clienttest), as a test would.
func Example() {
	srv := clienttest.New().Server()
	defer srv.Close()
	ctx := context.Background()

	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, rest.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.RemoveSandbox(ctx, sb.ID, true)

	res, err := c.Sandbox(sb.ID).Exec(ctx, client.ExecOptions{
		Cmd:    []string{"echo", "hello", "from", "the", "box"},
		Stdout: os.Stdout,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("exit code:", res.ExitCode)
	// Output:
	// hello from the box
	// exit code: 0
}

// Runs a command with limits on the local daemon and reports an OOM kill.
func ExampleSandbox_Exec() {
	ctx := context.Background()
	c, err := client.New() // CORRAL_HOST or unix:///run/corral/corral.sock
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, rest.CreateSandboxRequest{
		Resources: rest.Resources{MemoryBytes: 64 << 20, CPUs: 1},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.RemoveSandbox(ctx, sb.ID, true)

	res, err := c.Sandbox(sb.ID).Exec(ctx, client.ExecOptions{
		Cmd:     []string{"sh", "-c", "cat > /tmp/in && wc -c /tmp/in"},
		Stdin:   strings.NewReader("some input"),
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
		Timeout: 10 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	if res.OOMKilled || res.TimedOut {
		fmt.Println(res.Error)
	}
}

// Copies a file into a sandbox and reads it back.
func ExampleSandbox_Upload() {
	ctx := context.Background()
	c, err := client.New(client.WithHost("tcp://127.0.0.1:7070"), client.WithToken(os.Getenv("TOKEN")))
	if err != nil {
		log.Fatal(err)
	}
	s := c.Sandbox("my-sandbox")
	if err := s.Upload(ctx, "/tmp/hello.txt", strings.NewReader("hello\n")); err != nil {
		log.Fatal(err)
	}
	rc, err := s.Download(ctx, "/tmp/hello.txt")
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Close()
	_, _ = os.Stdout.ReadFrom(rc)
}

// Builds an image from a spec and its copy sources, printing the steps.
func ExampleClient_Build() {
	srv := clienttest.New().Server()
	defer srv.Close()
	ctx := context.Background()
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "spec")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	spec := dir + "/corral.yaml"
	if err := os.WriteFile(spec, []byte("name: py-agent\nfrom: debian:bookworm\npackages: [python3]\n"), 0o644); err != nil {
		log.Fatal(err)
	}

	bc, err := client.BuildContext(spec, nil) // plus the spec's copy sources
	if err != nil {
		log.Fatal(err)
	}
	defer bc.Close()
	img, err := c.Build(ctx, bc, rest.BuildOptions{Tag: "py-agent:1"}, func(ev rest.Event) {
		if ev.Type == "step" {
			fmt.Printf("[%d/%d] %s (cached: %v)\n", ev.Step, ev.Steps, ev.Name, ev.Cached)
		}
	})
	var be *client.BuildError
	if errors.As(err, &be) {
		log.Fatalf("step %d failed with exit code %d", be.Step, be.ExitCode)
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println("built", img.Name)
	// Output:
	// [1/2] packages python3 (cached: true)
	// [2/2] run echo hi (cached: false)
	// built py-agent:1
}

// Prepares a sandbox once, then forks it: every copy starts with its files.
func ExampleClient_Fork() {
	srv := clienttest.New().Server()
	defer srv.Close()
	ctx := context.Background()
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		log.Fatal(err)
	}
	base, err := c.CreateSandbox(ctx, rest.CreateSandboxRequest{Image: "busybox", Labels: map[string]string{"task": "t1"}})
	if err != nil {
		log.Fatal(err)
	}
	// ... install dependencies in base ...
	copies, err := c.Fork(ctx, base.ID, client.ForkOptions{Count: 2, Labels: map[string]string{"attempt": "a"}})
	if err != nil {
		log.Fatal(err)
	}
	for _, sb := range copies {
		fmt.Println(sb.State, "from", sb.Origin == base.ID, sb.Labels["task"], sb.Labels["attempt"])
	}
	// Output:
	// running from true t1 a
	// running from true t1 a
}

// Snapshots a prepared sandbox and starts a new one from the snapshot.
func ExampleClient_Snapshot() {
	srv := clienttest.New().Server()
	defer srv.Close()
	ctx := context.Background()
	c, err := client.New(client.WithHost(srv.URL))
	if err != nil {
		log.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, rest.CreateSandboxRequest{Image: "busybox"})
	if err != nil {
		log.Fatal(err)
	}
	snap, err := c.Snapshot(ctx, sb.ID, "deps-ready")
	if err != nil {
		log.Fatal(err)
	}
	fresh, err := c.CreateSandbox(ctx, rest.CreateSandboxRequest{Image: snap.Name, IdleTimeoutSeconds: 300})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(snap.Source, fresh.Origin, fresh.IdleAction)
	// Output:
	// snapshot deps-ready suspend
}
