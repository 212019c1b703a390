package eval

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/client"
)

// maxOutput bounds the output kept of a scorer or an agent.
const maxOutput = 16 << 10

// execGrace is how long past its timeout a scorer's command is waited for
// when the box does not end it.
var execGrace = 10 * time.Second

// Box is what the scorers need of a sandbox (a *client.Sandbox).
type Box interface {
	Exec(ctx context.Context, opts client.ExecOptions) (*client.ExecResult, error)
	Download(ctx context.Context, path string) (io.ReadCloser, error)
	Upload(ctx context.Context, path string, r io.Reader) error
}

// ScorerResult is how one scorer judged an attempt.
type ScorerResult struct {
	Name   string  `json:"name"`
	Kind   string  `json:"kind"`
	Weight float64 `json:"weight"`
	// Score is 0..1: 1 or 0 for command, the share of passed tests (or
	// the command's exit) for tests, the printed score for script, the
	// share of checks that hold for files.
	Score    float64       `json:"score"`
	Passed   int           `json:"passed,omitempty"`
	Failed   int           `json:"failed,omitempty"`
	ExitCode int           `json:"exit_code"`
	Duration time.Duration `json:"duration_ns"`
	// Reason says why the scorer gave 0 without judging: "timeout",
	// "oom", "error".
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
	Output string `json:"output,omitempty"`
}

// Score runs scorer i of s against box and never fails: a scorer that
// cannot run scores 0 with a Reason.
func Score(ctx context.Context, box Box, s *Scenario, i int) (r ScorerResult) {
	sc := s.Scorers[i]
	r = ScorerResult{Name: sc.Name, Kind: sc.Kind(), Weight: sc.Weight}
	timeout := s.ScorerTimeout(i)
	start := time.Now()
	defer func() { r.Duration = time.Since(start) }()
	switch {
	case sc.Tests != nil:
		if err := uploadTests(ctx, box, s.HostPath(sc.Tests.Files), sc.Tests.Dest); err != nil {
			r.Reason, r.Error = "error", fmt.Sprintf("upload tests: %v", err)
			return r
		}
		out, ok := run(ctx, box, &r, []string{"sh", "-c", sc.Tests.Command}, timeout, s.Environment.Workdir)
		if !ok {
			return r
		}
		r.Passed, r.Failed = CountTests(out)
		switch {
		case r.Passed+r.Failed > 0:
			r.Score = float64(r.Passed) / float64(r.Passed+r.Failed)
		case r.ExitCode == 0:
			r.Score = 1
		}
	case sc.Script != nil:
		cmd := []string{"sh", "-c", sc.Script.Run}
		switch sc.Script.Lang {
		case "bash":
			cmd = []string{"bash", "-c", sc.Script.Run}
		case "python", "python3":
			cmd = []string{"python3", "-c", sc.Script.Run}
		}
		out, ok := run(ctx, box, &r, cmd, timeout, s.Environment.Workdir)
		if !ok {
			return r
		}
		v, err := ParseScore(out)
		if err != nil {
			r.Reason, r.Error = "error", err.Error()
			return r
		}
		r.Score = v
	case sc.Files != nil:
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		var lines []string
		for _, fc := range sc.Files {
			ok, msg := checkFile(sctx, box, fc)
			if ok {
				r.Passed++
				lines = append(lines, "ok   "+fc.Path)
			} else {
				r.Failed++
				lines = append(lines, "FAIL "+fc.Path+": "+msg)
			}
		}
		if sctx.Err() != nil && ctx.Err() == nil {
			r.Reason = "timeout"
			r.Passed = 0
		}
		r.Score = float64(r.Passed) / float64(len(sc.Files))
		r.Output = strings.Join(lines, "\n") + "\n"
	default:
		if _, ok := run(ctx, box, &r, []string{"sh", "-c", sc.Command}, timeout, s.Environment.Workdir); ok && r.ExitCode == 0 {
			r.Score = 1
		}
	}
	return r
}

// run runs cmd in box with timeout, records its output and exit in r and
// reports whether it ran to its end (not killed, not failed to start).
func run(ctx context.Context, box Box, r *ScorerResult, cmd []string, timeout time.Duration, cwd string) (string, bool) {
	var out tailBuffer
	// The agent kills the command at its timeout; the context is the
	// backstop for a box that does not answer.
	ectx, cancel := context.WithTimeout(ctx, timeout+execGrace)
	defer cancel()
	res, err := box.Exec(ectx, client.ExecOptions{Cmd: cmd, Stdout: &out, Stderr: &out, Timeout: timeout, Cwd: cwd})
	r.Output = out.String()
	switch {
	case err != nil && ectx.Err() != nil && ctx.Err() == nil:
		r.Reason, r.ExitCode = "timeout", -1
		return "", false
	case err != nil:
		r.Reason, r.Error, r.ExitCode = "error", err.Error(), -1
		return "", false
	case res.TimedOut:
		r.Reason, r.ExitCode = "timeout", res.ExitCode
		return "", false
	case res.OOMKilled:
		r.Reason, r.ExitCode = "oom", res.ExitCode
		return "", false
	}
	r.ExitCode = res.ExitCode
	return r.Output, true
}

