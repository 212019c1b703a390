package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/units"
)

// ResultsFile is the name of a run's results in its directory.
const ResultsFile = "results.json"

// Run is the record of one corral eval run.
type Run struct {
	ID       string    `json:"id"`
	Suite    string    `json:"suite"`
	Agent    string    `json:"agent"`
	Attempts int       `json:"attempts"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Interrupted is set when the run was cancelled (Ctrl-C) before every
	// attempt ended.
	Interrupted bool             `json:"interrupted,omitempty"`
	Scenarios   []ScenarioResult `json:"scenarios"`

	// Dir is the run's directory, which the attempts' files (patch,
	// trajectory, agent log) are relative to; set by LoadRun.
	Dir string `json:"dir,omitempty"`
}

// ScenarioResult is every attempt at one scenario.
type ScenarioResult struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Error is why the scenario's environment could not be prepared (no
	// attempt ran).
	Error    string    `json:"error,omitempty"`
	Attempts []Attempt `json:"attempts"`
}

// Attempt is one agent's attempt at a scenario.
type Attempt struct {
	N        int           `json:"n"`
	Sandbox  string        `json:"sandbox,omitempty"`
	Score    float64       `json:"score"`
	Duration time.Duration `json:"duration_ns"`
	// Overhead is Corral's share of Duration: everything but the agent's
	// and the scorers' own run time (the box's creation or hand-out from
	// the warm pool, the diff, the trajectory, the scoring network, the
	// removal).
	Overhead time.Duration `json:"overhead_ns"`
	// Pooled is set when the box was handed out of the run's warm pool
	// of the prepared state (known from its trajectory).
	Pooled  bool           `json:"pooled,omitempty"`
	Agent   AgentResult    `json:"agent"`
	Scorers []ScorerResult `json:"scorers"`
	// Diff is what the agent changed (under the scenario's workdir) and
	// Patch the file, in the run's directory, of the patch.
	Diff  *client.DiffStat `json:"diff,omitempty"`
	Patch string           `json:"patch,omitempty"`
	// Trajectory is the file, in the run's directory, of the box's audit
	// trail during the agent phase (JSON lines of client.AuditEvent, as
	// corral trajectory prints them) and Events its number of events;
	// empty when the daemon records no trail.
	Trajectory string `json:"trajectory,omitempty"`
	Events     int    `json:"trajectory_events,omitempty"`
	// Resources is what the box used by the end of the agent phase; nil
	// when the daemon could not tell.
	Resources *Resources `json:"resources,omitempty"`
	// Error is why the attempt could not be scored (its box could not be
	// made, the run was interrupted); Score is then 0.
	Error string `json:"error,omitempty"`
}

// AgentResult is how the agent command ended.
type AgentResult struct {
	ExitCode int           `json:"exit_code"`
	Duration time.Duration `json:"duration_ns"`
	// Reason is "exit" (it exited by itself), "timeout" (killed at the
	// scenario's agent timeout), "not_found" (exit 127: the shell did not
	// find a command), "oom" (an agent inside the box killed by the OOM
	// killer), "interrupted" or "box_<state>" (the box was no longer
	// running when the agent ended, e.g. box_exited after an OOM of its
	// init).
	Reason string `json:"reason"`
	Output string `json:"output,omitempty"`
}

// Resources is an attempt's box's resource use and policy hits by the
// end of its agent phase (before the scorers run): its cgroup's figures
// as corral inspect shows them, and its egress denials from its audit
// trail (or its egress log when the daemon keeps no trail).
type Resources struct {
	// CPU is the CPU time (user and system) of every process of the box.
	CPU time.Duration `json:"cpu_ns"`
	// MemoryPeakBytes is the box's highest memory use (0: the kernel does
	// not tell).
	MemoryPeakBytes uint64 `json:"memory_peak_bytes,omitempty"`
	// DiskBytes is what the box's writable disk holds.
	DiskBytes uint64 `json:"disk_bytes,omitempty"`
	// OOMKills counts the processes of the box the OOM killer ended.
	OOMKills uint64 `json:"oom_kills"`
	// EgressDenied counts the connections and DNS queries the box's
	// network policy refused.
	EgressDenied int `json:"egress_denied"`
}

// Mean is the mean score of a scenario's attempts.
func (s *ScenarioResult) Mean() float64 {
	if len(s.Attempts) == 0 {
		return 0
	}
	var sum float64
	for _, a := range s.Attempts {
		sum += a.Score
	}
	return sum / float64(len(s.Attempts))
}

// Save writes the run's results.json into dir.
func (r *Run) Save(dir string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(dir, ResultsFile), append(data, '\n'), 0o644)
}

// LoadRun reads a run: ref is a run directory, a results.json, or a run
// ID under runsDir.
func LoadRun(runsDir, ref string) (*Run, error) {
	candidates := []string{filepath.Join(ref, ResultsFile), ref}
	if runsDir != "" && filepath.Base(ref) == ref {
		candidates = append([]string{filepath.Join(runsDir, ref, ResultsFile)}, candidates...)
	}
	for _, p := range candidates {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read run: %w", err)
		}
		var r Run
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("run %s: %s is not a results file: %v: %w", ref, p, err, errdefs.ErrInvalidArgument)
		}
		if abs, err := filepath.Abs(filepath.Dir(p)); err == nil {
			r.Dir = abs
		}
		return &r, nil
	}
	return nil, fmt.Errorf("run %s not found (a run ID under %s, a run directory or a %s): %w", ref, runsDir, ResultsFile, errdefs.ErrNotFound)
}

// WriteTable prints a run as a table: a row per scenario with its mean,
// lowest and highest score and how many attempts scored 1.
func WriteTable(w io.Writer, r *Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tATTEMPTS\tMEAN\tMIN\tMAX\tSOLVED\tNOTE")
	var total float64
	for _, s := range r.Scenarios {
		lo, hi, solved := math.Inf(1), math.Inf(-1), 0
		note := s.Error
		for _, a := range s.Attempts {
			lo, hi = min(lo, a.Score), max(hi, a.Score)
			if a.Score >= 1 {
				solved++
			}
			if note == "" {
				note = attemptNote(a)
			}
		}
		if len(s.Attempts) == 0 {
			lo, hi = 0, 0
		}
		total += s.Mean()
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2f\t%d/%d\t%s\n", s.Name, len(s.Attempts), s.Mean(), lo, hi, solved, len(s.Attempts), note)
	}
	mean := 0.0
	if len(r.Scenarios) > 0 {
		mean = total / float64(len(r.Scenarios))
	}
	fmt.Fprintf(tw, "TOTAL\t\t%.2f\t\t\t\t%s\n", mean, runNote(r))
	return tw.Flush()
}

// WriteAttempts prints a row per attempt: its score, how its agent
// ended, what it changed and the paths of its patch, trajectory and
// agent log (under the run's directory), so that a failed attempt can be
// looked at or captured.
func WriteAttempts(w io.Writer, r *Run) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tN\tSCORE\tAGENT\tOVERHEAD\tCPU\tMEM PEAK\tDISK\tOOM\tDENIED\tCHANGED\tPATCH\tTRAJECTORY\tAGENT LOG")
	file := func(name string) string {
		if name == "" {
			return "-"
		}
		if r.Dir == "" {
			return name
		}
		return filepath.Join(r.Dir, name)
	}
	for _, s := range r.Scenarios {
		for _, a := range s.Attempts {
			agent := a.Agent.Reason
			if a.Agent.Reason == "exit" {
				agent = fmt.Sprintf("exit %d", a.Agent.ExitCode)
			}
			if a.Error != "" {
				agent = a.Error
			}
			changed := "-"
			if a.Diff != nil {
				changed = fmt.Sprintf("%d files +%d -%d", a.Diff.FilesChanged, a.Diff.Insertions, a.Diff.Deletions)
			}
			log := ""
			if a.Agent.Reason != "" {
				log = fmt.Sprintf("%s.%d.agent.log", s.Name, a.N)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, a.N, a.Score, cmpStr(agent, "-"), a.Overhead.Round(time.Millisecond), resourceCells(a.Resources), changed, file(a.Patch), file(a.Trajectory), file(log))
		}
	}
	return tw.Flush()
}

// resourceCells are the CPU, MEM PEAK, DISK, OOM and DENIED cells of an
// attempt's row.
func resourceCells(r *Resources) string {
	if r == nil {
		return "-\t-\t-\t-\t-"
	}
	size := func(n uint64) string {
		if n == 0 {
			return "-"
		}
		return units.FormatBytes(int64(n))
	}
	return fmt.Sprintf("%s\t%s\t%s\t%d\t%d", r.CPU.Round(time.Millisecond), size(r.MemoryPeakBytes), size(r.DiskBytes), r.OOMKills, r.EgressDenied)
}

// attemptNote is the first thing worth a look in an attempt.
func attemptNote(a Attempt) string {
	if a.Error != "" {
		return fmt.Sprintf("attempt %d: %s", a.N, a.Error)
	}
	if a.Agent.Reason != "" && a.Agent.Reason != "exit" {
		return fmt.Sprintf("attempt %d: agent %s", a.N, a.Agent.Reason)
	}
	if r := a.Resources; r != nil && r.OOMKills > 0 {
		return fmt.Sprintf("attempt %d: %d OOM kills in the box", a.N, r.OOMKills)
	}
	for _, s := range a.Scorers {
		if s.Reason != "" {
			return fmt.Sprintf("attempt %d: scorer %s: %s", a.N, s.Name, s.Reason)
		}
	}
	if r := a.Resources; r != nil && r.EgressDenied > 0 {
		return fmt.Sprintf("attempt %d: %d egress denials", a.N, r.EgressDenied)
	}
	return ""
}

func runNote(r *Run) string {
	if r.Interrupted {
		return "interrupted"
	}
	return ""
}

// Change is how one scenario's mean score moved between two runs.
type Change struct {
	Scenario string  `json:"scenario"`
	A        float64 `json:"a"`
	B        float64 `json:"b"`
	// Verdict is better, worse, same, added (only in B) or removed (only
	// in A).
	Verdict string `json:"verdict"`
}

// scoreEpsilon is the difference of means below which two are the same.
const scoreEpsilon = 1e-9

// Compare lists every scenario of a and b with its mean in each, in a's
// order and then b's new scenarios.
func Compare(a, b *Run) []Change {
	inB := map[string]*ScenarioResult{}
	for i := range b.Scenarios {
		inB[b.Scenarios[i].Name] = &b.Scenarios[i]
	}
	var out []Change
	seen := map[string]bool{}
	for i := range a.Scenarios {
		sa := &a.Scenarios[i]
		seen[sa.Name] = true
		c := Change{Scenario: sa.Name, A: sa.Mean()}
		sb, ok := inB[sa.Name]
		switch {
		case !ok:
			c.Verdict = "removed"
		default:
			c.B = sb.Mean()
			switch d := c.B - c.A; {
			case d > scoreEpsilon:
				c.Verdict = "better"
			case d < -scoreEpsilon:
				c.Verdict = "worse"
			default:
				c.Verdict = "same"
			}
		}
		out = append(out, c)
	}
	for _, sb := range b.Scenarios {
		if !seen[sb.Name] {
			out = append(out, Change{Scenario: sb.Name, B: sb.Mean(), Verdict: "added"})
		}
	}
	return out
}

// WriteCompare prints Compare's changes as a table with a summary line.
func WriteCompare(w io.Writer, a, b *Run, changes []Change) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "SCENARIO\t%s\t%s\tDELTA\tVERDICT\n", a.ID, b.ID)
	n := map[string]int{}
	for _, c := range changes {
		n[c.Verdict]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%+.2f\t%s\n", c.Scenario, cell(c, c.Verdict != "added", c.A), cell(c, c.Verdict != "removed", c.B), c.B-c.A, c.Verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d better, %d worse, %d same, %d added, %d removed\n", n["better"], n["worse"], n["same"], n["added"], n["removed"])
	return err
}

func cell(_ Change, present bool, v float64) string {
	if !present {
		return "-"
	}
	return fmt.Sprintf("%.2f", v)
}
