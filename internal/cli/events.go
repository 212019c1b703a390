package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
)

func (a *app) eventsCmd() *cobra.Command {
	var (
		opts   client.EventsOptions
		since  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "events [--follow] [--box ID] [--type T] [--since T] [--tail N]",
		Short: "Show the audit trail of the sandboxes: execs, files, network, lifecycle, alerts",
		Long: `Show the events the daemon recorded: every command started through the API
(exec), its end (exec_end), every file operation (file), every connection and
DNS decision of the egress proxy (network), every lifecycle change (lifecycle)
and every limit hit (alert). A box's trail is bounded by the daemon's [audit]
max_bytes_per_box; the oldest events go first and a "dropped" event counts
them. A removed box's trail is kept for [audit] retention.

One line per event: time, box, type and what happened; --json prints the
events as JSON lines. --since takes an RFC 3339 time or a duration before now.`,
		Example: `  corral events --box web --type exec,exec_end
  corral events --follow --type network
  corral events --since 10m --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.Tail < 0 {
				return fmt.Errorf("--tail %d must not be negative (0 shows all)", opts.Tail)
			}
			if since != "" {
				t, err := parseSinceFlag(since, time.Now())
				if err != nil {
					return err
				}
				opts.Since = t
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			return c.Events(cmd.Context(), opts, func(ev client.AuditEvent) error {
				if asJSON {
					return json.NewEncoder(a.streams.Out).Encode(ev)
				}
				_, err := fmt.Fprintf(a.streams.Out, "%s  %s  %-9s  %s\n", ev.Time.Local().Format("2006-01-02 15:04:05.000"),
					orDash(ev.Sandbox), ev.Type, summarize(&ev))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new events as they happen")
	f.StringVar(&opts.Box, "box", "", "only the events of this sandbox (ID or name; a removed one by ID)")
	f.StringSliceVar(&opts.Types, "type", nil, "only these types: lifecycle, exec, exec_end, file, network, alert, dropped (comma-separated or repeated)")
	f.IntVar(&opts.Tail, "tail", 0, "only the newest N recorded events (0: all; the daemon sends at most 10000 without --box)")
	f.StringVar(&since, "since", "", "only events since T: an RFC 3339 time or a duration before now such as 10m")
	f.BoolVar(&asJSON, "json", false, "print the events as JSON lines")
	return cmd
}

// parseSinceFlag reads an RFC 3339 time or a duration before now.
func parseSinceFlag(v string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q must be an RFC 3339 time (2026-01-02T15:04:05Z) or a duration such as 10m", v)
}

// summarize says what an event is about in one line.
func summarize(ev *rest.AuditEvent) string {
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		s := l.Change
		switch {
		case l.Change == "state":
			s += " " + orDash(l.From) + " -> " + orDash(l.To)
		case l.To != "":
			s += " (" + l.To + ")"
		case l.From != "":
			s += " (was " + l.From + ")"
		}
		if l.Reason != "" {
			s += ": " + l.Reason
		}
		return s
	case ev.Exec != nil:
		e := ev.Exec
		s := ""
		if e.Pid != 0 {
			s = "pid " + strconv.FormatUint(uint64(e.Pid), 10) + ": "
		}
		s += commandLine(e)
		if ev.Type == rest.AuditExecEnd {
			s += " -> " + execOutcome(e)
			if n := e.StdoutBytes + e.StderrBytes + e.PtyBytes; n > 0 {
				s += fmt.Sprintf(" (%d bytes out)", n)
			}
			return s
		}
		var attrs []string
		if e.Cwd != "" {
			attrs = append(attrs, "cwd "+e.Cwd)
		}
		if e.User != "" {
			attrs = append(attrs, "user "+e.User)
		}
		if len(e.Env) > 0 {
			attrs = append(attrs, "env "+strings.Join(e.Env, ","))
		}
		if e.Tag != "" {
			attrs = append(attrs, "tag "+e.Tag)
		}
		if len(attrs) > 0 {
			s += " (" + strings.Join(attrs, ", ") + ")"
		}
		return s
	case ev.File != nil:
		f := ev.File
		s := f.Op + " " + f.Path
		if f.To != "" {
			s += " -> " + f.To
		}
		if f.Bytes > 0 {
			s += fmt.Sprintf(" (%d bytes)", f.Bytes)
		}
		if f.Status >= 400 {
			s += fmt.Sprintf(" [%d]", f.Status)
		}
		return s
	case ev.Network != nil:
		n := ev.Network
		dst := n.Host
		if n.Addr != "" {
			if dst != "" {
				dst += " "
			}
			dst += n.Addr
			if n.Port != 0 {
				dst += ":" + strconv.Itoa(int(n.Port))
			}
		}
		s := n.Verdict + " " + n.Kind + " " + dst
		if n.Reason != "" {
			s += ": " + n.Reason
		}
		if n.Process != nil {
			s += fmt.Sprintf(" (pid %d %s)", n.Process.Pid, n.Process.Command)
		}
		return s
	case ev.Alert != nil:
		return ev.Alert.Level + " " + ev.Alert.Kind + ": " + ev.Alert.Message
	case ev.Type == rest.AuditDropped:
		return fmt.Sprintf("%d events lost so far (the oldest, past the box's bound, or a full queue)", ev.Dropped)
	}
	return ""
}

// commandLine prints a command with its arguments, quoted as a shell
// would need them.
func commandLine(e *rest.ExecDetail) string {
	parts := []string{shellQuote(e.Cmd)}
	for _, a := range e.Args {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// execOutcome says how a command ended.
func execOutcome(e *rest.ExecDetail) string {
	switch {
	case e.Detached:
		return "detached (its end is not recorded)"
	case e.OOM:
		return "killed by the OOM killer"
	case e.TimedOut:
		return "killed by its timeout"
	case e.Signal != "":
		return "signal " + e.Signal
	case e.ExitCode != nil:
		s := "exit " + strconv.Itoa(*e.ExitCode)
		if e.Error != "" {
			s += ": " + e.Error
		}
		return s
	case e.Error != "":
		return "failed: " + e.Error
	}
	return "ended"
}

func (a *app) trajectoryCmd() *cobra.Command {
	var (
		format     string
		withOutput bool
	)
	cmd := &cobra.Command{
		Use:   "trajectory [--format jsonl|md] [--with-output] ID",
		Short: "Export the ordered record of what happened in a sandbox",
		Long: `Export the audit trail of one sandbox, oldest first: its lifecycle, every
command started through the API and how it ended, every file operation, every
connection and DNS decision, every limit hit. For debugging and for evals.

--format jsonl (default) prints one JSON event per line; md a Markdown report.
--with-output adds the output of each command the sandbox's agent still keeps
(1 MiB of each, its start and its end, for a while after it ended; see corral
logs): under "output" in jsonl, in a code block in md. A removed sandbox is named by its ID
and has its trail (without output) for the daemon's [audit] retention.`,
		Example: `  corral trajectory web > web.jsonl
  corral trajectory --format md --with-output web > web.md`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if format != "jsonl" && format != "md" {
				return fmt.Errorf("--format %q must be jsonl or md", format)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var evs []client.AuditEvent
			if err := c.Trajectory(cmd.Context(), args[0], func(ev client.AuditEvent) error {
				evs = append(evs, ev)
				return nil
			}); err != nil {
				return err
			}
			var outputs map[uint32]*commandOutput
			if withOutput {
				outputs = keptOutputs(cmd.Context(), c.Sandbox(args[0]), evs)
			}
			if format == "md" {
				return writeTrajectoryMD(a.streams.Out, args[0], evs, outputs)
			}
			enc := json.NewEncoder(a.streams.Out)
			for _, ev := range evs {
				var out *commandOutput
				if ev.Type == rest.AuditExecEnd && ev.Exec != nil {
					out = outputs[ev.Exec.Pid]
				}
				if err := enc.Encode(struct {
					client.AuditEvent
					Output *commandOutput `json:"output,omitempty"`
				}{ev, out}); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "jsonl", "output format: jsonl or md")
	cmd.Flags().BoolVar(&withOutput, "with-output", false, "add the output the agent still keeps of each command")
	return cmd
}

// commandOutput is the kept output of one command.
type commandOutput struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr,omitempty"`
}

// keptOutputs fetches the output the agent keeps of every command of evs
// that ended, by pid; a sandbox that is gone or a command it no longer
// keeps has none.
func keptOutputs(ctx context.Context, s *client.Sandbox, evs []client.AuditEvent) map[uint32]*commandOutput {
	out := map[uint32]*commandOutput{}
	for _, ev := range evs {
		if ev.Type != rest.AuditExecEnd || ev.Exec == nil || ev.Exec.Pid == 0 {
			continue
		}
		var stdout, stderr bytes.Buffer
		if _, err := s.Logs(ctx, client.ProcessSelector{PID: ev.Exec.Pid}, client.LogsOptions{Stdout: &stdout, Stderr: &stderr}); err != nil {
			continue
		}
		out[ev.Exec.Pid] = &commandOutput{Stdout: stdout.String(), Stderr: stderr.String()}
	}
	return out
}

// writeTrajectoryMD writes the Markdown report of a trajectory.
func writeTrajectoryMD(w io.Writer, id string, evs []client.AuditEvent, outputs map[uint32]*commandOutput) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Trajectory of %s\n\n", id)
	if len(evs) == 0 {
		b.WriteString("No events recorded.\n")
	} else {
		fmt.Fprintf(&b, "%d events, %s to %s.\n\n", len(evs), evs[0].Time.UTC().Format(time.RFC3339), evs[len(evs)-1].Time.UTC().Format(time.RFC3339))
	}
	for _, ev := range evs {
		fmt.Fprintf(&b, "- `%s` **%s** %s\n", ev.Time.UTC().Format("15:04:05.000"), ev.Type, mdInline(summarize(&ev)))
		if ev.Type != rest.AuditExecEnd || ev.Exec == nil {
			continue
		}
		if o := outputs[ev.Exec.Pid]; o != nil {
			for _, s := range []struct{ name, text string }{{"stdout", o.Stdout}, {"stderr", o.Stderr}} {
				if s.text == "" {
					continue
				}
				fence := "```"
				for strings.Contains(s.text, fence) {
					fence += "`"
				}
				fmt.Fprintf(&b, "\n  %s:\n\n  %s\n%s\n  %s\n\n", s.name, fence, indent(strings.TrimSuffix(s.text, "\n"), "  "), fence)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mdInline keeps a summary from breaking a Markdown list item.
func mdInline(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}

func indent(s, pre string) string {
	return pre + strings.ReplaceAll(s, "\n", "\n"+pre)
}
