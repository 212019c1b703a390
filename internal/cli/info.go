package cli

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/api/rest"
)

func (a *app) infoCmd() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "info [--format TEMPLATE]",
		Short: "Describe the daemon: version, directories, cgroups, runtimes, storage, counts",
		Long: `Describe the daemon and its host, as docker info does: version, root and
run directories, cgroup version and layout, the configured runtimes (path,
version, whether available and why not), storage (where sandboxes' disks
live, the disk volume, free space), and counts of sandboxes by state,
images, snapshots and warm pools.

--format json prints the API's JSON (GET /v1/info); another --format is a Go
template over the fields of rest.Info ({{.Root}}, {{.Cgroup.Version}},
{{range .Runtimes}}{{.Name}} {{end}}).`,
		Example: `  corral info
  corral info --format '{{.Storage.DiskDir}}'
  corral info --format json | jq '.runtimes[] | select(.available)'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			info, err := c.Info(cmd.Context())
			if err != nil {
				return err
			}
			switch strings.TrimSpace(format) {
			case "":
				return printInfo(a.streams.Out, info)
			case "json":
				return writeJSON(a.streams.Out, info)
			}
			t, err := parseFormat(format)
			if err != nil {
				return err
			}
			return executeLine(a.streams.Out, t, info)
		},
	}
	cmd.Flags().StringVarP(&format, "format", "f", "", `print with a Go template, or "json"`)
	return cmd
}

// printInfo prints info as docker info does: indented key: value lines.
func printInfo(w io.Writer, info *rest.Info) error {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	p := func(indent int, key string, format string, args ...any) {
		fmt.Fprintf(tw, "%s%s:\t%s\n", strings.Repeat(" ", indent), key, fmt.Sprintf(format, args...))
	}
	p(0, "Server Version", "%s (%s)", info.Version, info.GoVersion)
	p(0, "Root Dir", "%s", info.Root)
	p(0, "Run Dir", "%s", info.RunDir)
	p(0, "Host", "%s/%s, kernel %s, %d CPUs, %s memory", info.OS, info.Arch, info.Kernel, info.CPUs, FormatSize(info.MemoryBytes))
	p(0, "Cgroup", "%s (driver %s, parent /%s)", info.Cgroup.Version, info.Cgroup.Driver, info.Cgroup.Parent)
	p(0, "Default Image", "%s", info.DefaultImage)
	if info.DefaultTier != "" {
		p(0, "Default Tier", "%s", info.DefaultTier)
	}
	p(0, "Default Runtime", "%s", info.DefaultRuntime)
	fmt.Fprintln(tw, "Runtimes:")
	for _, r := range info.Runtimes {
		state := "available"
		switch {
		case r.Status == rest.RuntimeUnsafe:
			state = "UNSAFE, allowed by allow_unsafe_runtimes: " + r.Reason
		case r.Status == rest.RuntimeRefused:
			state = "refused: " + r.Reason
		case !r.Available:
			state = "not available: " + r.Reason
		}
		userns := "user namespaces: on"
		if r.Available && !r.UserNS {
			// Never silently weaker: say it where the runtime is listed.
			userns = "user namespaces: OFF (box root is host root)"
			if r.UserNSReason != "" {
				userns += ": " + r.UserNSReason
			}
		}
		if !r.Available {
			userns = ""
		}
		var parts []string
		for _, s := range []string{r.Path, r.Version, state, userns} {
			if s != "" {
				parts = append(parts, s)
			}
		}
		p(1, r.Name, "%s", strings.Join(parts, ", "))
	}
	fmt.Fprintln(tw, "Tiers:")
	for _, t := range info.Tiers {
		state := "available (" + strings.Join(t.Runtimes, ", ") + "; default " + t.DefaultRuntime + ")"
		if !t.Available {
			state = "not available: " + t.Missing
		}
		p(1, t.Name, "%s", state)
	}
	st := info.Storage
	fmt.Fprintln(tw, "Storage:")
	p(1, "Driver", "%s", st.Driver)
	p(1, "Dir", "%s (%s free of %s)", st.Dir, FormatSize(st.FreeBytes), FormatSize(st.TotalBytes))
	p(1, "Disks", "%s (reflink copies: %v)", st.DiskDir, st.Reflink)
	if v := st.DiskVolume; v != nil {
		dev := ""
		if v.Device != "" {
			dev = " on " + v.Device
		}
		p(1, "Disk Volume", "%s%s (%s free of %s, %s allocated on the host)", v.Image, dev,
			FormatSize(v.FreeBytes), FormatSize(v.TotalBytes), FormatSize(v.AllocatedBytes))
	}
	var states []string
	for _, s := range slices.Sorted(maps.Keys(info.Sandboxes.ByState)) {
		states = append(states, fmt.Sprintf("%s %d", s, info.Sandboxes.ByState[s]))
	}
	p(0, "Sandboxes", "%d%s", info.Sandboxes.Total, parenthesize(strings.Join(states, ", ")))
	p(0, "Images", "%d", info.Images)
	p(0, "Snapshots", "%d", info.Snapshots)
	p(0, "Pools", "%d (%d of %d sandboxes ready)", info.Pools.Pools, info.Pools.Ready, info.Pools.Size)
	return tw.Flush()
}

func parenthesize(s string) string {
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}
