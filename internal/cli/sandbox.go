package cli

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"text/template"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/agent/execcheck"
	"github.com/corral-sandbox/corral/internal/eval"
	"github.com/corral-sandbox/corral/internal/spec"
	"github.com/corral-sandbox/corral/internal/version"
)

// createFlags are the flags of create and run.
type createFlags struct {
	image, workdir, name, runtime, user string
	tier                                string
	cpus                                float64
	memory, disk, pids                  int64
	env, labels                         []string
	timeout                             time.Duration
	net                                 netFlags
	// from is a snapshot to create from (an alias of image).
	from string
	// idleTimeout, idleAction and noPool are the idle policy and the
	// warm-pool opt-out.
	idleTimeout time.Duration
	idleAction  string
	noPool      bool
	// volumes are NAME:/PATH[:ro] mounts of named volumes.
	volumes []string
}

func (f *createFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.image, "image", "", "image name (default: the daemon's default image)")
	fs.Var(limitFloat{&f.cpus}, "cpus", "CPU limit, e.g. 0.5 or 2")
	fs.Var(limitSize{sizeFlag{&f.memory}}, "memory", "memory limit: bytes or 512m, 1g, 1.5GiB")
	fs.Var(limitSize{sizeFlag{&f.disk}}, "disk", "disk limit of the writable layer: bytes or 512m, 10g")
	fs.Var(limitInt{&f.pids}, "pids", "maximum number of processes")
	fs.StringArrayVarP(&f.env, "env", "e", nil, "environment variable K=V (K alone copies it from this shell); repeatable")
	fs.StringVarP(&f.workdir, "workdir", "w", "", "default working directory of commands")
	fs.DurationVar(&f.timeout, "timeout", 0, "remove the sandbox this long after creation, e.g. 30m (0 = never)")
	fs.StringArrayVarP(&f.labels, "label", "l", nil, "label K=V; repeatable")
	fs.StringVar(&f.name, "name", "", "unique name, usable wherever an ID is")
	fs.StringVar(&f.tier, "tier", "", "isolation tier: container (namespaces on the host's kernel) or gvisor (gVisor's kernel in user space); default: the runtime's, else the daemon's (never falls back)")
	fs.StringVar(&f.runtime, "runtime", "", "runtime within the tier: crun or runc for container, runsc for gvisor (default: the tier's)")
	fs.StringVar(&f.from, "from", "", "snapshot to create from (corral snapshot); the same as --image SNAPSHOT")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 0, "suspend (or --idle-action remove) the sandbox after this long without activity, e.g. 10m (0 = never)")
	fs.StringVar(&f.idleAction, "idle-action", "", "what --idle-timeout does: suspend (default; the next exec resumes it) or remove")
	fs.BoolVar(&f.noPool, "no-pool", false, "never take a ready sandbox from a warm pool: make a new one")
	fs.StringArrayVarP(&f.volumes, "volume", "v", nil, "mount a named volume (corral volume create): NAME:/PATH or NAME:/PATH:ro; repeatable")
	f.net.register(fs, "network")
}

func (f *createFlags) request() (rest.CreateSandboxRequest, error) {
	req := rest.CreateSandboxRequest{
		Image: f.image, Name: f.name, Workdir: f.workdir, Runtime: f.runtime, Tier: f.tier, User: f.user,
		Resources: rest.Resources{CPUs: f.cpus, MemoryBytes: f.memory, DiskBytes: f.disk, Pids: f.pids},
	}
	if f.cpus < 0 || f.pids < 0 || f.timeout < 0 || f.idleTimeout < 0 {
		return req, errors.New("--cpus, --pids, --timeout and --idle-timeout must not be negative")
	}
	req.TimeoutSeconds = seconds(f.timeout)
	if f.from != "" {
		if f.image != "" {
			return req, errors.New("--from SNAPSHOT and --image are the same thing: give one of them")
		}
		req.Snapshot = f.from
	}
	switch f.idleAction {
	case "", "suspend", "remove":
	default:
		return req, fmt.Errorf("--idle-action %q: want suspend or remove", f.idleAction)
	}
	if f.idleAction != "" && f.idleTimeout == 0 {
		return req, errors.New("--idle-action needs --idle-timeout")
	}
	req.IdleTimeoutSeconds, req.IdleAction, req.NoPool = seconds(f.idleTimeout), f.idleAction, f.noPool
	var err error
	if req.Env, err = parseEnv(f.env, "--env"); err != nil {
		return req, err
	}
	if req.Labels, err = parseKV(f.labels, "--label"); err != nil {
		return req, err
	}
	if err := f.net.apply(&req); err != nil {
		return req, err
	}
	for _, v := range f.volumes {
		m, err := parseVolumeMount(v)
		if err != nil {
			return req, err
		}
		req.Volumes = append(req.Volumes, m)
	}
	return req, nil
}

