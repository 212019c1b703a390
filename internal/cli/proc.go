package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/client"
)

// processArg parses PID|TAG: a number is a pid, anything else a tag (so
// exec refuses a --tag that is a number).
func processArg(s string) (client.ProcessSelector, error) {
	if s == "" {
		return client.ProcessSelector{}, fmt.Errorf("empty PID|TAG: give the pid that exec -d printed or its --tag")
	}
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		if n == 0 {
			return client.ProcessSelector{}, fmt.Errorf("pid 0 is not a process: give the pid that exec -d printed or its --tag")
		}
		return client.ProcessSelector{PID: uint32(n)}, nil
	}
	return client.ProcessSelector{Tag: s}, nil
}

// checkTag refuses a --tag that PID|TAG arguments would read as a pid.
func checkTag(tag string) error {
	if tag == "" {
		return nil
	}
	if _, err := strconv.ParseUint(tag, 10, 64); err == nil {
		return fmt.Errorf("--tag %q is a number, which logs, attach, kill and wait take for a pid: use a name such as job-%s", tag, tag)
	}
	return nil
}

// latestProcess picks the command logs shows without PID|TAG: the one
// started last, running or ended.
func latestProcess(ctx context.Context, s *client.Sandbox) (client.ProcessSelector, error) {
	ps, err := s.ListProcesses(ctx, client.ListProcessesOptions{Ended: true})
	if err != nil {
		return client.ProcessSelector{}, err
	}
	var last *client.Process
	for i := range ps {
		if last == nil || ps[i].StartedAt.After(last.StartedAt) {
			last = &ps[i]
		}
	}
	if last == nil {
		return client.ProcessSelector{}, fmt.Errorf("no command ran in sandbox %s through exec (or they ended too long ago)", s.ID())
	}
	return client.ProcessSelector{PID: last.PID}, nil
}

func (a *app) logsCmd() *cobra.Command {
	var opts client.LogsOptions
	cmd := &cobra.Command{
		Use:   "logs [-f] [--tail N] ID [PID|TAG]",
		Short: "Show the output of a command in a sandbox, from its start",
		Long: `Show the output of a command started with exec (-d or not), from its start:
the agent keeps 1 MiB of each command's output (its --output-buffer): its
first bytes and its last, also for a while after the command ended. Where it
dropped bytes in between, a line "[corral: N bytes not kept]" on stderr marks
the gap, unless the daemon's log file of the command ([output_log]) has them.
With [output_log] on, a command the agent forgot is still found by its pid. Without PID|TAG,
the command started last. A number is a pid, anything else the
--tag given to exec. stdout and stderr go to corral's stdout and stderr.

With -f, follow the output until the command ends, then exit with its exit
code as exec does.`,
		Example: `  corral exec -d --tag server web -- python3 -m http.server
  corral logs web server
  corral logs -f --tail 20 web server`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Tail < 0 {
				return fmt.Errorf("--tail %d must not be negative (0 shows all)", opts.Tail)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s := c.Sandbox(args[0])
			var sel client.ProcessSelector
			if len(args) == 2 {
				sel, err = processArg(args[1])
			} else {
				sel, err = latestProcess(cmd.Context(), s)
			}
			if err != nil {
				return err
			}
			opts.Stdout, opts.Stderr = a.streams.Out, a.streams.Err
			opts.Gap = func(n uint64) { fmt.Fprintf(a.streams.Err, "[corral: %d bytes not kept]\n", n) }
			res, err := s.Logs(cmd.Context(), sel, opts)
			if err != nil || res == nil || !opts.Follow {
				return err
			}
			return resultError(res, 0)
		},
	}
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "follow the output until the command ends; exit with its exit code")
	cmd.Flags().IntVarP(&opts.Tail, "tail", "n", 0, "show only the last N lines of the kept output (0 = all)")
	return cmd
}

