package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/spec"
)

// parseVolumeMount parses --volume NAME:/PATH[:ro|:rw] (spec.ParseVolume).
func parseVolumeMount(s string) (rest.VolumeMount, error) {
	m, err := spec.ParseVolume(s)
	if err != nil {
		return rest.VolumeMount{}, fmt.Errorf("--volume %w", err)
	}
	return rest.VolumeMount{Name: m.Name, Target: m.Target, Readonly: m.Readonly}, nil
}

func (a *app) volumeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "volume",
		Aliases: []string{"volumes"},
		Short:   "Manage named volumes",
		Long: `A named volume is a file system of a fixed size that outlives the sandboxes
that mount it ("corral create --volume NAME:/PATH"). Several sandboxes can
mount one volume at once and see each other's files. In every sandbox its
files belong to the sandbox's own users: a file written by root in one
sandbox is root's in the others. Writes past the volume's size fail with
"no space left on device". See docs/volumes.md.`,
		Example: `  corral volume create data --size 2g
  corral create --volume data:/data
  corral volume ls
  corral volume rm data`,
	}
	cmd.AddCommand(a.volumeCreateCmd(), a.volumeLsCmd(), a.volumeInspectCmd(), a.volumeRmCmd())
	return cmd
}

func (a *app) volumeCreateCmd() *cobra.Command {
	var size int64
	var labels []string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a named volume, print its name",
		Long: `Create the volume NAME (letters and digits joined by single '.', '_' or
'-') of --size (16 MiB to 16 TiB, default 1 GiB). Its disk image is sparse:
it takes host disk space as files are written. The size cannot change later.`,
		Example: `  corral volume create data
  corral volume create cache --size 10g --label team=ml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := parseKV(labels, "--label")
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			v, err := c.CreateVolume(cmd.Context(), client.CreateVolumeOptions{Name: args[0], SizeBytes: size, Labels: l})
			if err != nil {
				return err
			}
			fmt.Fprintln(a.streams.Out, v.Name)
			return nil
		},
	}
	cmd.Flags().Var(sizeFlag{&size}, "size", "size of the volume: bytes or 512m, 10g (default 1g)")
	cmd.Flags().StringArrayVarP(&labels, "label", "l", nil, "label K=V; repeatable")
	return cmd
}

func (a *app) volumeLsCmd() *cobra.Command {
	var asJSON, quiet bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List named volumes",
		Long:    `List the volumes with their size, what is used of it and the sandboxes that mount them.`,
		Example: `  corral volume ls
  corral volume ls -q`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListVolumes(cmd.Context())
			if err != nil {
				return err
			}
			return printList(a, l, asJSON, quiet, "NAME\tSIZE\tUSED\tSANDBOXES\tCREATED", func(v rest.Volume) (string, string) {
				return v.Name, fmt.Sprintf("%s\t%s\t%s\t%s\t%s", v.Name, FormatSize(v.SizeBytes), FormatSize(v.UsedBytes), strings.Join(v.Sandboxes, ","), ago(v.Created))
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print names only")
	cmd.MarkFlagsMutuallyExclusive("json", "quiet")
	return cmd
}

func (a *app) volumeInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "inspect NAME...",
		Short:   "Print volumes as JSON",
		Example: `  corral volume inspect data`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var out []*rest.Volume
			for _, n := range args {
				v, err := c.InspectVolume(cmd.Context(), n)
				if err != nil {
					return err
				}
				out = append(out, v)
			}
			return writeJSON(a.streams.Out, out)
		},
	}
}

func (a *app) volumeRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove"},
		Short:   "Remove named volumes and their data",
		Long: `Remove volumes and everything on them. A volume that a sandbox mounts, in any
state (a stopped or suspended one mounts it again when it starts), is not
removed: remove those sandboxes first ("corral volume inspect" lists them).`,
		Example: `  corral volume rm data
  corral volume rm $(corral volume ls -q)`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			return a.each(cmd.Context(), args, c.RemoveVolume)
		},
	}
}
