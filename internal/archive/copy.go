package archive

import (
	"context"
	"errors"
	"io"
	"os"
)

// Copy copies the file or tree at p under src into dst through a tar
// stream, so that every Apply check holds for what is copied. With
// opts.Whiteouts the stream is WriteLayer's OCI form (overlay whiteouts
// cross as OCI whiteouts and come back as overlay whiteouts), otherwise
// Write's. tee, when not nil, receives the whole stream (to digest it).
func Copy(ctx context.Context, src *os.Root, p string, dst *os.Root, opts Options, tee io.Writer) error {
	write := Write
	if opts.Whiteouts {
		write = WriteLayer
	}
	pr, pw := io.Pipe()
	var w io.Writer = pw
	if tee != nil {
		w = io.MultiWriter(pw, tee)
	}
	done := make(chan error, 1)
	go func() {
		err := write(w, src, p)
		pw.CloseWithError(err)
		done <- err
	}()
	_, err := Apply(ctx, dst, pr, opts)
	if err == nil {
		// What follows the tar's end (padding) still reaches tee.
		_, err = io.Copy(io.Discard, pr)
	}
	pr.CloseWithError(errors.New("extraction stopped"))
	if werr := <-done; err == nil {
		err = werr
	}
	return err
}
