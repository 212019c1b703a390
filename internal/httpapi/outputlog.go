package httpapi

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"

	"github.com/containerd/errdefs"
)

// OutputLog reads the daemon's log files of the boxes' commands' output
// ([output_log]).
type OutputLog interface {
	// Read calls fn with the output of command pid of box id kept in its
	// files, oldest first, up to output offset to (0: all of it), with
	// the offset of each chunk; it returns the offset of the first byte
	// kept. errdefs.ErrNotFound when there is no file.
	Read(id string, pid uint32, to uint64, fn func(off uint64, stderr bool, data []byte) error) (start uint64, err error)
}

// Response headers of GET /v1/sandboxes/{id}/processes/{pid}/log.
const (
	// OutputSourceHeader says where the output comes from:
	// "log-file".
	OutputSourceHeader = "Corral-Output-Source"
	// OutputStartHeader is the output offset of the first byte served.
	OutputStartHeader = "Corral-Output-Start"
	// multiplexedStream is docker's content type of its framed attach
	// stream, which the answer uses.
	multiplexedStream = "application/vnd.docker.multiplexed-stream"
)

// processLog serves GET /v1/sandboxes/{id}/processes/{pid}/log: the
// output of a command kept in the daemon's log file, as docker's
// multiplexed stream (an 8-byte header {1 stdout or 2 stderr, 0, 0, 0,
// size, 4 bytes big endian} before each chunk).
func (s *Server) processLog(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	pid, err := strconv.ParseUint(r.PathValue("pid"), 10, 32)
	if err != nil || pid == 0 {
		writeError(ctx, w, fmt.Errorf("pid %q must be a process id (a positive number): %w", r.PathValue("pid"), errdefs.ErrInvalidArgument))
		return
	}
	var to uint64
	if v := r.URL.Query().Get("to"); v != "" {
		if to, err = strconv.ParseUint(v, 10, 64); err != nil {
			writeError(ctx, w, fmt.Errorf("to %q must be an output offset (a number of bytes): %w", v, errdefs.ErrInvalidArgument))
			return
		}
	}
	rec, err := s.cfg.Manager.Get(ctx, r.PathValue("id"))
	if err != nil {
		writeError(ctx, w, err)
		return
	}
	if s.cfg.OutputLog == nil {
		writeError(ctx, w, fmt.Errorf("output log files are off: set enabled = true in the daemon's [output_log]: %w", errdefs.ErrNotImplemented))
		return
	}
	started := false
	begin := func(start uint64) {
		started = true
		w.Header().Set("Content-Type", multiplexedStream)
		w.Header().Set(OutputSourceHeader, "log-file")
		w.Header().Set(OutputStartHeader, strconv.FormatUint(start, 10))
		w.WriteHeader(http.StatusOK)
	}
	var hdr [8]byte
	start, err := s.cfg.OutputLog.Read(rec.ID, uint32(pid), to, func(off uint64, stderr bool, data []byte) error {
		if !started {
			begin(off)
		}
		hdr[0] = 1
		if stderr {
			hdr[0] = 2
		}
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(data)))
		if _, err := w.Write(hdr[:]); err != nil {
			return err
		}
		_, err := w.Write(data)
		return err
	})
	switch {
	case err != nil && !started:
		writeError(ctx, w, err)
	case !started:
		begin(start)
	}
}
