package agent

// outKind is the stream a chunk of output came from.
type outKind uint8

const (
	outStdout outKind = iota
	outStderr
	outPTY
)

// outChunk is one piece of captured output. Its data is never written
// after it was appended to an outputLog, so a snapshot may share it.
type outChunk struct {
	kind outKind
	data []byte
}

// chunkOverhead is what the log counts for each chunk besides its bytes,
// so that many tiny chunks (alternating stdout and stderr) cannot hold more
// memory than the bound.
const chunkOverhead = 48

// coalesceMax bounds a chunk that later output of the same stream is
// appended to.
const coalesceMax = 32 << 10

// outputLog is the bounded ring buffer of one command's output, in the
// order it was read: when it holds more than max bytes (counting the
// capacity of its chunks and chunkOverhead each), the oldest output goes.
// It is not safe for concurrent use: proc.mu guards it.
type outputLog struct {
	max     int
	chunks  []outChunk
	size    int    // bytes counted against max
	bytes   uint64 // output bytes held
	dropped uint64 // output bytes dropped from the start
}

func newOutputLog(max int) *outputLog { return &outputLog{max: max} }

// add appends b (copied) from stream kind.
func (l *outputLog) add(kind outKind, b []byte) {
	if len(b) == 0 {
		return
	}
	if limit := l.max - chunkOverhead; len(b) > limit {
		if limit <= 0 {
			l.dropped += uint64(len(b))
			return
		}
		l.dropped += uint64(len(b) - limit)
		b = b[len(b)-limit:]
	}
	if n := len(l.chunks); n > 0 && l.chunks[n-1].kind == kind && len(l.chunks[n-1].data)+len(b) <= min(coalesceMax, l.max/4) {
		last := &l.chunks[n-1]
		old := cap(last.data)
		// append writes past the bytes a snapshot shares, never into
		// them.
		last.data = append(last.data, b...)
		l.size += cap(last.data) - old
	} else {
		d := make([]byte, len(b))
		copy(d, b)
		l.chunks = append(l.chunks, outChunk{kind: kind, data: d})
		l.size += cap(l.chunks[len(l.chunks)-1].data) + chunkOverhead
	}
	l.bytes += uint64(len(b))
	for l.size > l.max && len(l.chunks) > 1 {
		c := l.chunks[0]
		l.size -= cap(c.data) + chunkOverhead
		l.bytes -= uint64(len(c.data))
		l.dropped += uint64(len(c.data))
		l.chunks[0] = outChunk{}
		l.chunks = l.chunks[1:]
	}
}

// snapshot returns the captured output, or only its last tail lines when
// tail > 0 (a final line without a newline counts as one, as for tail(1)).
func (l *outputLog) snapshot(tail int) []outChunk {
	if l == nil || len(l.chunks) == 0 {
		return nil
	}
	if tail <= 0 {
		return append([]outChunk(nil), l.chunks...)
	}
	// Walk back to the tail-th newline before the last byte.
	seen := 0
	for i := len(l.chunks) - 1; i >= 0; i-- {
		d := l.chunks[i].data
		j := len(d) - 1
		if i == len(l.chunks)-1 {
			j-- // a trailing newline ends the last line; it does not start one
		}
		for ; j >= 0; j-- {
			if d[j] != '\n' {
				continue
			}
			if seen++; seen == tail {
				out := []outChunk{}
				if j+1 < len(d) {
					out = append(out, outChunk{kind: l.chunks[i].kind, data: d[j+1:]})
				}
				return append(out, l.chunks[i+1:]...)
			}
		}
	}
	return append([]outChunk(nil), l.chunks...)
}

// held returns the output bytes held and dropped.
func (l *outputLog) held() (held, dropped uint64) {
	if l == nil {
		return 0, 0
	}
	return l.bytes, l.dropped
}

// memory returns the bytes the log counts against its bound.
func (l *outputLog) memory() int {
	if l == nil {
		return 0
	}
	return l.size
}

// from returns the captured output from byte offset off of the command's
// output on, and the offset of its first byte: larger than off when the
// log no longer holds those bytes (dropped from the start).
func (l *outputLog) from(off uint64) ([]outChunk, uint64) {
	if l == nil {
		return nil, off
	}
	start := l.dropped
	if off <= start {
		return append([]outChunk(nil), l.chunks...), start
	}
	pos := start
	for i, c := range l.chunks {
		end := pos + uint64(len(c.data))
		if off < end {
			out := []outChunk{{kind: c.kind, data: c.data[off-pos:]}}
			return append(out, l.chunks[i+1:]...), off
		}
		pos = end
	}
	return nil, pos
}
