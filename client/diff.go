package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
)

// Review of a sandbox's work: what it changed in its file system, as a
// list (Diff), a git patch (Patch) or a diffstat (DiffStat).
type (
	// Change is one changed path (Diff).
	Change = rest.Change
	// DiffStat is what a patch would change (DiffStat).
	DiffStat = rest.DiffStat
	// FileStat is one file of a DiffStat.
	FileStat = rest.FileStat
	// DiffNote is a path a patch leaves out or cannot hold.
	DiffNote = rest.DiffNote
)

// DiffOptions select what Diff, Patch and DiffStat compare.
type DiffOptions struct {
	// From is an image or a snapshot to compare with; "" is the
	// sandbox's own image (the snapshot it was made from, if any).
	From string
	// Dir is the sandbox directory compared ("" or "/": all); patch and
	// stat paths are relative to it.
	Dir string
	// Paths limit the change to paths under Dir that match: a path and
	// everything under it ("src/"), or a glob ("*.py" matches the last
	// element at any depth).
	Paths []string
	// MaxFileBytes and MaxBytes bound a patch (0: the daemon's defaults,
	// 16 MiB per file and 256 MiB in all): files past them are left out.
	MaxFileBytes, MaxBytes int64
}

func (o DiffOptions) query(format string) string {
	q := url.Values{"format": {format}}
	if o.From != "" {
		q.Set("from", o.From)
	}
	if o.Dir != "" {
		q.Set("dir", o.Dir)
	}
	for _, p := range o.Paths {
		q.Add("path", p)
	}
	if o.MaxFileBytes != 0 {
		q.Set("max_file_bytes", strconv.FormatInt(o.MaxFileBytes, 10))
	}
	if o.MaxBytes != 0 {
		q.Set("max_bytes", strconv.FormatInt(o.MaxBytes, 10))
	}
	return "?" + q.Encode()
}

// Diff calls fn with every path the sandbox added, changed or deleted,
// in path order (docker diff). A running sandbox is frozen only while its
// disk is copied, so the list is one consistent moment of it.
func (c *Client) Diff(ctx context.Context, id string, opts DiffOptions, fn func(Change) error) error {
	resp, err := c.send(ctx, http.MethodGet, sandboxPath(id)+"/diff"+opts.query(rest.DiffFormatList), nil, "application/x-ndjson")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ch Change
		if err := dec.Decode(&ch); err != nil {
			if errors.Is(err, io.EOF) {
				return streamError(resp)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("diff of %s: %v: %w", id, err, errdefs.ErrUnavailable)
		}
		if err := fn(ch); err != nil {
			return err
		}
	}
}

// PatchResult describes a patch that Patch wrote.
type PatchResult struct {
	// Notes are the files the patch left out (Omitted: over a size
	// limit; then the patch does not carry the whole change) or cannot
	// hold (devices, fifos, sockets).
	Notes []DiffNote
	// Stat is what DiffStat would return for the same options, from the
	// same pass over the files (PatchWithStat); nil from Patch, or from
	// a daemon that does not send it.
	Stat *DiffStat
}

// Omitted returns the notes of files left out for a size limit.
func (r *PatchResult) Omitted() []DiffNote {
	var out []DiffNote
	for _, n := range r.Notes {
		if n.Omitted {
			out = append(out, n)
		}
	}
	return out
}

// Patch writes what the sandbox changed to w as a git patch (paths
// relative to opts.Dir, binary files as "GIT binary patch" literals), which
// git apply takes. It returns the notes the patch carries.
func (c *Client) Patch(ctx context.Context, id string, opts DiffOptions, w io.Writer) (*PatchResult, error) {
	return c.patch(ctx, id, opts.query(rest.DiffFormatPatch), w)
}

// PatchWithStat is Patch that also returns, in the result's Stat, the
// diffstat of the same change (DiffStat's answer) from the daemon's one
// pass over the sandbox's files, instead of a second request and pass.
// The daemon sends the stat as the body's last line, which is not written
// to w.
func (c *Client) PatchWithStat(ctx context.Context, id string, opts DiffOptions, w io.Writer) (*PatchResult, error) {
	return c.patch(ctx, id, opts.query(rest.DiffFormatPatch)+"&stat=true", w)
}

func (c *Client) patch(ctx context.Context, id, query string, w io.Writer) (*PatchResult, error) {
	resp, err := c.send(ctx, http.MethodGet, sandboxPath(id)+"/diff"+query, nil, "text/x-diff")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	res := &PatchResult{}
	br := bufio.NewReader(resp.Body)
	atLineStart := true
	var stat []byte // the stat line, held back from w (PatchWithStat)
	inStat := false
	for {
		line, err := br.ReadSlice('\n')
		if atLineStart && len(line) > 0 {
			if n, ok := parseNote(string(line)); ok {
				res.Notes = append(res.Notes, n)
			}
			inStat = inStat || bytes.HasPrefix(line, []byte(rest.DiffStatLinePrefix))
		}
		atLineStart = err == nil
		switch {
		case inStat:
			stat = append(stat, line...)
		case len(line) > 0:
			if _, werr := w.Write(line); werr != nil {
				return nil, werr
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			if err := streamError(resp); err != nil {
				return res, err
			}
			if inStat {
				var st DiffStat
				if err := json.Unmarshal(bytes.TrimPrefix(stat, []byte(rest.DiffStatLinePrefix)), &st); err != nil {
					return res, fmt.Errorf("patch of %s: its stat: %v: %w", id, err, errdefs.ErrUnavailable)
				}
				res.Stat = &st
			}
			return res, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("patch of %s: %v: %w", id, err, errdefs.ErrUnavailable)
		}
	}
}

// notePrefix starts the note lines of a patch (fsdiff.NotePrefix).
const notePrefix = "# corral: "

// parseNote parses a note line: "# corral: omitted|skipped PATH: REASON".
// PATH is quoted when it holds special characters, so the first ": "
// after it ends it.
func parseNote(line string) (DiffNote, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), notePrefix)
	if !ok {
		return DiffNote{}, false
	}
	word, rest, _ := strings.Cut(rest, " ")
	var n DiffNote
	switch word {
	case "omitted":
		n.Omitted = true
	case "skipped":
	default:
		return DiffNote{}, false
	}
	p, reason := rest, ""
	if strings.HasPrefix(rest, `"`) {
		if q, err := strconv.QuotedPrefix(rest); err == nil {
			if uq, err := strconv.Unquote(q); err == nil {
				p, reason = uq, strings.TrimPrefix(rest[len(q):], ": ")
			}
		}
	} else if i := strings.Index(rest, ": "); i >= 0 {
		p, reason = rest[:i], rest[i+2:]
	}
	n.Path, n.Reason = p, reason
	return n, true
}

// DiffStat returns what a patch of the sandbox's change would change.
func (c *Client) DiffStat(ctx context.Context, id string, opts DiffOptions) (*DiffStat, error) {
	var st DiffStat
	if err := c.do(ctx, http.MethodGet, sandboxPath(id)+"/diff"+opts.query(rest.DiffFormatStat), nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// streamError returns the error a diff stream reported in its trailer
// after it started, read once the body is at EOF.
func streamError(resp *http.Response) error {
	if msg := resp.Trailer.Get(rest.DiffErrorTrailer); msg != "" {
		return fmt.Errorf("diff stream failed: %s: %w", msg, errdefs.ErrUnavailable)
	}
	return nil
}