// seconds rounds d up to whole seconds, the API's unit of timeouts.
func seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// parseEnv parses K=V pairs; a bare K takes the value from this process's
// environment (and is dropped when unset), as docker does.
func parseEnv(kvs []string, flag string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if k == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, kv)
		}
		if err := execcheck.ValidName(k); err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, kv, err)
		}
		if !ok {
			if v, ok = os.LookupEnv(k); !ok {
				continue
			}
		}
		m[k] = v
	}
	return m, nil
}

// parseKV parses K=V pairs.
func parseKV(kvs []string, flag string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if k == "" || !ok {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

func (a *app) createCmd() *cobra.Command {
	var f createFlags
	var specFile string
	var keepStart bool
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create and start a sandbox, print its ID",
		Long: `Create and start a sandbox and print its ID.

With --spec, the spec is built first (as "corral build -f FILE" would; an
unchanged spec is taken from the cache at once, a spec without a name gets
one from its path) and the sandbox is made from the built image: the image's
env, workdir, user and limits apply, and flags given here override them.

Egress is off unless asked for (or set by the image's spec): --network full
or --allow DEST (mode allowlist) let the sandbox out through the daemon's
egress proxy, which logs every attempt ("corral net log"). --secret NAME
gives the sandbox a placeholder for a stored secret ("corral secret set")
that the proxy replaces with the value on requests to the secret's hosts.

--from SNAPSHOT starts the sandbox with a copy of a snapshot's files ("corral
snapshot"). --idle-timeout suspends the sandbox after that long without
exec, file or API activity (the next exec resumes it), or removes it with
--idle-action remove. A sandbox whose image, runtime and limits match a warm
pool ("corral pool") is taken ready from the pool unless --no-pool.

--keep-start snapshots the new sandbox at once as start-ID, its state
before anything ran in it, so that "corral eval capture ID" can turn what
happened next into an eval scenario.`,
		Example: `  corral create
  corral create --image python --memory 1g --cpus 2 --pids 256 --name web
  corral create --env API_URL=http://x --label team=ml --timeout 1h
  corral create --allow pypi.example.org --allow '*.github.com' --net-budget 2g
  corral create --network full --secret OPENAI_API_KEY=api.openai.example
  corral create --spec corral.yaml --memory 2g
  corral create --from deps-ready --idle-timeout 10m
  corral create --image python --idle-timeout 1h --idle-action remove --no-pool`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.request()
			if err != nil {
				return err
			}
			if specFile != "" {
				// Build output goes to stderr: stdout is the ID alone.
				img, err := a.build(cmd.Context(), buildFlags{file: specFile, tag: specTag(specFile)}, a.streams.Err)
				if err != nil {
					return err
				}
				req.Image = img.Name
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			sb, err := c.CreateSandbox(cmd.Context(), req)
			if err != nil {
				return err
			}
			if keepStart {
				if _, err := c.Snapshot(cmd.Context(), sb.ID, eval.StartSnapshot(sb.ID)); err != nil {
					_ = c.RemoveSandbox(context.WithoutCancel(cmd.Context()), sb.ID, client.RemoveOptions{Force: true})
					return fmt.Errorf("--keep-start: snapshot: %w", err)
				}
			}
			fmt.Fprintln(a.streams.Out, sb.ID)
			return nil
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().BoolVar(&keepStart, "keep-start", false, "snapshot the new sandbox as start-ID for corral eval capture")
	cmd.Flags().StringVar(&f.user, "user", "", "default user of commands: USER or USER:GROUP, each a name or a number")
	cmd.Flags().StringVar(&specFile, "spec", "", "build this spec (corral.yaml) and create from its image")
	cmd.MarkFlagsMutuallyExclusive("spec", "image")
	cmd.MarkFlagsMutuallyExclusive("spec", "from")
	return cmd
}

// specTag is the image name create --spec builds: empty (the spec's own
// name) when the spec names its image, else one derived from its path.
func specTag(file string) string {
	if sp, err := spec.Load(file); err != nil || sp.Name != "" {
		return "" // a load error is reported by the build
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		abs = file
	}
	sum := sha256.Sum256([]byte(abs))
	return "spec-" + hex.EncodeToString(sum[:6])
}

func (a *app) lsCmd() *cobra.Command {
	var asJSON, quiet bool
	var filters []string
	var format string
	cmd := &cobra.Command{
		Use:     "ls [flags]",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Long: `List sandboxes.

--filter KEY=VALUE keeps the sandboxes that match, as docker ps --filter:
label=K (the label is set) or label=K=V, state=running (also status=),
image=NAME, runtime=NAME, tier=container|gvisor, id=PREFIX, name=SUBSTRING. It is repeatable:
label terms must all match; several values of another key are
alternatives (state=running --filter state=paused lists both).

--format prints each sandbox with a Go template over the fields .ID, .Name,
.Image, .State, .Tier, .Runtime, .Created ("5m ago"), .CreatedAt, .Labels ("k=v,..."),
.Origin and {{.Label "K"}}; "table TEMPLATE" adds a header and aligns the
columns, "json" prints one JSON object per line. \t in a template is a tab.`,
		Example: `  corral ls
  corral ls -q | xargs corral rm -f
  corral ls --filter label=team=ml --filter state=running
  corral ls --format '{{.ID}} {{.Label "team"}}'
  corral ls --format 'table {{.ID}}\t{{.State}}\t{{.Labels}}'
  corral ls --json | jq '.[].id'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := parseBoxFilter(filters)
			if err != nil {
				return err
			}
			if format != "" && strings.TrimSpace(format) != "json" {
				if _, err := parseFormat(strings.TrimPrefix(format, "table")); err != nil {
					return err // before asking the daemon
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			all, err := c.ListSandboxes(cmd.Context())
			if err != nil {
				return err
			}
			var l []rest.Sandbox
			for _, sb := range all {
				if f.match(sb) {
					l = append(l, sb)
				}
			}
			if format != "" {
				rows := make([]boxRow, len(l))
				for i, sb := range l {
					rows[i] = toBoxRow(sb)
				}
				return formatRows(a.streams.Out, format, rows, boxHeader)
			}
			return printList(a, l, asJSON, quiet, "ID\tNAME\tIMAGE\tSTATE\tTIER\tCREATED\tLABELS", func(sb rest.Sandbox) (string, string) {
				return sb.ID, fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", sb.ID, sb.Name, sb.Image, sb.State, cmp.Or(sb.Tier, "container"), ago(sb.Created), joinLabels(sb.Labels))
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print IDs only")
	cmd.Flags().StringArrayVarP(&filters, "filter", "f", nil, "keep sandboxes that match KEY=VALUE (label, state, image, tier, runtime, id, name); repeatable")
	cmd.Flags().StringVar(&format, "format", "", `print with a Go template ("table TEMPLATE" for a table, "json" for JSON lines)`)
	cmd.MarkFlagsMutuallyExclusive("json", "quiet", "format")
	return cmd
}

func ago(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return t.Local().Format("2006-01-02 15:04")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (a *app) inspectCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "inspect ID...",
		Short: "Print sandboxes as JSON, with their resource usage",
		Long: `Print sandboxes as a JSON array, with their resource usage.

--format runs a Go template on each sandbox instead, over the fields of the
Go type rest.Sandbox (as docker inspect --format): {{.State}}, {{.Image}},
{{.Resources.MemoryBytes}}, {{.Usage.MemoryBytes}}, {{json .Labels}},
{{index .Labels "team"}}.`,
		Example: `  corral inspect web | jq '.[0].usage'
  corral inspect --format '{{.ID}} {{.State}}' web
  corral inspect -f '{{json .Network}}' web`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var tmpl *template.Template
			if format != "" {
				var err error
				if tmpl, err = parseFormat(format); err != nil {
					return err
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			out := []*rest.Sandbox{}
			var errs []error
			for _, id := range args {
				sb, err := c.GetSandbox(cmd.Context(), id)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				if tmpl != nil {
					if err := executeLine(a.streams.Out, tmpl, sb); err != nil {
						return err
					}
					continue
				}
				out = append(out, sb)
			}
			if tmpl == nil {
				if err := writeJSON(a.streams.Out, out); err != nil {
					return err
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "", "print each sandbox with a Go template")
	return cmd
}

func (a *app) rmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "rm [-f] ID...",
		Aliases: []string{"remove"},
		Short:   "Stop and remove sandboxes",
		Example: `  corral rm web
  corral rm -f $(corral ls -q)`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				if err := c.RemoveSandbox(cmd.Context(), id, client.RemoveOptions{Force: force}); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", id, err))
					continue
				}
				fmt.Fprintln(a.streams.Out, id)
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill the sandbox if it does not stop gracefully")
	return cmd
}

// psCmd is "ps ID", the commands running in a box, and "ps" without an
// ID, which is ls (docker users list containers with ps): it is made from
// lsCmd, so it has every flag of ls.
func (a *app) psCmd() *cobra.Command {
	cmd := a.lsCmd()
	ls := cmd.RunE
	cmd.Use = "ps [flags] [ID]"
	cmd.Aliases = nil
	cmd.Short = "List sandboxes (as ls), or the commands running in one"
	cmd.Long = `Without an ID, list sandboxes: the same as "corral ls", for docker users
("docker ps"); every sandbox is listed, so -a is accepted and changes nothing.
With an ID, list the commands started in that sandbox through exec: the
running ones, then those that ended recently (the agent keeps the last 64,
for 15 minutes), with PID, TAG, STATE (running or exited), EXIT (the exit
code as exec exits with it; "137 oom" for the OOM killer, "124 timeout" for
--timeout), when it started and the command line; or --json.`
	cmd.Example = `  corral ps
  corral ps -q
  corral ps web
  corral ps web --json`
	cmd.Args = cobra.MaximumNArgs(1)
	cmd.Flags().BoolP("all", "a", false, "accepted for docker users: every sandbox is always listed")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return ls(cmd, args)
		}
		var listOnly string
		cmd.Flags().Visit(func(f *pflag.Flag) {
			if f.Name != "json" && listOnly == "" && cmd.InheritedFlags().Lookup(f.Name) == nil {
				listOnly = f.Name
			}
		})
		if listOnly != "" {
			return fmt.Errorf("--%s applies to the list of sandboxes (ps without an ID); with an ID only --json does", listOnly)
		}
		asJSON, err := cmd.Flags().GetBool("json")
		if err != nil {
			return err
		}
		c, err := a.client()
		if err != nil {
			return err
		}
		ps, err := c.Sandbox(args[0]).ListProcesses(cmd.Context(), client.ListProcessesOptions{Ended: true})
		if err != nil {
			return err
		}
		if asJSON {
			return writeJSON(a.streams.Out, ps)
		}
		tw := tabwriter.NewWriter(a.streams.Out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PID\tTAG\tSTATE\tEXIT\tSTARTED\tCMD")
		for _, p := range ps {
			started := "-"
			if !p.StartedAt.IsZero() {
				started = ago(p.StartedAt)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.PID, p.Tag, p.State, exitColumn(p.Exit), started, strings.Join(p.Cmd, " "))
		}
		return tw.Flush()
	}
	return cmd
}

func (a *app) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the client's and the daemon's versions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cv := rest.Version{Version: version.Version, GoVersion: runtime.Version()}
			c, err := a.client()
			var sv *rest.Version
			if err == nil {
				sv, err = c.Version(cmd.Context())
			}
			if asJSON {
				if jerr := writeJSON(a.streams.Out, map[string]any{"client": cv, "server": sv}); jerr != nil {
					return jerr
				}
				return err
			}
			fmt.Fprintf(a.streams.Out, "Client:\n  Version:  %s\n  Go:       %s\n", cv.Version, cv.GoVersion)
			if err != nil {
				return fmt.Errorf("daemon at %s: %w", a.host, err)
			}
			fmt.Fprintf(a.streams.Out, "Server:\n  Version:  %s\n  Go:       %s\n  Runtimes: %s\n  Cgroup:   %s\n",
				sv.Version, sv.GoVersion, strings.Join(sv.Runtimes, ", "), sv.Cgroup)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printList prints l as JSON (an empty list as []), as one key per line
// (quiet), or as a table under header; row returns an item's key and its
// tab-separated table row.
func printList[T any](a *app, l []T, asJSON, quiet bool, header string, row func(T) (string, string)) error {
	switch {
	case asJSON:
		if l == nil {
			l = []T{}
		}
		return writeJSON(a.streams.Out, l)
	case quiet:
		for _, it := range l {
			key, _ := row(it)
			fmt.Fprintln(a.streams.Out, key)
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.streams.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range l {
		_, line := row(it)
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}
