package client

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"strconv"

	"connectrpc.com/connect"

	pb "github.com/corral-sandbox/corral/api/gen/process"
)

// Headers of the output of a command (see Logs).
const (
	// outputOffsetHeader is the agent's answer to a replay: the offset
	// of the first byte it still holds.
	outputOffsetHeader = "Corral-Output-Offset"
	// multiplexedStream is the content type of
	// GET /v1/sandboxes/{id}/processes/{pid}/log.
	multiplexedStream = "application/vnd.docker.multiplexed-stream"
)

// logFileStream is the replay of Logs: when the agent no longer holds the
// start of the output, the daemon's log file of it ([output_log]) gives
// what came before, right after the start event.
type logFileStream struct {
	ctx     context.Context
	s       *Sandbox
	stream  *connect.ServerStreamForClient[pb.ConnectResponse]
	checked bool
	pending []*pb.ConnectResponse
	msg     *pb.ConnectResponse
	pid     uint32
	// off is the output offset of the next byte of the agent's replay.
	off uint64
	gap func(dropped uint64)
}

func (l *logFileStream) Receive() bool {
	if len(l.pending) > 0 {
		l.msg, l.pending = l.pending[0], l.pending[1:]
		return true
	}
	for {
		if !l.stream.Receive() {
			return false
		}
		l.msg = l.stream.Msg()
		ev := l.msg.GetEvent()
		if start := ev.GetStart(); start != nil && !l.checked {
			l.checked = true
			l.pid = start.GetPid()
			l.pending = l.fromFile(start.GetPid())
			l.off, _ = strconv.ParseUint(l.stream.ResponseHeader().Get(outputOffsetHeader), 10, 64)
		}
		if g := ev.GetGap(); g != nil {
			if l.fillGap(g.GetDroppedBytes()) {
				return l.Receive()
			}
			continue
		}
		if d := ev.GetData(); d != nil {
			l.off += uint64(len(d.GetStdout()) + len(d.GetStderr()) + len(d.GetPty()))
		}
		return true
	}
}

// fillGap queues the dropped bytes of a gap in the agent's replay from the
// daemon's log file when it has all of them (it starts at the command's
// first byte and has no gap of its own), and reports whether it did; else
// it calls the Gap option.
func (l *logFileStream) fillGap(n uint64) bool {
	if n == 0 {
		return false
	}
	from := l.off
	l.off += n
	var evs []*pb.ConnectResponse
	if l.pid != 0 {
		evs, _ = l.s.readLogFile(l.ctx, l.pid, from+n)
	}
	var total uint64
	for _, ev := range evs {
		d := ev.GetEvent().GetData()
		total += uint64(len(d.GetStdout()) + len(d.GetStderr()))
	}
	if total != from+n {
		if l.gap != nil {
			l.gap(n)
		}
		return false
	}
	var pos uint64
	for _, ev := range evs {
		d := ev.GetEvent().GetData()
		b, stderr := d.GetStdout(), false
		if d.GetStderr() != nil {
			b, stderr = d.GetStderr(), true
		}
		end := pos + uint64(len(b))
		if end > from {
			b = b[max(from, pos)-pos:]
			o := &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}
			if stderr {
				o.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: b}
			}
			l.pending = append(l.pending, &pb.ConnectResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: o}}})
		}
		pos = end
	}
	return len(l.pending) > 0
}

func (l *logFileStream) Msg() *pb.ConnectResponse { return l.msg }

func (l *logFileStream) Err() error { return l.stream.Err() }

// logFile writes the output of the command p selects from the daemon's
// log file, and reports whether there was one: for a command the agent no
// longer knows, by pid (a tag is the agent's).
func (s *Sandbox) logFile(ctx context.Context, p ProcessSelector, opts LogsOptions) bool {
	if p.PID == 0 || opts.Tail > 0 {
		return false
	}
	evs, ok := s.readLogFile(ctx, p.PID, 0)
	if !ok {
		return false
	}
	stdout, stderr := opts.Stdout, opts.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for _, ev := range evs {
		d := ev.GetEvent().GetData()
		if b := d.GetStderr(); b != nil {
			_, _ = stderr.Write(b)
		} else {
			_, _ = stdout.Write(d.GetStdout())
		}
	}
	return true
}

// fromFile returns the output of pid before the agent's replay, from the
// daemon's log file: none when the agent has it all, or there is no file
// (the log files are off, or the command printed nothing yet then).
func (l *logFileStream) fromFile(pid uint32) []*pb.ConnectResponse {
	to, err := strconv.ParseUint(l.stream.ResponseHeader().Get(outputOffsetHeader), 10, 64)
	if err != nil || to == 0 {
		return nil
	}
	evs, _ := l.s.readLogFile(l.ctx, pid, to)
	return evs
}

// readLogFile reads the daemon's log file of pid up to output offset to
// (0: all of it) as data events, and reports whether there was one.
func (s *Sandbox) readLogFile(ctx context.Context, pid uint32, to uint64) ([]*pb.ConnectResponse, bool) {
	path := sandboxPath(s.id) + "/processes/" + strconv.FormatUint(uint64(pid), 10) + "/log?to=" + strconv.FormatUint(to, 10)
	resp, err := s.c.send(ctx, "GET", path, nil, multiplexedStream)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var out []*pb.ConnectResponse
	r := bufio.NewReader(resp.Body)
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return out, true
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[4:]))
		if _, err := io.ReadFull(r, data); err != nil {
			return out, true
		}
		d := &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: data}}
		if hdr[0] == 2 {
			d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: data}
		}
		out = append(out, &pb.ConnectResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}})
	}
}
