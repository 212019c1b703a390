package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/archive"
)

func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "image",
		Aliases: []string{"images"},
		Short:   "Manage images",
	}
	cmd.AddCommand(a.imageImportCmd(), a.imageLsCmd(), a.imageRmCmd())
	return cmd
}

func (a *app) imageImportCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "import NAME DIR|TARBALL|-",
		Short: "Import a root filesystem as an image",
		Long: `Import a root filesystem as image NAME. A directory is sent as a tar stream
built on the fly (symlinks kept, hard links preserved); a tarball (.tar or
.tar.gz) or "-" (stdin) is sent as is.`,
		Example: `  corral image import alpine ./alpine-rootfs
  corral image import python python-rootfs.tar.gz
  docker export $(docker create python:3.12) | corral image import python -`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var body io.Reader
			src := args[1]
			switch fi, err := os.Stat(src); {
			case src == "-":
				body = a.streams.In
			case err != nil:
				return err
			case fi.IsDir():
				root, err := os.OpenRoot(src)
				if err != nil {
					return err
				}
				defer root.Close()
				pr, pw := io.Pipe()
				done := make(chan struct{})
				go func() {
					defer close(done)
					pw.CloseWithError(archive.Write(pw, root, "."))
				}()
				defer func() {
					pr.CloseWithError(errors.New("import ended"))
					<-done
				}()
				body = pr
			default:
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				body = f
			}
			img, err := c.ImportImage(cmd.Context(), args[0], body)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.streams.Out, img.Name)
			return nil
		},
	}
}

func (a *app) imageLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List images",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			l, err := c.ListImages(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if l == nil {
					l = []rest.Image{}
				}
				return writeJSON(a.streams.Out, l)
			}
			tw := tabwriter.NewWriter(a.streams.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSIZE\tLAYERS\tCREATED\tDEFAULT")
			for _, img := range l {
				def := ""
				if img.Default {
					def = "*"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", img.Name, FormatSize(img.Size), img.Layers, ago(img.Created), def)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func (a *app) imageRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"remove"},
		Short:   "Remove images",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, n := range args {
				if err := c.RemoveImage(cmd.Context(), n); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", n, err))
					continue
				}
				fmt.Fprintln(a.streams.Out, n)
			}
			return errors.Join(errs...)
		},
	}
}
