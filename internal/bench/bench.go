// Package bench measures Corral against its peers on this machine, in one
// run, and prints medians and ratios: create -> first exec done -> remove
// through a running daemon, exec round trip in a running sandbox, and the
// same lifecycle done with a raw `crun run`, `runc run` and `bwrap`.
//
// It is what `corral bench` runs. Speed targets are checked here, never by
// timed assertions in the test suite.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/runtime/oci"
)

// Config tunes a run.
type Config struct {
	// Client talks to the daemon whose sandboxes are measured.
	Client *client.Client
	// Image is the image for Corral's sandboxes ("busybox" by default, the
	// same root file system the raw peers run).
	Image string
	// Runtime is the daemon runtime to measure ("" = the daemon's default).
	Runtime string
	// Lifecycles is how many create -> exec -> remove rounds to time.
	Lifecycles int
	// Execs is how many exec round trips to time.
	Execs int
	// Peers lists raw peers to run: "crun", "runc", "bwrap".
	Peers []string
	// WorkDir holds the peers' bundles; a temporary directory by default.
	WorkDir string
}

// Result is one measured series.
type Result struct {
	Name    string          `json:"name"`
	Samples []time.Duration `json:"-"`
	Median  time.Duration   `json:"median_ns"`
	P90     time.Duration   `json:"p90_ns"`
	Err     string          `json:"error,omitempty"`
}

// Report is the whole run.
type Report struct {
	Results []Result `json:"results"`
	// Ratios are Corral's lifecycle median over each peer's ("crun" -> 1.2).
	Ratios map[string]float64 `json:"lifecycle_ratio_vs"`
}

func summarize(name string, s []time.Duration, err error) Result {
	r := Result{Name: name, Samples: s}
	if err != nil {
		r.Err = err.Error()
	}
	if len(s) == 0 {
		return r
	}
	sorted := slices.Clone(s)
	slices.Sort(sorted)
	r.Median = sorted[len(sorted)/2]
	r.P90 = sorted[int(math.Ceil(float64(len(sorted))*0.9))-1]
	return r
}

// Run measures everything in cfg and returns the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Image == "" {
		cfg.Image = "busybox"
	}
	if cfg.Lifecycles <= 0 {
		cfg.Lifecycles = 30
	}
	if cfg.Execs <= 0 {
		cfg.Execs = 300
	}
	if cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "corral-bench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		cfg.WorkDir = d
	}
	rep := &Report{Ratios: map[string]float64{}}

	life, err := corralLifecycle(ctx, cfg)
	rep.Results = append(rep.Results, summarize("corral create+exec+rm", life, err))
	execs, err := corralExec(ctx, cfg)
	rep.Results = append(rep.Results, summarize("corral exec round trip", execs, err))

	rootfs, err := busyboxRootfs(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Peers {
		var s []time.Duration
		var err error
		switch p {
		case "crun", "runc":
			s, err = rawOCI(ctx, cfg, p, rootfs)
		case "bwrap":
			s, err = bwrap(ctx, cfg, rootfs)
		default:
			err = fmt.Errorf("unknown peer %q (want crun, runc or bwrap)", p)
		}
		res := summarize(p+" run true", s, err)
		rep.Results = append(rep.Results, res)
		if res.Median > 0 && rep.Results[0].Median > 0 {
			rep.Ratios[p] = float64(rep.Results[0].Median) / float64(res.Median)
		}
	}
	return rep, nil
}

func corralLifecycle(ctx context.Context, cfg Config) ([]time.Duration, error) {
	var s []time.Duration
	for range cfg.Lifecycles {
		start := time.Now()
		sb, err := cfg.Client.CreateSandbox(ctx, rest.CreateSandboxRequest{Image: cfg.Image, Runtime: cfg.Runtime})
		if err != nil {
			return s, err
		}
		res, err := cfg.Client.Sandbox(sb.ID).Exec(ctx, client.ExecOptions{Cmd: []string{"true"}})
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("true exited %d", res.ExitCode)
		}
		rmErr := cfg.Client.RemoveSandbox(ctx, sb.ID, true)
		if err != nil {
			return s, err
		}
		if rmErr != nil {
			return s, rmErr
		}
		s = append(s, time.Since(start))
	}
	return s, nil
}

