package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/spec"
)

func (a *app) buildCmd() *cobra.Command {
	var o buildFlags
	cmd := &cobra.Command{
		Use:   "build [-f corral.yaml] [-t NAME] [--no-cache] [-q]",
		Short: "Build an image from a spec (corral.yaml)",
		Long: `Build the image described by a spec file (default ./corral.yaml; see
docs/spec.md). The spec and the sources of its copy steps (paths relative to
the spec's directory, which they cannot leave) are sent to the daemon, which
runs each step in a build sandbox and caches its result: an unchanged step is
not run again ("CACHED"), and a changed step re-runs it and the steps after it.

Steps and their output stream to stdout, followed by the image name (alone
with -q); the progress of a base image pull goes to stderr. When a step fails,
corral exits with that step's exit code (1 when it did not run).`,
		Example: `  corral build
  corral build -f agents/py/corral.yaml -t py-agent:2
  corral build --no-cache -q`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var w io.Writer
			if !o.quiet {
				w = a.streams.Out
			}
			img, err := a.build(cmd.Context(), o, w)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.streams.Out, img.Name)
			return nil
		},
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "corral.yaml", "the spec file")
	cmd.Flags().StringVarP(&o.tag, "tag", "t", "", "the image's name (default: the spec's name)")
	cmd.Flags().BoolVar(&o.noCache, "no-cache", false, "run every step again")
	cmd.Flags().BoolVarP(&o.quiet, "quiet", "q", false, "print only the image name")
	return cmd
}

type buildFlags struct {
	file, tag      string
	noCache, quiet bool
}

// build checks the spec locally (errors name its file and line), sends it
// with its copy sources and prints the build's steps and output on w
// (nothing when w is nil). A failed step is an exitError with the step's
// exit code.
func (a *app) build(ctx context.Context, o buildFlags, w io.Writer) (*rest.Image, error) {
	sp, err := spec.Load(o.file)
	if err != nil {
		return nil, err
	}
	var srcs []string
	for _, st := range sp.BuildSteps() {
		if st.Kind == spec.KindCopy && st.Copy != nil {
			srcs = append(srcs, st.Copy.Src)
		}
	}
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	bc, err := client.BuildContext(o.file, srcs)
	if err != nil {
		return nil, err
	}
	defer bc.Close()
	fn := func(rest.Event) {}
	if w != nil {
		fn = a.buildPrinter(w)
	}
	img, err := c.Build(ctx, bc, rest.BuildOptions{Tag: o.tag, File: filepath.Base(o.file), NoCache: o.noCache}, fn)
	var be *client.BuildError
	if errors.As(err, &be) {
		code := be.ExitCode
		if code <= 0 || code > 255 {
			code = ExitError
		}
		return nil, &exitError{code: code, msg: be.Error()}
	}
	return img, err
}

// buildPrinter prints build events on w: a line per step ("[3/5] run pip
// install ...", "[2/5] CACHED copy ...") and the output of steps as it
// comes; the progress of a base image pull goes to stderr.
func (a *app) buildPrinter(w io.Writer) func(rest.Event) {
	p := a.newProgress()
	return func(ev rest.Event) {
		switch ev.Type {
		case "step":
			cached := ""
			if ev.Cached {
				cached = "CACHED "
			}
			fmt.Fprintf(w, "[%d/%d] %s%s\n", ev.Step, ev.Steps, cached, ev.Name)
		case "log":
			io.WriteString(w, ev.Data)
		case "progress":
			p.event(ev)
		}
	}
}
