// Package cli is the corral command line: a cobra tree of docker-like verbs
// that talk to the daemon through package client, plus the serve and agent
// roles of the same binary.
//
// Exit codes:
//
//	0       success
//	1       an error of corral itself (bad flags, daemon or API errors)
//	        for every verb except exec and run
//	N       exec and run exit with the command's own exit code, and so
//	        do wait, attach and logs -f (with its codes below; 125 for
//	        an error of corral itself)
//	123     exec/run: the working directory (--cwd, or the sandbox's
//	        --workdir) does not exist or is not a directory
//	124     exec/run: the command was killed by its --timeout
//	125     exec/run: corral itself failed (bad flags, daemon or API error)
//	126     exec/run: the command could not be started (not executable...)
//	127     exec/run: the command was not found
//	128+N   exec/run: the command was killed by signal N (137 = SIGKILL,
//	        also the OOM killer, reported on stderr)
//	130     any verb: interrupted by SIGINT (Ctrl-C); 143 for SIGTERM
//
// Errors print "corral: <message>" on stderr.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/version"
)

// Exit codes; see the package doc.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitWorkdir     = 123
	ExitTimeout     = 124
	ExitExecError   = 125
	ExitCannotRun   = 126
	ExitNotFound    = 127
	exitSignalBase  = 128
	defaultLogLevel = "warn"
)

// Streams are the standard streams of a run.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Execute runs corral with os.Args and the process's standard streams, with
// SIGINT and SIGTERM cancelling ctx (a second signal kills the process), and
// returns the exit code.
func Execute(ctx context.Context) int {
	return mainSignals(ctx, os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}

// mainSignals is Main with SIGINT and SIGTERM cancelling ctx, their
// SignalError as the cause.
func mainSignals(ctx context.Context, args []string, s Streams) int {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			signal.Stop(sigs) // the next signal gets the default behaviour
			if sig, ok := s.(syscall.Signal); ok {
				cancel(&SignalError{Signal: sig})
			}
		case <-ctx.Done():
		}
	}()
	return Main(ctx, args, s)
}

// SignalError is the cause (context.Cause) of a context that Execute
// cancelled on a signal. Main exits 128 + the signal's number when it ends a
// verb, as a shell reports a command killed by that signal (130 for SIGINT,
// 143 for SIGTERM).
type SignalError struct {
	Signal syscall.Signal
}

func (e *SignalError) Error() string { return "received " + e.Signal.String() }

// exitCode is 128 + the signal's number.
func (e *SignalError) exitCode() int { return exitSignalBase + int(e.Signal) }

// message is what corral prints when the signal ended a verb.
func (e *SignalError) message() string {
	switch e.Signal {
	case syscall.SIGINT:
		return "interrupted"
	case syscall.SIGTERM:
		return "terminated"
	}
	return e.Error()
}

// signalCause returns the signal that cancelled ctx, if one did.
func signalCause(ctx context.Context) (*SignalError, bool) {
	var se *SignalError
	ok := ctx.Err() != nil && errors.As(context.Cause(ctx), &se)
	return se, ok
}

// Main runs the command line args and returns the exit code.
func Main(ctx context.Context, args []string, s Streams) int {
	a := &app{streams: s}
	root := a.rootCmd()
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	if c, _, err := root.Find(args); err == nil && c.Parent() == root && (c.Name() == "exec" || c.Name() == "run" || c.Name() == "wait" || c.Name() == "attach") {
		a.execVerb = true
	}
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(s.Err, "corral: %s\n", ee.msg)
		}
		return ee.code
	}
	if se, ok := signalCause(ctx); ok {
		// The error is the cancellation the signal caused.
		fmt.Fprintf(s.Err, "corral: %s\n", se.message())
		return se.exitCode()
	}
	fmt.Fprintf(s.Err, "corral: %v\n", err)
	if a.execVerb {
		return execExitCode(err)
	}
	return ExitError
}

// exitError ends the program with code after printing msg (if any).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return fmt.Sprintf("exit %d: %s", e.code, e.msg) }

