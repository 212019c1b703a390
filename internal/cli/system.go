package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/api/rest"
)

func (a *app) systemCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "system",
		Short: "Daemon-wide information: disk use (df), info",
		Args:  cobra.NoArgs,
	}
	info := a.infoCmd()
	info.Use = "info"
	info.Example = "  corral system info"
	cmd.AddCommand(a.dfCmd(), info)
	return cmd
}

// dfTypes are the titles of rest.DiskUsage's summary rows.
var dfTypes = map[string]string{
	"images": "Images", "build_cache": "Build Cache", "layers": "Layers", "sandboxes": "Sandboxes",
	"snapshots": "Snapshots", "pools": "Pools", "disk_cache": "Disk Cache", "volumes": "Local Volumes",
}

// dfRow is a summary row as system df --format sees it (docker's names).
type dfRow struct {
	Type        string
	TotalCount  string
	Active      string
	Size        string
	Reclaimable string
}

var dfHeader = dfRow{Type: "TYPE", TotalCount: "TOTAL", Active: "ACTIVE", Size: "SIZE", Reclaimable: "RECLAIMABLE"}

func toDFRow(r rest.DiskUsageRow) dfRow {
	t := dfTypes[r.Type]
	if t == "" {
		t = r.Type
	}
	rec := FormatSize(r.ReclaimableBytes)
	if r.SizeBytes > 0 {
		rec += fmt.Sprintf(" (%d%%)", r.ReclaimableBytes*100/r.SizeBytes)
	}
	return dfRow{Type: t, TotalCount: fmt.Sprint(r.Total), Active: fmt.Sprint(r.Active), Size: FormatSize(r.SizeBytes), Reclaimable: rec}
}

func (a *app) dfCmd() *cobra.Command {
	var verbose, asJSON bool
	var format string
	cmd := &cobra.Command{
		Use:   "df [-v] [--format TEMPLATE] [--json]",
		Short: "Show the disk space used by images, layers, sandboxes and snapshots",
		Long: `Show the disk space the daemon uses, as docker system df does: one row per
type, with how many there are, how many are in use, their size on disk and
what removing the unused ones would give back.

  Images       the images' layers (a layer shared by several counts once);
               reclaimable: the layers only images no sandbox uses keep
               (built-in images are never removed)
  Build Cache  layers only the build cache keeps (image prune --build-cache)
  Layers       every committed layer; reclaimable: those nothing keeps
               (image prune)
  Sandboxes    each sandbox's disk image (blocks allocated; a fork's or a
               snapshot's reflinked copy shares blocks with its source, and
               they count in each) and saved memory state; reclaimable:
               sandboxes in state error
  Snapshots    saved disks and memory state; reclaimable: snapshots no
               sandbox was created from
  Pools        the warm pools' ready sandboxes (and build steps running)
  Disk Cache   formatted empty disks kept ready for creates

-v lists every image, sandbox and snapshot. --format is a Go template over
.Type, .TotalCount, .Active, .Size and .Reclaimable ("table" and "json" as
in ls); --json prints the API's JSON (GET /v1/system/df).`,
		Example: `  corral system df
  corral system df -v
  corral system df --format '{{.Type}}: {{.Size}}'
  corral system df --json | jq '.sandboxes[] | {id, disk_bytes}'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "" && format != "json" {
				if _, err := parseFormat(format); err != nil {
					return err
				}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			du, err := c.DiskUsage(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(a.streams.Out, du)
			}
			rows := make([]dfRow, len(du.Summary))
			for i, r := range du.Summary {
				rows[i] = toDFRow(r)
			}
			if format != "" {
				return formatRows(a.streams.Out, format, rows, dfHeader)
			}
			if err := formatRows(a.streams.Out, "table {{.Type}}\t{{.TotalCount}}\t{{.Active}}\t{{.Size}}\t{{.Reclaimable}}", rows, dfHeader); err != nil {
				return err
			}
			if verbose {
				return printDFVerbose(a.streams.Out, du)
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "list every image, sandbox and snapshot")
	cmd.Flags().StringVar(&format, "format", "", `print the rows with a Go template ("table TEMPLATE", "json")`)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the API's JSON, details included")
	cmd.MarkFlagsMutuallyExclusive("json", "format", "verbose")
	return cmd
}

func printDFVerbose(w io.Writer, du *rest.DiskUsage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	images := func(title string, l []rest.ImageDiskUsage) {
		fmt.Fprintf(tw, "\n%s:\n", title)
		fmt.Fprintln(tw, "NAME\tSANDBOXES\tSIZE\tSHARED\tUNIQUE")
		for _, i := range l {
			name := i.Name
			if i.Builtin {
				name += " (built-in)"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", name, i.Sandboxes, FormatSize(i.SizeBytes), FormatSize(i.SharedBytes), FormatSize(i.UniqueBytes))
		}
	}
	images("Images", du.Images)
	fmt.Fprintf(tw, "\nSandboxes:\n")
	fmt.Fprintln(tw, "ID\tNAME\tIMAGE\tSTATE\tDISK\tMEMORY\tLIMIT")
	for _, s := range du.Sandboxes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Name, s.Image, s.State, FormatSize(s.DiskBytes), FormatSize(s.MemoryBytes), FormatSize(s.LimitBytes))
	}
	images("Snapshots", du.Snapshots)
	return tw.Flush()
}