func (a *app) attachCmd() *cobra.Command {
	var noStdin, noReplay bool
	cmd := &cobra.Command{
		Use:   "attach [--no-stdin] ID PID|TAG",
		Short: "Attach to a running command's output, input and terminal",
		Long: `Attach to a command started with exec -d: show its output from the start (as
logs does; --no-replay for the live output only), forward this terminal's
input to it and, for a command started with -t, put this terminal in raw
mode and pass its size on. Exit with the command's exit code when it ends,
as exec does. Input needs a command started with -i or -t; when corral's
stdin ends, the command's stdin stays open, so attach can be repeated.

Ctrl-C detaches a command without a terminal (it keeps running; stop it
with corral kill); on a terminal, Ctrl-C goes to the command, and closing
corral (or its terminal) detaches.`,
		Example: `  corral exec -d -it --tag shell web -- sh
  corral attach web shell
  corral attach --no-stdin web 42`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := processArg(args[1])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			s := c.Sandbox(args[0])
			ctx := cmd.Context()
			tty := false
			if ps, err := s.Processes(ctx); err == nil {
				for _, p := range ps {
					if sel.PID == p.PID || sel.Tag != "" && sel.Tag == p.Tag {
						tty = p.TTY
					}
				}
			}
			opts := client.AttachOptions{Stdout: a.streams.Out, Stderr: a.streams.Err, Replay: !noReplay}
			if !noStdin {
				opts.Stdin = a.streams.In
			}
			if tty {
				eo := client.ExecOptions{Stdin: opts.Stdin}
				restore, err := a.setupTTY(ctx, &eo)
				if err != nil {
					return err
				}
				defer restore()
				opts.Resize = eo.Resize
			}
			res, err := s.Attach(ctx, sel, opts)
			if err != nil {
				if _, ok := signalCause(ctx); ok && res != nil {
					return nil // detached: the command runs on
				}
				return err
			}
			return resultError(res, 0)
		},
	}
	cmd.Flags().BoolVar(&noStdin, "no-stdin", false, "do not forward input")
	cmd.Flags().BoolVar(&noReplay, "no-replay", false, "show only the output from now on, not what the command wrote before")
	return cmd
}

func (a *app) killCmd() *cobra.Command {
	var sigName string
	cmd := &cobra.Command{
		Use:   "kill [-s SIGNAL] ID PID|TAG",
		Short: "Send a signal to a command in a sandbox (SIGKILL by default)",
		Long: `Send a signal to the process group of a command started with exec: SIGKILL
unless -s names another, by name (TERM, SIGTERM) or number (15). A number is
a pid, anything else the --tag given to exec.`,
		Example: `  corral kill web server
  corral kill -s TERM web 42`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sig, err := parseSignal(sigName)
			if err != nil {
				return err
			}
			sel, err := processArg(args[1])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.Sandbox(args[0]).Kill(cmd.Context(), sel, sig)
		},
	}
	cmd.Flags().StringVarP(&sigName, "signal", "s", "KILL", "signal to send, by name or number")
	return cmd
}

// parseSignal reads "KILL", "SIGKILL", "kill" or "9".
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n >= 65 {
			return 0, fmt.Errorf("--signal %d: want a number from 1 to 64", n)
		}
		return syscall.Signal(n), nil
	}
	name := strings.TrimPrefix(strings.ToUpper(s), "SIG")
	for n, known := range signalNames {
		if known == name {
			return syscall.Signal(n), nil
		}
	}
	return 0, fmt.Errorf("--signal %q: unknown signal; want a name such as TERM, KILL, INT, HUP, USR1 or a number", s)
}

var signalNames = map[int]string{
	1: "HUP", 2: "INT", 3: "QUIT", 6: "ABRT", 9: "KILL", 10: "USR1", 12: "USR2",
	13: "PIPE", 14: "ALRM", 15: "TERM", 17: "CHLD", 18: "CONT", 19: "STOP", 20: "TSTP",
	21: "TTIN", 22: "TTOU", 28: "WINCH",
}

func (a *app) waitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "wait ID PID|TAG",
		Short: "Wait for a command in a sandbox to end and exit with its exit code",
		Long: `Wait until a command started with exec -d ends and exit with its exit code,
as exec does (124 for its --timeout, 128+N when killed by signal N, 137 with
the reason on stderr when the OOM killer ended it). A command that ended
already (the agent keeps the last 64, for 15 minutes) answers at once.
Errors of corral itself exit 125.`,
		Example: `  corral exec -d --tag build web -- make
  corral wait web build`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			sel, err := processArg(args[1])
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.Sandbox(args[0]).Wait(cmd.Context(), sel)
			if err != nil {
				return err
			}
			return resultError(res, 0)
		},
	}
}

// exitColumn is ps's EXIT of a command: empty while it runs, else the exit
// code exec would exit with, and why when the kernel or the timeout ended
// it.
func exitColumn(e *client.ExitStatus) string {
	switch {
	case e == nil:
		return ""
	case e.TimedOut:
		return strconv.Itoa(ExitTimeout) + " timeout"
	case e.OOMKilled:
		return strconv.Itoa(e.ExitCode) + " oom"
	case e.Signal != "":
		return strconv.Itoa(e.ExitCode) + " " + e.Signal
	}
	return strconv.Itoa(e.ExitCode)
}