// checkFile checks one FileCheck and says what did not hold.
func checkFile(ctx context.Context, box Box, fc FileCheck) (bool, string) {
	rc, err := box.Download(ctx, fc.Path)
	if err != nil {
		if errdefs.IsNotFound(err) {
			if fc.Absent {
				return true, ""
			}
			return false, "does not exist"
		}
		return false, err.Error()
	}
	defer rc.Close()
	if fc.Absent {
		return false, "exists"
	}
	data, err := io.ReadAll(io.LimitReader(rc, 16<<20))
	if err != nil {
		return false, err.Error()
	}
	if fc.Contains != "" && !bytes.Contains(data, []byte(fc.Contains)) {
		return false, fmt.Sprintf("does not contain %q", fc.Contains)
	}
	if fc.Matches != "" && !regexp.MustCompile("(?m)"+fc.Matches).Match(data) {
		return false, fmt.Sprintf("does not match %q", fc.Matches)
	}
	return true, ""
}

// uploadTests uploads the file or directory src into the box's directory
// dest, creating dest.
func uploadTests(ctx context.Context, box Box, src, dest string) error {
	res, err := box.Exec(ctx, client.ExecOptions{Cmd: []string{"mkdir", "-p", dest}})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("mkdir %s: exit %d", dest, res.ExitCode)
	}
	return filepath.WalkDir(src, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." && !e.IsDir() {
			rel = filepath.Base(p)
		}
		target := path.Join(dest, filepath.ToSlash(rel))
		if e.IsDir() {
			if rel == "." {
				return nil
			}
			_, err := box.Exec(ctx, client.ExecOptions{Cmd: []string{"mkdir", "-p", target}})
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := box.Upload(ctx, target, f); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if st, err := f.Stat(); err == nil && st.Mode()&0o111 != 0 {
			_, err = box.Exec(ctx, client.ExecOptions{Cmd: []string{"chmod", "+x", target}})
			return err
		}
		return nil
	})
}

var (
	tapRe    = regexp.MustCompile(`^(not )?ok\b`)
	goTestRe = regexp.MustCompile(`^\s*--- (PASS|FAIL):`)
	pyTestRe = regexp.MustCompile(`\b(PASSED|FAILED|ERROR)\b`)
)

// CountTests counts passed and failed tests in a test command's output,
// reading each line as TAP ("ok 1 - name", "not ok 2 - name"), go test -v
// ("--- PASS: TestX", "--- FAIL: TestX") or pytest -v ("test_x PASSED",
// "test_y FAILED"). Lines of none of these forms are ignored.
func CountTests(out string) (passed, failed int) {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := tapRe.FindStringSubmatch(line); m != nil {
			if m[1] == "" {
				passed++
			} else {
				failed++
			}
			continue
		}
		if m := goTestRe.FindStringSubmatch(line); m != nil {
			if m[1] == "PASS" {
				passed++
			} else {
				failed++
			}
			continue
		}
		if strings.Contains(line, "::") {
			if m := pyTestRe.FindStringSubmatch(line); m != nil {
				if m[1] == "PASSED" {
					passed++
				} else {
					failed++
				}
			}
		}
	}
	return passed, failed
}

var scoreRe = regexp.MustCompile(`^\s*score\s*=\s*(\S+)\s*$`)

// ParseScore returns the value of the last "score=<0..1>" line of a
// script's output.
func ParseScore(out string) (float64, error) {
	var last string
	for _, line := range strings.Split(out, "\n") {
		if m := scoreRe.FindStringSubmatch(line); m != nil {
			last = m[1]
		}
	}
	if last == "" {
		return 0, errors.New("the script printed no score=<0..1> line")
	}
	v, err := strconv.ParseFloat(last, 64)
	if err != nil || v < 0 || v > 1 {
		return 0, fmt.Errorf("score=%s is not a number from 0 to 1", last)
	}
	return v, nil
}

// Total is the weighted mean of the scorers' scores (0 when every weight
// is 0).
func Total(rs []ScorerResult) float64 {
	var sum, w float64
	for _, r := range rs {
		sum += r.Weight * r.Score
		w += r.Weight
	}
	if w == 0 {
		return 0
	}
	return sum / w
}

// tailBuffer keeps the first and last maxOutput/2 bytes written to it.
type tailBuffer struct {
	head, tail []byte
	dropped    int
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := maxOutput/2 - len(b.head); room > 0 {
		k := min(room, len(p))
		b.head = append(b.head, p[:k]...)
		p = p[k:]
	}
	b.tail = append(b.tail, p...)
	if over := len(b.tail) - maxOutput/2; over > 0 {
		b.dropped += over
		b.tail = append(b.tail[:0], b.tail[over:]...)
	}
	return n, nil
}

func (b *tailBuffer) String() string {
	if b.dropped == 0 {
		return string(b.head) + string(b.tail)
	}
	return fmt.Sprintf("%s\n[... %d bytes left out ...]\n%s", b.head, b.dropped, b.tail)
}
