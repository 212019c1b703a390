// Command agent is a stand-in for "corral agent" used by the daemon's
// privileged tests until cmd/corral exists: it serves the agent on the
// socket inherited as fd 3 ("agent --listen-fd 3").
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/corral-sandbox/corral/internal/agent"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "agent" {
		fmt.Fprintln(os.Stderr, "usage: agent agent --listen-fd 3")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Run(ctx, agent.Config{ListenFD: 3}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
