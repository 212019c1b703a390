package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/internal/bench"
)

func (a *app) benchCmd() *cobra.Command {
	var (
		cfg                       bench.Config
		peers, densityPeers, only string
		chart, jsonFile           string
		jsonOut                   bool
	)
	cfg.DensityMemory = 32 << 20
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure Corral against raw crun, runc, bwrap and podman: lifecycle, exec, throughput, density, fork, suspend",
		Long: `bench measures, in one run on this machine, through the running daemon, and
prints side by side with the same work done by the raw peers (crun run, runc
run, bwrap, podman run --rm, each on the same busybox root file system):

  lifecycle   create -> first exec of "true" done -> rm, next to each peer's
              run of true; plus the exec round trip of "true" in a running
              sandbox
  throughput  sandboxes created and removed per second with C concurrent
              clients (--clients, default 1 and 2 x CPUs), next to each
              peer's lifecycles run C at a time
  density     --density idle sandboxes (busybox, --density-memory limit),
              measured once their agents exited when idle (up to
              --density-idle-wait; the memory with the agents still running
              is printed too): host memory per box from /proc/meminfo
              MemAvailable, Slab and the other kernel counters, the box
              processes' RSS/PSS (smaps_rollup);
              every box must answer an exec, and the memory must come back
              after removal; the same for idle raw crun containers
  ops         through the Go SDK: create -> first exec (-> rm) with a warm
              pool ready, fork of a sandbox that wrote 1 MiB and 1 GiB (and
              with --memory-state), pause, suspend and resume (with the size
              of the saved memory), filesystem-only suspend and resume
  tiers       the gvisor tier's create -> first exec -> rm next to a raw
              "runsc run" of true; the exec round trip in a gvisor box next
              to one in a container box; and the cost of the user
              namespace: the container tier's lifecycle and create+rm
              throughput, and the host memory per idle box (--tier-density
              boxes, measured as density measures them), on two daemons
              bench starts with state of its own under a temporary
              directory, alike but for userns = "on" and "off" (removed at
              the end); every verdict is a ratio

Peers need root (they create containers) and say "not installed" when
missing. podman runs with storage (and crun state) of its own under a
temporary directory, from the same private mount namespace the daemon uses,
with --cgroup-manager cgroupfs --events-backend file, and runs --network
none under a cgroup parent of its own; it imports the busybox root as a
local image (no registry access) and removes all of it at the end.
Density reads host memory, so run bench on the daemon's machine, with
nothing else starting or stopping meanwhile.

--chart FILE writes an SVG chart of the medians (bars per measurement
group, targets drawn as lines); --json prints every figure as JSON instead
of the tables, --json-file FILE writes it next to them.

Targets are ratios against a peer measured in the same run, never absolute
figures: cold create -> first exec -> rm <= 1.5x a raw "crun run" of true
(also from a warm pool); create -> first exec from a warm pool and an exec
round trip <= 0.3x crun run; create+rm per second with 4 clients >= 1.0x
crun run's; idle host memory per box <= 1.2x an idle crun container's;
memory back after the idle boxes are removed >= 0.98x crun's within
--return-wait, no memory cgroup left; a fork right after 512 MiB written
without syncing, and after 1 GiB written and synced, <= 1.2x a fork after
1 MiB; memory restore (resume of a suspended box) <= 5x crun run;
gvisor lifecycle <= 1.2x raw "runsc run"; gvisor exec <= 3x the container
tier's; the user namespace within 10% (lifecycle, throughput and memory per idle
box).`,
		Example: `  sudo corral bench --chart bench.svg --json-file bench.json
  sudo corral bench --only lifecycle,throughput --lifecycles 100 --execs 1000
  sudo corral bench --only density --density 200 --density-peers crun
  sudo corral bench --only tiers --tier-density 50
  sudo corral bench --peers crun,runc,bwrap,podman --clients 1,8 --json > bench.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			cfg.Client = c
			cfg.Peers = splitList(peers)
			cfg.DensityPeers = splitList(densityPeers)
			cfg.Sections = splitList(only)
			if sock, ok := strings.CutPrefix(a.host, "unix://"); ok {
				cfg.DaemonSocket = sock
			}
			if exe, err := os.Executable(); err == nil {
				cfg.DaemonBinary = exe // the tiers section's own daemons
			}
			if !jsonOut {
				cfg.Progress = a.streams.Err
			}
			rep, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if chart != "" {
				var buf bytes.Buffer
				if err := bench.WriteSVG(&buf, bench.ChartOf(rep)); err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Clean(chart), buf.Bytes(), 0o644); err != nil {
					return fmt.Errorf("write chart: %w", err)
				}
			}
			js, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				return err
			}
			js = append(js, '\n')
			if jsonFile != "" {
				if err := os.WriteFile(filepath.Clean(jsonFile), js, 0o644); err != nil {
					return fmt.Errorf("write json: %w", err)
				}
			}
			if jsonOut {
				_, err := a.streams.Out.Write(js)
				return err
			}
			bench.Print(a.streams.Out, rep)
			for _, r := range rep.Results {
				if r.Err != "" && (r.Name == bench.NameLifecycle || r.Name == bench.NameExec) {
					return fmt.Errorf("%s: %s", r.Name, r.Err)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Image, "image", "busybox", "image of Corral's sandboxes (the peers run the same busybox root)")
	f.StringVar(&cfg.Runtime, "runtime", "", "daemon runtime to measure (default: the daemon's)")
	f.StringVar(&only, "only", strings.Join(bench.AllSections, ","), "comma-separated sections to run: "+strings.Join(bench.AllSections, ", ")+" (GET /metrics is timed with the density boxes: obs and density)")
	f.IntVar(&cfg.Lifecycles, "lifecycles", 30, "create+exec+rm rounds, cold and (ops) with a warm pool, and raw runs per peer")
	f.IntVar(&cfg.Execs, "execs", 300, "exec round trips")
	f.StringVar(&peers, "peers", "crun,runc,bwrap,podman", "comma-separated raw peers: crun, runc, runsc, bwrap, podman (the tiers section runs runsc on its own)")
	f.IntSliceVar(&cfg.Clients, "clients", bench.DefaultClients(), "concurrent clients of the throughput measurement")
	f.IntVar(&cfg.ThroughputOps, "ops", 100, "create+rm (or peer runs) per throughput series")
	f.IntVar(&cfg.DensityBoxes, "density", 1000, "idle sandboxes the density measurement starts")
	f.IntVar(&cfg.TierDensity, "tier-density", 100, "idle sandboxes the tiers section starts on each of its daemons (userns on and off) to compare their memory per box")
	f.Var(sizeFlag{&cfg.DensityMemory}, "density-memory", "memory limit of each idle sandbox: bytes or 32m")
	f.StringVar(&densityPeers, "density-peers", "crun", "comma-separated peers whose idle containers are measured too: crun, runc (empty: none)")
	f.DurationVar(&cfg.Settle, "settle", bench.DefaultSettle, "wait before each read of host memory")
	f.DurationVar(&cfg.AgentIdleWait, "density-idle-wait", 2*time.Minute, "wait up to this long for the idle boxes' agents to exit (the daemon's agent_idle_exit) before measuring them; 0 measures them with their agents")
	f.IntVar(&cfg.Forks, "forks", 5, "forks, pauses and suspends timed per series")
	f.Var(sizeFlag{&cfg.ForkUnsyncedBytes}, "fork-unsynced", "written without syncing before each fork of the unsynced fork series: bytes or 512m (default 512m)")
	f.DurationVar(&cfg.ReturnWait, "return-wait", bench.DefaultReturnWait, "wait up to this long after the idle boxes are removed for their memory to come back and their memory cgroups to go")
	f.StringVar(&chart, "chart", "", "write an SVG chart of the results to FILE")
	f.BoolVar(&jsonOut, "json", false, "print the report as JSON (every figure) instead of the tables")
	f.StringVar(&jsonFile, "json-file", "", "also write the report as JSON to FILE")
	return cmd
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var l []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			l = append(l, p)
		}
	}
	return l
}
