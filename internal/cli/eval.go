package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/eval"
)

// Agent evaluations: corral eval run, show, diff and validate
// (docs/evals.md). Not corral bench, the performance benchmark.

// evalDirEnv overrides the directory of eval runs.
const evalDirEnv = "CORRAL_EVAL_DIR"

// evalRunsDir is where runs are kept: $CORRAL_EVAL_DIR or ~/.corral/evals.
func evalRunsDir() string {
	if d := os.Getenv(evalDirEnv); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "corral-evals")
	}
	return filepath.Join(home, ".corral", "evals")
}

func (a *app) evalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Evaluate agents on scenarios (not the performance benchmark: see bench)",
		Long: `Evaluate an agent end to end: a scenario is a box in a known state, a
problem statement and weighted scorers that look at the box after the agent
worked on it (docs/evals.md; the file format is docs/eval.schema.json).

Runs are kept under $CORRAL_EVAL_DIR (default ~/.corral/evals), one
directory per run: results.json, each attempt's patch, trajectory and
agent log. A box that did not end well becomes a scenario with capture; a
scenario runs in Harbor after export.`,
		Example: `  corral eval validate docs/examples/eval/answer.yaml
  corral eval run docs/examples/eval --agent ./my-agent --attempts 4 --concurrency 2
  corral eval show RUN
  corral eval diff RUN_A RUN_B
  corral eval capture BOX -o ./cases/NAME
  corral eval export --harbor ./harbor-task docs/examples/eval/answer.yaml`,
	}
	cmd.AddCommand(a.evalRunCmd(), a.evalShowCmd(), a.evalDiffCmd(), a.evalValidateCmd(), a.evalCaptureCmd(), a.evalExportCmd())
	return cmd
}

