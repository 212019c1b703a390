// Command agent is the in-box agent for the OCI runtime's privileged tests:
// "agent agent --listen-fd 3 [flags]" serves internal/agent on the socket
// the runtime passes as fd 3, as "corral agent" does, without building the
// whole corral binary. "agent probe <abstract name>" is a box process
// trying to talk to its own agent: it prints "answered: <status line>" or
// "refused: <error>".
package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/corral-sandbox/corral/internal/agent"
)

func main() {
	switch {
	case len(os.Args) == 3 && os.Args[1] == "probe":
		probe(os.Args[2])
	case len(os.Args) >= 2 && os.Args[1] == "agent":
		if err := agent.Run(context.Background(), agent.Config{ListenFD: 3}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: agent agent --listen-fd 3 | agent probe @name")
		os.Exit(2)
	}
}

func probe(name string) {
	c, err := net.Dial("unix", name)
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, "GET /health HTTP/1.1\r\nHost: agent\r\n\r\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("refused:", err)
		return
	}
	fmt.Println("answered:", line)
}
