package httpapi

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/fsdiff"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// diffRequest is the query of GET /v1/sandboxes/{id}/diff.
type diffRequest struct {
	from, format string
	// stat asks a patch for its DiffStat in its last line
	// (rest.DiffStatLinePrefix).
	stat  bool
	walk  fsdiff.Options
	patch fsdiff.PatchOptions
}

func parseDiffRequest(r *http.Request) (diffRequest, error) {
	q := r.URL.Query()
	d := diffRequest{from: q.Get("from"), format: q.Get("format")}
	switch d.format {
	case "":
		d.format = rest.DiffFormatList
	case rest.DiffFormatList, rest.DiffFormatPatch, rest.DiffFormatStat:
	default:
		return d, fmt.Errorf("format %q must be list, patch or stat: %w", d.format, errdefs.ErrInvalidArgument)
	}
	stat, err := boolQuery(r, "stat")
	if err != nil {
		return d, err
	}
	if stat && d.format != rest.DiffFormatPatch {
		return d, fmt.Errorf("stat=true goes with format=patch (its stat in its last line), not format=%s: %w", d.format, errdefs.ErrInvalidArgument)
	}
	d.stat = stat
	d.walk = fsdiff.Options{Dir: q.Get("dir"), Paths: q["path"]}
	if _, err := fsdiff.NewFilter(d.walk.Paths); err != nil {
		return d, err
	}
	for _, f := range []struct {
		name string
		dst  *int64
	}{{"max_file_bytes", &d.patch.MaxFileBytes}, {"max_bytes", &d.patch.MaxBytes}} {
		if v := q.Get(f.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n <= 0 {
				return d, fmt.Errorf("%s %q must be a positive number of bytes: %w", f.name, v, errdefs.ErrInvalidArgument)
			}
			*f.dst = n
		}
	}
	return d, nil
}

// diffSandbox answers GET /v1/sandboxes/{id}/diff: the sandbox's changes
// against its image or ?from= (an image or a snapshot), as a list
// (application/x-ndjson of rest.Change), a git patch (text/x-diff) or a
// diffstat (rest.DiffStat). A failure after the body started is reported
// in the rest.DiffErrorTrailer trailer.
func (s *Server) diffSandbox(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	req, err := parseDiffRequest(r)
	if err != nil {
		writeError(ctx, w, err)
		return
	}
	ch, err := s.cfg.Manager.OpenChanges(ctx, r.PathValue("id"), req.from)
	if err != nil {
		writeError(ctx, w, err)
		return
	}
	defer ch.Close()
	st, closeStacks, err := fsdiff.OpenStacks(side(ch.Old), side(ch.New))
	if err != nil {
		writeError(ctx, w, err)
		return
	}
	defer closeStacks()
	req.walk.MountPoints = ch.MountPoints

	out := &lazyStream{w: w, rc: http.NewResponseController(w)}
	switch req.format {
	case rest.DiffFormatList:
		out.ctype = "application/x-ndjson"
		dir := path.Join("/", req.walk.Dir)
		enc := json.NewEncoder(out)
		err = fsdiff.Walk(ctx, st, req.walk, func(c fsdiff.Change) error {
			return enc.Encode(restChange(dir, c))
		})
	case rest.DiffFormatPatch:
		out.ctype = "text/x-diff; charset=utf-8"
		p := fsdiff.NewPatch(out, req.patch)
		err = fsdiff.Walk(ctx, st, req.walk, p.Add)
		if n := len(p.Omitted()); n > 0 && err == nil {
			out.start()
			w.Header().Set(rest.DiffOmittedTrailer, strconv.Itoa(n))
		}
		if req.stat && err == nil {
			// The stat of the same walk, in the last line: no second pass
			// over the files (and no trailer, whose size clients bound).
			files, notes := p.Stat()
			var b []byte
			if b, err = json.Marshal(restStat(files, notes)); err == nil {
				_, err = fmt.Fprintf(out, "%s%s\n", rest.DiffStatLinePrefix, b)
			}
		}
	case rest.DiffFormatStat:
		p := fsdiff.NewPatch(nil, req.patch)
		if err = fsdiff.Walk(ctx, st, req.walk, p.Add); err == nil {
			writeJSON(w, http.StatusOK, restStat(p.Files, p.Notes))
			return
		}
	}
	if err != nil {
		if !out.started {
			writeError(ctx, w, err)
			return
		}
		log.G(ctx).Warn("diff stream failed", "sandbox", ch.ID, "error", err)
		w.Header().Set(rest.DiffErrorTrailer, err.Error())
		return
	}
	out.start() // an empty change: 200 with no body
}

func side(v *sandbox.LayerView) fsdiff.Side {
	return fsdiff.Side{Upper: v.Upper, Keys: v.Keys, Dirs: v.Dirs}
}

// lazyStream starts the response (status, content type, trailers) with
// its first write, so that an error before it is a plain HTTP error, and
// flushes each write.
type lazyStream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	ctype   string
	started bool
}

func (l *lazyStream) start() {
	if l.started {
		return
	}
	l.started = true
	h := l.w.Header()
	if l.ctype != "" {
		h.Set("Content-Type", l.ctype)
	}
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Trailer", rest.DiffErrorTrailer+", "+rest.DiffOmittedTrailer)
	l.w.WriteHeader(http.StatusOK)
}

func (l *lazyStream) Write(b []byte) (int, error) {
	l.start()
	n, err := l.w.Write(b)
	if err == nil {
		err = l.rc.Flush()
	}
	return n, err
}

func restChange(dir string, c fsdiff.Change) rest.Change {
	e := c.New
	if e == nil {
		e = c.Old
	}
	return rest.Change{Kind: c.Kind.String(), Path: path.Join(dir, c.Path), Type: typeOf(e.Mode), Size: e.Size, Mode: uint32(e.Mode.Perm() | e.Mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))}
}

func typeOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "char-device"
	case m&fs.ModeDevice != 0:
		return "block-device"
	}
	return "file"
}

func restStat(files []fsdiff.FileStat, notes []fsdiff.Note) rest.DiffStat {
	out := rest.DiffStat{Files: []rest.FileStat{}}
	for _, f := range files {
		out.Files = append(out.Files, rest.FileStat{Path: f.Path, Insertions: f.Added, Deletions: f.Deleted, Binary: f.Binary, OldSize: f.OldSize, NewSize: f.NewSize, ModeOnly: f.ModeOnly})
		out.Insertions += f.Added
		out.Deletions += f.Deleted
	}
	out.FilesChanged = len(files)
	for _, n := range notes {
		out.Notes = append(out.Notes, rest.DiffNote{Path: n.Path, Reason: n.Reason, Omitted: n.Omitted})
	}
	return out
}
