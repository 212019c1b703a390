package eval

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/client"
)

// Validation is the outcome of Validate: the scores of the untouched
// initial state and of the reference solution.
type Validation struct {
	Scenario         string         `json:"scenario"`
	Initial          float64        `json:"initial"`
	Reference        float64        `json:"reference"`
	InitialScorers   []ScorerResult `json:"initial_scorers"`
	ReferenceScorers []ScorerResult `json:"reference_scorers"`
	// Counterexamples are the scores of the scenario's counter-examples,
	// each applied to the prepared state.
	Counterexamples []float64 `json:"counterexamples,omitempty"`
	// Repeats is how many times each state was scored (the first's
	// scores are above); Flaky are the scorers whose score changed
	// between repeats of the same state.
	Repeats int           `json:"repeats"`
	Flaky   []FlakyScorer `json:"flaky,omitempty"`
	// Problems say what is wrong; none means the scenario is valid.
	Problems []string `json:"problems,omitempty"`
}

// FlakyScorer is a scorer that gave one state different scores.
type FlakyScorer struct {
	Scorer string `json:"scorer"`
	// State is initial or reference.
	State  string    `json:"state"`
	Scores []float64 `json:"scores"`
}

// ValidateOptions tune Validate.
type ValidateOptions struct {
	// Repeats scores the initial state and the reference this many times
	// each, each time in a new box, to find flaky scorers (default 1).
	Repeats int
}

// Validate checks a scenario end to end: its prepared state must score
// below 1 (the task is not already done), its reference solution,
// applied to the prepared state, must score 1, each counter-example
// applied to it must score below 1, and with Repeats > 1 every scorer
// must give each state the same score every time. Every box and snapshot
// it made is removed before it returns.
func (r *Runner) Validate(ctx context.Context, s *Scenario, opts ValidateOptions) (*Validation, error) {
	if s.Reference == nil {
		return nil, fmt.Errorf("%s: reference: a scenario needs a reference solution to validate: %w", s.File, errdefs.ErrInvalidArgument)
	}
	repeats := max(opts.Repeats, 1)
	defer r.cleanup(ctx)
	snap, err := r.Prepare(ctx, s)
	if err != nil {
		return nil, err
	}
	defer r.removeSnapshot(snap)
	v := &Validation{Scenario: s.Name, Repeats: repeats}
	score := func(apply func(*client.Sandbox) error) ([]ScorerResult, error) {
		o, _ := r.createOptionsFromSnapshot(s, snap, 0)
		box, err := r.create(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("create box: %w", err)
		}
		defer r.remove(box)
		sb := r.c.Sandbox(box)
		if apply != nil {
			if err := apply(sb); err != nil {
				return nil, err
			}
		}
		if _, err := r.c.SetNetwork(ctx, box, *toNetwork(s.Environment.ScoringNetwork)); err != nil {
			return nil, fmt.Errorf("scoring network: %w", err)
		}
		var rs []ScorerResult
		for i := range s.Scorers {
			rs = append(rs, Score(ctx, sb, s, i))
		}
		return rs, ctx.Err()
	}
	reference := func(sb *client.Sandbox) error { return applyReference(ctx, sb, s) }
	var initial, ref [][]ScorerResult
	for range repeats {
		rs, err := score(nil)
		if err != nil {
			return nil, err
		}
		initial = append(initial, rs)
		if rs, err = score(reference); err != nil {
			return nil, err
		}
		ref = append(ref, rs)
	}
	v.InitialScorers, v.ReferenceScorers = initial[0], ref[0]
	v.Initial, v.Reference = Total(v.InitialScorers), Total(v.ReferenceScorers)
	if v.Initial >= 1 {
		v.Problems = append(v.Problems, "the untouched initial state already scores 1: the scorers do not tell a solved task from an unsolved one")
	}
	if v.Reference < 1 {
		for _, sr := range v.ReferenceScorers {
			if sr.Score < 1 {
				v.Problems = append(v.Problems, fmt.Sprintf("the reference solution scores %.2f: scorer %s gives %.2f%s", v.Reference, sr.Name, sr.Score, reasonSuffix(sr)))
			}
		}
	}
	v.Flaky = append(flaky("initial", initial), flaky("reference", ref)...)
	for _, f := range v.Flaky {
		v.Problems = append(v.Problems, fmt.Sprintf("scorer %s is flaky: the %s state scored %s in %d repeats", f.Scorer, f.State, scoreList(f.Scores), repeats))
	}
	for i, ce := range s.Counterexamples {
		rs, err := score(func(sb *client.Sandbox) error {
			return applyPatch(ctx, sb, s.HostPath(ce.Patch), cmpStr(ce.Dir, s.Environment.Workdir))
		})
		if err != nil {
			return nil, fmt.Errorf("counterexamples[%d]: %w", i, err)
		}
		t := Total(rs)
		v.Counterexamples = append(v.Counterexamples, t)
		if t >= 1 {
			v.Problems = append(v.Problems, fmt.Sprintf("counter-example %d (%s) scores 1: the scorers accept a failed attempt", i+1, ce.Patch))
		}
	}
	return v, nil
}