func (a *app) evalRunCmd() *cobra.Command {
	var (
		agent                 string
		attempts, concurrency int
		out                   string
		asJSON, noPool        bool
	)
	cmd := &cobra.Command{
		Use:   "run SUITE_DIR|FILE --agent CMD [--attempts N] [--concurrency C]",
		Short: "Run an agent on every scenario of a suite and score it",
		Long: `Run the agent on every scenario of a suite: a scenario file, or a directory
of them (*.yaml). Each scenario's environment is made once (its image,
spec or snapshot, then its setup commands) and snapshotted; each attempt
starts a box from that snapshot; when there are more attempts than
--concurrency, a warm pool of the snapshot hands the later ones a box
made while the earlier ones ran (--no-pool: none).

The agent is a command line run with sh -c on this host (tool-backend
wiring): it drives the box through the CLI, the SDK or MCP. Its
environment has CORRAL_SANDBOX_ID (the box), CORRAL_HOST (the daemon),
CORRAL_EVAL_PROBLEM (the problem statement, also on its stdin),
CORRAL_EVAL_SCENARIO, CORRAL_EVAL_ATTEMPT, CORRAL_EVAL_WORKDIR and
CORRAL_EVAL_RUN. It is killed at the scenario's agent timeout. A scenario
with agent.wiring box runs the command inside the box instead (sh -c in
its workdir, after agent.install ran once in the prepared state), with the
same variables but CORRAL_HOST; its agent.secrets are placeholders the
egress proxy replaces, never values readable in the box.

After the agent, the attempt's diff is recorded, the box gets the scoring
network policy and the scorers run; a scorer that hangs is killed at its
timeout and scores 0. The run prints its ID and the results table; its
boxes, pools and snapshots are removed when it ends, also on Ctrl-C. Each
attempt records its overhead: its time but the agent's and the scorers'.`,
		Example: `  corral eval run docs/examples/eval --agent docs/examples/eval/agents/solve.sh
  corral eval run ./suite --agent ./agent.py --attempts 4 --concurrency 2`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if attempts < 1 || attempts > 1000 {
				return fmt.Errorf("--attempts %d: want 1 to 1000: %w", attempts, errdefs.ErrInvalidArgument)
			}
			if concurrency < 1 || concurrency > 64 {
				return fmt.Errorf("--concurrency %d: want 1 to 64: %w", concurrency, errdefs.ErrInvalidArgument)
			}
			scenarios, err := eval.LoadSuite(args[0])
			if err != nil {
				return err
			}
			if err := eval.CheckAgentFor(agent, scenarios); err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if err := c.Ping(ctx); err != nil {
				return err
			}
			id := eval.NewRunID()
			dir := out
			if dir == "" {
				dir = filepath.Join(evalRunsDir(), id)
			}
			fmt.Fprintf(a.streams.Err, "run %s: %d scenarios x %d attempts, results in %s\n", id, len(scenarios), attempts, dir)
			r := eval.NewRunner(c, id, eval.Options{
				Agent: agent, Attempts: attempts, Concurrency: concurrency,
				Host: a.host, Dir: dir, Suite: args[0], Progress: a.streams.Err, NoPool: noPool,
			})
			run, err := r.Run(ctx, scenarios)
			if err != nil {
				return err
			}
			if asJSON {
				err = writeJSON(a.streams.Out, run)
			} else {
				fmt.Fprintf(a.streams.Out, "RUN %s\n", run.ID)
				err = eval.WriteTable(a.streams.Out, run)
			}
			if err != nil {
				return err
			}
			return context.Cause(ctx) // a Ctrl-C ends with its exit code
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "", "the agent's command line (run with sh -c on this host)")
	cmd.Flags().IntVarP(&attempts, "attempts", "n", 1, "attempts per scenario")
	cmd.Flags().IntVarP(&concurrency, "concurrency", "c", 1, "attempts run at once")
	cmd.Flags().StringVarP(&out, "out", "o", "", "the run's directory (default $CORRAL_EVAL_DIR/RUN_ID or ~/.corral/evals/RUN_ID)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	cmd.Flags().BoolVar(&noPool, "no-pool", false, "keep no warm pool of a scenario's prepared state: make each attempt's box when it starts")
	_ = cmd.MarkFlagRequired("agent")
	return cmd
}

func (a *app) evalShowCmd() *cobra.Command {
	var asJSON, attempts bool
	cmd := &cobra.Command{
		Use:   "show RUN [--json]",
		Short: "Show the results of an eval run",
		Long: `Show a run's results: a row per scenario with the mean, lowest and highest
score of its attempts, how many scored 1 and the first thing worth a look
(a timeout, an agent that was not found, a scorer that hung). RUN is a run
ID under $CORRAL_EVAL_DIR (default ~/.corral/evals), a run directory or a
results.json. --attempts adds a row per attempt with its score, its agent's
exit, Corral's overhead, its box's resource use by the end of the agent
(CPU time, peak memory, disk, OOM kills, egress denials), what it changed
and the paths of its patch, trajectory (the box's audit trail during the
agent phase) and agent log. --json prints
everything: every attempt with its scorers' output, its agent's exit, its
diff and its files (relative to "dir").`,
		Example: `  corral eval show 20261126-190156-a1b2c3
  corral eval show 20261126-190156-a1b2c3 --attempts
  corral eval show ./out --json | jq '.scenarios[].attempts[].score'`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			run, err := eval.LoadRun(evalRunsDir(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.streams.Out, run)
			}
			if err := eval.WriteTable(a.streams.Out, run); err != nil || !attempts {
				return err
			}
			fmt.Fprintln(a.streams.Out)
			return eval.WriteAttempts(a.streams.Out, run)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole run as JSON")
	cmd.Flags().BoolVarP(&attempts, "attempts", "a", false, "also print a row per attempt with the paths of its patch, trajectory and agent log")
	return cmd
}

func (a *app) evalDiffCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff RUN_A RUN_B [--json]",
		Short: "Compare two eval runs: which scenarios got better or worse",
		Long: `Compare the mean score of every scenario in two runs (the "I switched the
model: is it better?" question): better, worse, same, added (only in B) or
removed (only in A), then a count of each.`,
		Example: `  corral eval diff 20261126-190156-a1b2c3 20261126-201002-d4e5f6`,
		Args:    cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			ra, err := eval.LoadRun(evalRunsDir(), args[0])
			if err != nil {
				return err
			}
			rb, err := eval.LoadRun(evalRunsDir(), args[1])
			if err != nil {
				return err
			}
			changes := eval.Compare(ra, rb)
			if asJSON {
				return writeJSON(a.streams.Out, changes)
			}
			return eval.WriteCompare(a.streams.Out, ra, rb, changes)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the changes as JSON")
	return cmd
}

func (a *app) evalValidateCmd() *cobra.Command {
	var (
		asJSON, parseOnly bool
		repeats           int
	)
	cmd := &cobra.Command{
		Use:   "validate SCENARIO... [--parse-only]",
		Short: "Check that a scenario's reference passes and its initial state fails",
		Long: `Check scenarios: the file against the format (errors name the line and the
field), then, unless --parse-only, end to end: the untouched prepared
state must score below 1 and the reference solution, applied to it, must
score 1; each of its counterexamples (failed attempts' patches), applied
to it, must score below 1. --repeats N scores the initial state and the
reference N times each, each in a new box, and flags a scorer whose score
changes between repeats as flaky. A scenario argument may be a suite
directory. Exits 1 when a scenario is not valid; its boxes and snapshots
are removed.`,
		Example: `  corral eval validate docs/examples/eval/answer.yaml
  corral eval validate --repeats 5 docs/examples/eval
  corral eval validate --parse-only ./suite`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if repeats < 1 || repeats > 100 {
				return fmt.Errorf("--repeats %d: want 1 to 100: %w", repeats, errdefs.ErrInvalidArgument)
			}
			var scenarios []*eval.Scenario
			for _, arg := range args {
				s, err := eval.LoadSuite(arg)
				if err != nil {
					return err
				}
				scenarios = append(scenarios, s...)
			}
			if parseOnly {
				for _, s := range scenarios {
					fmt.Fprintf(a.streams.Out, "%s: ok\n", s.Name)
				}
				return nil
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			var results []*eval.Validation
			bad := 0
			for _, s := range scenarios {
				r := eval.NewRunner(c, eval.NewRunID(), eval.Options{Host: a.host})
				v, err := r.Validate(ctx, s, eval.ValidateOptions{Repeats: repeats})
				if err != nil {
					return fmt.Errorf("%s: %w", s.Name, err)
				}
				results = append(results, v)
				if len(v.Problems) > 0 {
					bad++
				}
				if !asJSON {
					verdict := "valid"
					if len(v.Problems) > 0 {
						verdict = "NOT VALID"
					}
					extra := ""
					for i, ce := range v.Counterexamples {
						extra += fmt.Sprintf(", counter-example %d %.2f", i+1, ce)
					}
					if v.Repeats > 1 {
						extra += fmt.Sprintf(" (%d repeats)", v.Repeats)
					}
					fmt.Fprintf(a.streams.Out, "%s: initial %.2f, reference %.2f%s: %s\n", s.Name, v.Initial, v.Reference, extra, verdict)
					for _, p := range v.Problems {
						fmt.Fprintf(a.streams.Out, "  %s\n", p)
					}
				}
			}
			if asJSON {
				if err := writeJSON(a.streams.Out, results); err != nil {
					return err
				}
			}
			if bad > 0 {
				return &exitError{code: ExitError, msg: fmt.Sprintf("%d of %d scenarios not valid", bad, len(scenarios))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the validations as JSON")
	cmd.Flags().BoolVar(&parseOnly, "parse-only", false, "only check the files against the format")
	cmd.Flags().IntVar(&repeats, "repeats", 1, "score the initial state and the reference this many times each; a scorer whose score changes is flaky")
	return cmd
}

func (a *app) evalCaptureCmd() *cobra.Command {
	var (
		o           eval.CaptureOptions
		problemFile string
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "capture BOX [-o DIR] [--problem TEXT|--problem-file FILE]",
		Short: "Turn a box that did not end well into an eval scenario",
		Long: `Write a scenario directory from a box whose start state was kept (created
with "corral create --keep-start", or snapshotted before its agent started
and named with --start): the scenario starts from that snapshot with the
box's tier, workdir, environment, limits and network policy; what the box
changed since (under --dir, default its workdir) is recorded as a
counter-example (counterexample.patch, which corral eval validate checks
scores below 1) with the box's trajectory (trajectory.jsonl).

The problem statement comes from --problem or --problem-file, else it is a
placeholder marked EDIT ME. The scorer is a stub, named edit-me and marked
EDIT ME, that fails every attempt: replace it with checks of a solved task
and add a reference solution. The scenario runs as it is written
(corral eval run DIR). DIR (default ./NAME) must not exist or be empty.`,
		Example: `  id=$(corral create --keep-start --image python --workdir /src)
  ...   # the agent works on the box
  corral eval capture "$id" -o cases/flaky-import --problem-file task.md
  corral eval run cases/flaky-import --agent ./agent.sh`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Box = args[0]
			if problemFile != "" {
				if o.Problem != "" {
					return fmt.Errorf("--problem and --problem-file: give one of them: %w", errdefs.ErrInvalidArgument)
				}
				data, err := os.ReadFile(problemFile)
				if err != nil {
					return fmt.Errorf("--problem-file: %w", err)
				}
				o.Problem = string(data)
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			got, err := eval.Capture(cmd.Context(), c, o)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.streams.Out, got)
			}
			changed := 0
			if got.Diff != nil {
				changed = got.Diff.FilesChanged
			}
			fmt.Fprintf(a.streams.Out, "%s: scenario %s from snapshot %s, counter-example of %d changed files, %d trajectory events\n", got.File, got.Name, got.Start, changed, got.Events)
			fmt.Fprintf(a.streams.Err, "edit the scorer marked EDIT ME in %s, then: corral eval validate %s\n", got.File, got.Dir)
			return nil
		},
	}
	cmd.Flags().StringVarP(&o.Out, "out", "o", "", "the scenario's directory (default ./NAME)")
	cmd.Flags().StringVar(&o.Name, "name", "", "the scenario's name (default: the box's name, else capture-ID)")
	cmd.Flags().StringVar(&o.Problem, "problem", "", "the problem statement the agent was given")
	cmd.Flags().StringVar(&problemFile, "problem-file", "", "read the problem statement from this file")
	cmd.Flags().StringVar(&o.Start, "start", "", "the snapshot of the box's start state (default start-ID, made by create --keep-start)")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "the box directory whose changes are the counter-example (default: its workdir, else /)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print what was written as JSON")
	return cmd
}

func (a *app) evalExportCmd() *cobra.Command {
	var (
		harbor string
		o      eval.HarborOptions
	)
	cmd := &cobra.Command{
		Use:   "export SCENARIO --harbor DIR [--image REF]",
		Short: "Export a scenario as a Harbor task directory",
		Long: `Write a scenario as a Harbor task (the harness Terminal-Bench 2.0 runs on),
so that it runs where others run their agents: task.toml (timeouts,
limits, allow_internet), instruction.md (the problem), environment/Dockerfile
(FROM the image, its env, workdir, and its setup and agent.install
commands as RUN lines),
tests/test.sh (the scorers, run as corral eval runs them, writing their
weighted mean to /logs/verifier/reward.txt, with their test files and
scripts) and, with a reference, solution/solve.sh.

SCENARIO is a scenario file, or a suite directory: then DIR gets a task
directory per scenario (DIR/NAME). DIR must not exist or be empty. A
scenario from a snapshot or a spec needs --image: a Docker image with the
same start state, pushed to a registry.`,
		Example: `  corral eval export --harbor /tmp/harbor-answer docs/examples/eval/answer.yaml
  corral eval export --harbor ./tasks ./suite`,
		Args: cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if harbor == "" {
				return fmt.Errorf("--harbor DIR: the task directory to write is required: %w", errdefs.ErrInvalidArgument)
			}
			scenarios, err := eval.LoadSuite(args[0])
			if err != nil {
				return err
			}
			for _, s := range scenarios {
				dir := harbor
				if len(scenarios) > 1 {
					if err := os.MkdirAll(harbor, 0o755); err != nil {
						return err
					}
					dir = filepath.Join(harbor, s.Name)
				}
				files, err := eval.ExportHarbor(s, dir, o)
				if err != nil {
					return err
				}
				fmt.Fprintf(a.streams.Out, "%s: %d files in %s\n", s.Name, len(files), dir)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&harbor, "harbor", "", "write a Harbor task directory here")
	cmd.Flags().StringVar(&o.Image, "image", "", "the image the task's Dockerfile starts FROM (default: the scenario's environment.image)")
	return cmd
}
