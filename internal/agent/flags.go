package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// AddFlags defines the agent's command-line flags on fs, filling c. Both
// `corral agent` and the slim corral-agent binary use it, so the two take
// the same arguments.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.ListenFD, "listen-fd", 0, "inherited listening socket (the runtime passes 3)")
	fs.StringVar(&c.Listen, "listen", "", "address to listen on instead: unix:///path or tcp://127.0.0.1:0")
	fs.StringVar(&c.TokenFile, "token-file", "", "with a tcp:// --listen: read the connection token from this file, remove it, and serve only connections that send it first")
	fs.Int64Var(&c.PidsMax, "pids-max", 0, "write this pids limit to the box's own cgroup before serving (the gvisor tier: gVisor's cgroup; 0 = leave it)")
	fs.StringVar(&c.DefaultUser, "user", "", "default user of commands (default: the agent's own)")
	fs.StringVar(&c.Workdir, "workdir", "", "default working directory of commands (default: the user's home, else /)")
	fs.BoolVar(&c.UnderInit, "under-init", false, "started on demand by corral-init (PID 1 of the box): keep state in fd 4, exit when idle")
	fs.DurationVar(&c.IdleExit, "idle-exit", 0, "with --under-init: exit after this long without requests, commands or watchers (0 = never)")
	fs.IntVar(&c.OutputBuffer, "output-buffer", 0, "bytes of each command's output kept for replay (0 = 1 MiB, -1 = none)")
	fs.BoolVar(&c.Warm, "warm", false, "with --idle-exit: a warm pool's box; the idle clock starts at the first request other than GET /health")
}

// Validate reports a configuration the agent cannot start with.
func (c Config) Validate() error {
	if c.Listen == "" && c.ListenFD <= 0 {
		return errors.New("one of --listen-fd and --listen is required")
	}
	if c.TokenFile != "" && !strings.HasPrefix(c.Listen, "tcp://") {
		return errors.New("--token-file needs a tcp:// --listen")
	}
	if c.PidsMax < 0 {
		return errors.New("--pids-max must not be negative")
	}
	if c.IdleExit < 0 {
		return errors.New("--idle-exit must not be negative")
	}
	if (c.IdleExit > 0 || c.Warm) && !c.UnderInit {
		return errors.New("--idle-exit and --warm need --under-init: only corral-init starts a new agent after one exits")
	}
	return nil
}

// Main is the slim agent binary's entry point: it parses args (an optional
// leading "agent", then the flags of AddFlags), runs the agent and returns
// the process exit code. The runtime starts every box's agent as
// `<binary> agent --listen-fd 3`, whichever binary it is.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "agent" {
		args = args[1:]
	}
	var cfg Config
	fs := flag.NewFlagSet("corral-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: corral-agent [agent] [flags]\n\n"+
			"The in-sandbox agent, started by the daemon as PID 1 of every sandbox.\n"+
			"It is `corral agent` without the rest of corral: see `corral agent --help`.\n\n")
		fs.PrintDefaults()
	}
	cfg.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "corral-agent: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(stderr, "corral-agent:", err)
		return 2
	}
	if err := Run(ctx, cfg); err != nil {
		fmt.Fprintln(stderr, "corral-agent:", err)
		return 1
	}
	return 0
}
