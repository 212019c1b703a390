package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/bench"
)

func (a *app) benchCmd() *cobra.Command {
	var (
		cfg     bench.Config
		peers   string
		jsonOut bool
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure sandbox lifecycle and exec latency against raw crun, runc and bwrap",
		Long: `bench measures, in one run on this machine, through the running daemon:
  - create -> first exec of "true" done -> rm (the lifecycle),
  - the exec round trip of "true" in a running sandbox,
and the same lifecycle done by the raw peers (crun run, runc run, bwrap) on the
same busybox root file system, then prints medians, p90 and the ratios.
Peers need root (they create containers) and are skipped if not installed.

Targets: lifecycle within 1.5x of raw "crun run" of true; exec round trip
<= 2 ms median.`,
		Example: `  sudo corral bench
  sudo corral bench --lifecycles 100 --execs 1000 --peers crun,runc,bwrap --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			cfg.Client = c
			for _, p := range strings.Split(peers, ",") {
				if p = strings.TrimSpace(p); p != "" {
					cfg.Peers = append(cfg.Peers, p)
				}
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if jsonOut {
				enc := json.NewEncoder(a.streams.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			bench.Print(a.streams.Out, rep)
			for _, r := range rep.Results {
				if r.Err != "" && strings.HasPrefix(r.Name, "corral") {
					return fmt.Errorf("%s: %s", r.Name, r.Err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Image, "image", "busybox", "image of Corral's sandboxes (the peers run the same busybox root)")
	f.StringVar(&cfg.Runtime, "runtime", "", "daemon runtime to measure (default: the daemon's)")
	f.IntVar(&cfg.Lifecycles, "lifecycles", 30, "create+exec+rm rounds (and raw runs per peer)")
	f.IntVar(&cfg.Execs, "execs", 300, "exec round trips")
	f.StringVar(&peers, "peers", "crun,runc,bwrap", "comma-separated raw peers: crun, runc, bwrap")
	f.BoolVar(&jsonOut, "json", false, "print the report as JSON")
	return cmd
}
