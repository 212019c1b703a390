package agent

// outKind is the stream a chunk of output came from.
type outKind uint8

const (
	outStdout outKind = iota
	outStderr
	outPTY
	// outGap stands for output that was not kept: gap bytes of it.
	outGap
)

// outChunk is one piece of captured output. Its data is never written
// after it was appended to an outputLog, so a snapshot may share it.
type outChunk struct {
	kind outKind
	data []byte
	gap  uint64 // with outGap
}

// chunkOverhead is what the log counts for each chunk besides its bytes,
// so that many tiny chunks (alternating stdout and stderr) cannot hold more
// memory than the bound.
const chunkOverhead = 48

// coalesceMax bounds a chunk that later output of the same stream is
// appended to.
const coalesceMax = 32 << 10

// headShare is the part of an output buffer that keeps the start of a
// command's output (1/headShare of it); the rest is the ring of its newest
// output.
const headShare = 8

// outputLog is the output of one command kept for replay: its first bytes
// (the head, so that a replay shows how the command began) and a bounded
// ring buffer of its newest output, in the order it was read. Together
// they hold at most max bytes (counting the capacity of their chunks and
// chunkOverhead each): the head takes max/headShare until it is full,
// then the ring the rest, dropping its oldest output. The bytes between
// the head and the ring, once dropped, are a gap in the replay.
// It is not safe for concurrent use: proc.mu guards it.
type outputLog struct {
	head *ringLog // never drops: closed once full
	// headDone is set once output went past the head.
	headDone bool
	ring     *ringLog
}

func newOutputLog(max int) *outputLog {
	hm := max / headShare
	if hm < 2*chunkOverhead {
		hm = 0 // too small to hold anything
	}
	return &outputLog{head: &ringLog{max: hm}, headDone: hm == 0, ring: &ringLog{max: max - hm}}
}

// add appends b (copied) from stream kind.
func (l *outputLog) add(kind outKind, b []byte) {
	for !l.headDone && len(b) > 0 {
		n := l.head.room(kind, len(b))
		if n == 0 {
			l.headDone = true
			break
		}
		l.head.add(kind, b[:n])
		b = b[n:]
	}
	// Large output goes in pieces, so that the ring drops its oldest a
	// piece at a time, not all but the newest bytes at once.
	if over := len(b) - l.ring.max; over > 0 {
		l.ring.dropped += uint64(over)
		b = b[over:]
	}
	piece := max(l.ring.coalesceLimit(), 1)
	for len(b) > 0 {
		n := min(len(b), piece)
		l.ring.add(kind, b[:n])
		b = b[n:]
	}
}

// ringLog is a bounded ring buffer of output: when it holds more than max
// bytes (counting the capacity of its chunks and chunkOverhead each), the
// oldest output goes.
type ringLog struct {
	max     int
	chunks  []outChunk
	size    int    // bytes counted against max
	bytes   uint64 // output bytes held
	dropped uint64 // output bytes dropped from the start
}

// room returns how many of the next n bytes from stream kind add can keep
// without dropping any (0 when none).
func (l *ringLog) room(kind outKind, n int) int {
	if c := len(l.chunks); c > 0 && l.chunks[c-1].kind == kind {
		last := l.chunks[c-1].data
		if limit := l.coalesceLimit(); len(last) < limit {
			fit := min(n, limit-len(last))
			if l.size+grownCap(last, fit)-cap(last) <= l.max {
				return fit
			}
			return 0
		}
	}
	return max(min(n, l.max-l.size-chunkOverhead), 0)
}

// coalesceLimit bounds a chunk that later output is appended to.
func (l *ringLog) coalesceLimit() int { return min(coalesceMax, l.max/4) }

// grownCap is the capacity of d once n more bytes were appended by add.
func grownCap(d []byte, n int) int {
	if len(d)+n <= cap(d) {
		return cap(d)
	}
	return max(2*cap(d), len(d)+n)
}

// add appends b (copied) from stream kind.
func (l *ringLog) add(kind outKind, b []byte) {
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
	if n := len(l.chunks); n > 0 && l.chunks[n-1].kind == kind && len(l.chunks[n-1].data)+len(b) <= l.coalesceLimit() {
		last := &l.chunks[n-1]
		old := cap(last.data)
		if c := grownCap(last.data, len(b)); c > old {
			d := make([]byte, len(last.data), c)
			copy(d, last.data)
			last.data = d
		}
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

// chunks returns the output kept: the head, a gap chunk for the bytes
// dropped between the head and the ring (if any), and the ring.
func (l *outputLog) chunks() []outChunk {
	out := make([]outChunk, 0, len(l.head.chunks)+1+len(l.ring.chunks))
	out = append(out, l.head.chunks...)
	if l.ring.dropped > 0 {
		out = append(out, outChunk{kind: outGap, gap: l.ring.dropped})
	}
	return append(out, l.ring.chunks...)
}

// snapshot returns the captured output, or only its last tail lines when
// tail > 0 (a final line without a newline counts as one, as for tail(1)).
// A gap that the tail reaches is in it.
func (l *outputLog) snapshot(tail int) []outChunk {
	if l == nil {
		return nil
	}
	chunks := l.chunks()
	if len(chunks) == 0 {
		return nil
	}
	if tail <= 0 {
		return chunks
	}
	// Walk back to the tail-th newline before the last byte.
	seen := 0
	for i := len(chunks) - 1; i >= 0; i-- {
		d := chunks[i].data
		j := len(d) - 1
		if i == len(chunks)-1 {
			j-- // a trailing newline ends the last line; it does not start one
		}
		for ; j >= 0; j-- {
			if d[j] != '\n' {
				continue
			}
			if seen++; seen == tail {
				out := []outChunk{}
				if j+1 < len(d) {
					out = append(out, outChunk{kind: chunks[i].kind, data: d[j+1:]})
				}
				return append(out, chunks[i+1:]...)
			}
		}
	}
	return chunks
}

// held returns the output bytes held and dropped.
func (l *outputLog) held() (held, dropped uint64) {
	if l == nil {
		return 0, 0
	}
	return l.head.bytes + l.ring.bytes, l.ring.dropped
}

// memory returns the bytes the log counts against its bound.
func (l *outputLog) memory() int {
	if l == nil {
		return 0
	}
	return l.head.size + l.ring.size
}

// from returns the captured output from byte offset off of the command's
// output on, and the offset of its first byte: larger than off when the
// log no longer holds those bytes. Output from the head on has a gap chunk
// where the bytes between the head and the ring were dropped.
func (l *outputLog) from(off uint64) ([]outChunk, uint64) {
	if l == nil {
		return nil, off
	}
	if h := l.head.bytes; off < h {
		out, first := l.head.from(off, 0)
		if l.ring.dropped > 0 {
			out = append(out, outChunk{kind: outGap, gap: l.ring.dropped})
		}
		return append(out, l.ring.chunks...), first
	}
	return l.ring.from(off, l.head.bytes)
}

// from is outputLog.from for a ring whose first output byte was at offset
// base of the command's output.
func (l *ringLog) from(off, base uint64) ([]outChunk, uint64) {
	start := base + l.dropped
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