func corralExec(ctx context.Context, cfg Config) ([]time.Duration, error) {
	sb, err := cfg.Client.CreateSandbox(ctx, rest.CreateSandboxRequest{Image: cfg.Image, Runtime: cfg.Runtime})
	if err != nil {
		return nil, err
	}
	defer cfg.Client.RemoveSandbox(context.WithoutCancel(ctx), sb.ID, true)
	box := cfg.Client.Sandbox(sb.ID)
	var s []time.Duration
	for i := range cfg.Execs + 10 {
		start := time.Now()
		res, err := box.Exec(ctx, client.ExecOptions{Cmd: []string{"true"}})
		if err != nil {
			return s, err
		}
		if res.ExitCode != 0 {
			return s, fmt.Errorf("true exited %d", res.ExitCode)
		}
		if i >= 10 { // warm-up
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// busyboxRootfs makes a root file system with /bin/busybox and its applets.
func busyboxRootfs(dir string) (string, error) {
	bb, err := exec.LookPath("busybox")
	if err != nil {
		return "", fmt.Errorf("busybox not found (apt-get install busybox-static): %w", err)
	}
	root := filepath.Join(dir, "rootfs")
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return "", err
		}
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), data, 0o755); err != nil {
		return "", err
	}
	for _, a := range []string{"sh", "true"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			return "", err
		}
	}
	return root, nil
}

// rawOCI times "<runtime> run" of /bin/true on the runtime's default spec
// (`<runtime> spec`), through the same private mount namespace the daemon
// uses, so crun works on hybrid cgroup hosts too.
func rawOCI(ctx context.Context, cfg Config, name, rootfs string) ([]time.Duration, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, fmt.Errorf("%s not installed", name)
	}
	bundle := filepath.Join(cfg.WorkDir, name+"-bundle")
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return nil, err
	}
	gen := exec.CommandContext(ctx, bin, "spec")
	gen.Dir = bundle
	_ = os.Remove(filepath.Join(bundle, "config.json"))
	if out, err := gen.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s spec: %w: %s", name, err, out)
	}
	if err := patchSpec(filepath.Join(bundle, "config.json"), rootfs); err != nil {
		return nil, err
	}
	rt, err := oci.New(oci.Config{
		Binary:   bin,
		StateDir: filepath.Join(cfg.WorkDir, name+"-state"),
		RunDir:   filepath.Join(cfg.WorkDir, name+"-run"),
	})
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	var s []time.Duration
	for i := range cfg.Lifecycles + 2 {
		id := fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), i)
		start := time.Now()
		if err := rt.RunRaw(ctx, bundle, id); err != nil {
			return s, err
		}
		if i >= 2 {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// patchSpec makes the default spec run /bin/true without a terminal on the
// root file system at rootfs (an absolute path: runc refuses symlinks).
func patchSpec(p, rootfs string) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	proc, _ := spec["process"].(map[string]any)
	if proc == nil {
		return fmt.Errorf("%s: no process section", p)
	}
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	spec["root"] = map[string]any{"path": rootfs, "readonly": true}
	b, err = json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(p, b, 0o644)
}

func bwrap(ctx context.Context, cfg Config, rootfs string) ([]time.Duration, error) {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, fmt.Errorf("bwrap not installed (apt-get install bubblewrap)")
	}
	var s []time.Duration
	for i := range cfg.Lifecycles + 2 {
		start := time.Now()
		cmd := exec.CommandContext(ctx, bin, "--ro-bind", rootfs, "/", "--proc", "/proc", "--dev", "/dev",
			"--unshare-all", "--die-with-parent", "/bin/true")
		if out, err := cmd.CombinedOutput(); err != nil {
			return s, fmt.Errorf("bwrap: %w: %s", err, out)
		}
		if i >= 2 {
			s = append(s, time.Since(start))
		}
	}
	return s, nil
}

// Print writes the report as a table, then the ratios and targets.
func Print(w io.Writer, rep *Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measurement\tn\tmedian\tp90\t")
	for _, r := range rep.Results {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t%d\terror: %s\t\t\n", r.Name, len(r.Samples), r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t\n", r.Name, len(r.Samples), ms(r.Median), ms(r.P90))
	}
	tw.Flush()
	if len(rep.Ratios) > 0 {
		fmt.Fprintln(w)
		var keys []string
		for k := range rep.Ratios {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, "corral lifecycle / %s run: %.2fx\n", k, rep.Ratios[k])
		}
	}
	fmt.Fprintln(w)
	if r, ok := rep.Ratios["crun"]; ok {
		fmt.Fprintf(w, "target lifecycle <= 1.5x raw crun run: %s (%.2fx)\n", verdict(r <= 1.5), r)
	}
	for _, r := range rep.Results {
		if r.Name == "corral exec round trip" && r.Err == "" && r.Median > 0 {
			fmt.Fprintf(w, "target exec round trip <= 2 ms median: %s (%s)\n", verdict(r.Median <= 2*time.Millisecond), ms(r.Median))
		}
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func ms(d time.Duration) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", float64(d)/1e6), "0"), ".") + " ms"
}