// execExitCode is the exit code of exec and run for an error of corral.
func execExitCode(err error) int {
	var se *client.StartError
	if errors.As(err, &se) {
		switch {
		case se.Reason == client.ReasonWorkdir:
			return ExitWorkdir
		case errdefs.IsNotFound(err):
			return ExitNotFound
		case errdefs.IsPermissionDenied(err), errdefs.IsInvalidArgument(err), errdefs.IsFailedPrecondition(err):
			return ExitCannotRun
		}
	}
	return ExitExecError
}

// app holds the global flags and the state of one run.
type app struct {
	streams  Streams
	host     string
	logLevel string
	// execVerb is set for exec and run: their errors use 125-127.
	execVerb bool
	logger   *slog.Logger
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "corral",
		Short: "Self-hosted sandboxes for AI agents",
		Long: `corral runs sandboxes (OCI containers whose PID 1 is the corral agent) and
executes commands and file operations in them.

The daemon is "corral serve"; every other verb is a client of its API, found
with --host or CORRAL_HOST (default unix:///run/corral/corral.sock). A token
for a TCP daemon is read from CORRAL_TOKEN.`,
		Example: `  corral run -- echo hello
  id=$(corral create --memory 512m --cpus 1)
  corral exec -it $id -- sh
  corral cp ./src $id:/work
  corral rm -f $id`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			lvl, err := log.ParseLevel(a.logLevel)
			if err != nil {
				return fmt.Errorf("invalid --log-level %q: want debug, info, warn or error", a.logLevel)
			}
			a.logger = slog.New(slog.NewTextHandler(a.streams.Err, &slog.HandlerOptions{Level: lvl}))
			cmd.SetContext(log.WithLogger(cmd.Context(), a.logger))
			return nil
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true // completionCmd instead
	root.SetVersionTemplate("corral version {{.Version}}\n")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return fmt.Errorf("%w (see --help)", err)
	})
	host := os.Getenv(client.HostEnv)
	if host == "" {
		host = client.DefaultHost
	}
	root.PersistentFlags().StringVar(&a.host, "host", host, "daemon address: unix:///path, tcp://host:port or http(s)://host:port (env CORRAL_HOST)")
	root.PersistentFlags().StringVar(&a.logLevel, "log-level", defaultLogLevel, "log level: debug, info, warn or error")
	root.AddCommand(
		a.serveCmd(), a.agentCmd(),
		a.createCmd(), a.runCmd(), a.execCmd(), a.lsCmd(), a.inspectCmd(), a.rmCmd(), a.psCmd(), a.statsCmd(),
		a.cpCmd(), a.versionCmd(), a.imageCmd(), a.buildCmd(), a.benchCmd(),
		a.netCmd(), a.secretCmd(), a.portCmd(), a.volumeCmd(),
		a.pauseCmd(), a.resumeCmd(), a.suspendCmd(), a.keepaliveCmd(),
		a.snapshotCmd(), a.forkCmd(), a.poolCmd(),
		a.stopCmd(), a.startCmd(), a.e2bCmd(),
		a.mcpCmd(),
		a.logsCmd(), a.attachCmd(), a.killCmd(), a.waitCmd(),
	)
	root.AddCommand(a.completionCmd(), a.infoCmd(), a.systemCmd())
	root.AddCommand(a.diffCmd(), a.exportCmd(), a.applyCmd()) // review: docs/review.md
	root.AddCommand(a.eventsCmd(), a.trajectoryCmd())         // audit: docs/observability.md
	root.AddCommand(a.evalCmd())                              // agent evals: docs/evals.md
	a.registerCompletions(root)
	explainArgs(root)
	return root
}

// client returns a client for --host.
func (a *app) client() (*client.Client, error) {
	return client.New(client.WithHost(a.host), client.WithLogger(a.logger))
}

// each calls fn for every name, prints the names it succeeded for and
// returns the failures, each prefixed with its name.
func (a *app) each(ctx context.Context, names []string, fn func(context.Context, string) error) error {
	var errs []error
	for _, n := range names {
		if err := fn(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n, err))
			continue
		}
		fmt.Fprintln(a.streams.Out, n)
	}
	return errors.Join(errs...)
}