// flaky lists the scorers whose score differs between the runs of one
// state.
func flaky(state string, runs [][]ScorerResult) []FlakyScorer {
	var out []FlakyScorer
	if len(runs) < 2 {
		return nil
	}
	for i, sr := range runs[0] {
		scores := make([]float64, 0, len(runs))
		differs := false
		for _, rs := range runs {
			if i >= len(rs) {
				continue
			}
			scores = append(scores, rs[i].Score)
			if math.Abs(rs[i].Score-sr.Score) > scoreEpsilon {
				differs = true
			}
		}
		if differs {
			out = append(out, FlakyScorer{Scorer: sr.Name, State: state, Scores: scores})
		}
	}
	return out
}

func scoreList(scores []float64) string {
	parts := make([]string, len(scores))
	for i, s := range scores {
		parts[i] = fmt.Sprintf("%.2f", s)
	}
	return strings.Join(parts, ", ")
}

func reasonSuffix(sr ScorerResult) string {
	switch {
	case sr.Error != "":
		return " (" + sr.Error + ")"
	case sr.Reason != "":
		return " (" + sr.Reason + ")"
	}
	return ""
}

// applyReference applies the scenario's reference patch (with git apply,
// else patch -p1, in its dir) and runs its commands.
func applyReference(ctx context.Context, sb *client.Sandbox, s *Scenario) error {
	ref := s.Reference
	dir := cmpStr(ref.Dir, s.Environment.Workdir)
	if ref.Patch != "" {
		if err := applyPatch(ctx, sb, s.HostPath(ref.Patch), dir); err != nil {
			return fmt.Errorf("reference.patch: %w", err)
		}
	}
	for i, c := range ref.Commands {
		if err := execOK(ctx, sb, c, dir); err != nil {
			return fmt.Errorf("reference.commands[%d]: %w", i, err)
		}
	}
	return nil
}

// applyPatch uploads the patch at the host path file and applies it in
// dir (default /) with git apply, else patch -p1.
func applyPatch(ctx context.Context, sb *client.Sandbox, file, dir string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	const target = "/tmp/corral-eval.patch"
	if err := sb.Upload(ctx, target, strings.NewReader(string(data))); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	dir = cmpStr(dir, "/")
	cmd := fmt.Sprintf("mkdir -p %s && cd %s && { if command -v git >/dev/null; then git apply %s; else patch -p1 < %s; fi; } && rm -f %s", shellQuote(dir), shellQuote(dir), target, target, target)
	return execOK(ctx, sb, cmd, "")
}

func execOK(ctx context.Context, sb *client.Sandbox, cmd, dir string) error {
	var out tailBuffer
	res, err := sb.Exec(ctx, client.ExecOptions{Cmd: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &out, Cwd: dir})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%q exited %d: %s", cmd, res.ExitCode, strings.TrimSpace(out.String()))
	}
	return nil
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
