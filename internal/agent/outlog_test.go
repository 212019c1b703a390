package agent

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func joined(cs []outChunk) string {
	var b strings.Builder
	for _, c := range cs {
		b.Write(c.data)
	}
	return b.String()
}

func TestOutputLogBound(t *testing.T) {
	tests := []struct {
		name  string
		max   int
		chunk string
		kinds []outKind // cycled through, one per chunk
	}{
		{name: "one stream", max: 4096, chunk: strings.Repeat("x", 1000), kinds: []outKind{outStdout}},
		{name: "tiny alternating chunks", max: 4096, chunk: "y", kinds: []outKind{outStdout, outStderr}},
		{name: "chunk over the bound", max: 1024, chunk: strings.Repeat("z", 5000), kinds: []outKind{outStdout}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newOutputLog(tc.max)
			var total uint64
			for i := range 10000 {
				l.add(tc.kinds[i%len(tc.kinds)], []byte(tc.chunk))
				total += uint64(len(tc.chunk))
				if l.memory() > tc.max {
					t.Fatalf("after %d chunks: memory() = %d; want at most %d", i+1, l.memory(), tc.max)
				}
			}
			held, dropped := l.held()
			if held+dropped != total || held == 0 {
				t.Errorf("held() = %d, %d; want a sum of %d and some held", held, dropped, total)
			}
			if got := joined(l.snapshot(0)); uint64(len(got)) != held || strings.Trim(got, "xyz") != "" {
				t.Errorf("snapshot has %d bytes; want the %d held", len(got), held)
			}
		})
	}
}

func TestOutputLogKeepsTheEnd(t *testing.T) {
	l := newOutputLog(64 << 10)
	var all bytes.Buffer
	for i := range 20000 {
		line := []byte(strings.Repeat("a", i%7) + "\n")
		all.Write(line)
		l.add(outStdout, line)
	}
	got := joined(l.snapshot(0))
	if !strings.HasSuffix(all.String(), got) || len(got) < 32<<10 {
		t.Errorf("snapshot is %d bytes, a suffix of the output: %v; want the last bytes", len(got), strings.HasSuffix(all.String(), got))
	}
}

func TestOutputLogTail(t *testing.T) {
	l := newOutputLog(1 << 20)
	l.add(outStdout, []byte("one\ntwo\n"))
	l.add(outStderr, []byte("err1\n"))
	l.add(outStdout, []byte("three\nfour"))
	tests := []struct {
		tail int
		want string
	}{
		{0, "one\ntwo\nerr1\nthree\nfour"},
		{1, "four"},
		{2, "three\nfour"},
		{3, "err1\nthree\nfour"},
		{5, "one\ntwo\nerr1\nthree\nfour"},
		{50, "one\ntwo\nerr1\nthree\nfour"},
	}
	for _, tc := range tests {
		if got := joined(l.snapshot(tc.tail)); got != tc.want {
			t.Errorf("snapshot(%d) = %q; want %q", tc.tail, got, tc.want)
		}
	}
	l.add(outStdout, []byte("\n"))
	if got := joined(l.snapshot(1)); got != "four\n" {
		t.Errorf("snapshot(1) with a final newline = %q; want %q", got, "four\n")
	}
	// The stream of each chunk is kept.
	cs := l.snapshot(3)
	if len(cs) != 2 || cs[0].kind != outStderr || cs[1].kind != outStdout {
		t.Errorf("snapshot(3) kinds = %+v; want stderr then stdout", cs)
	}
}

func TestOutputLogSnapshotIsStable(t *testing.T) {
	l := newOutputLog(1 << 20)
	l.add(outStdout, []byte("abc"))
	snap := l.snapshot(0)
	for range 100 {
		l.add(outStdout, []byte("def"))
	}
	if got := joined(snap); got != "abc" {
		t.Errorf("snapshot after more output = %q; want %q", got, "abc")
	}
	var nilLog *outputLog
	if nilLog.snapshot(0) != nil || nilLog.memory() != 0 {
		t.Error("a nil log is not empty")
	}
}

func TestOutputLogFrom(t *testing.T) {
	l := newOutputLog(8 << 10)
	var all bytes.Buffer
	for i := range 3000 {
		line := []byte(strings.Repeat("b", i%5) + "\n")
		all.Write(line)
		l.add(outKind(i%2), line)
	}
	held, dropped := l.held()
	total := held + dropped
	h := l.head.bytes // the head holds [0, h), the ring [h+dropped, total)
	ringStart := h + dropped
	if h == 0 || dropped == 0 {
		t.Fatalf("head %d bytes, %d dropped; want both", h, dropped)
	}
	tests := []struct {
		name      string
		off       uint64
		wantFirst uint64
	}{
		{name: "from the start", off: 0, wantFirst: 0},
		{name: "in the head", off: h / 2, wantFirst: h / 2},
		{name: "dropped bytes", off: h + dropped/2, wantFirst: ringStart},
		{name: "first held", off: ringStart, wantFirst: ringStart},
		{name: "mid-chunk", off: ringStart + (total-ringStart)/2 + 1, wantFirst: ringStart + (total-ringStart)/2 + 1},
		{name: "the end", off: total, wantFirst: total},
		{name: "past the end", off: total + 10, wantFirst: total},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs, first := l.from(tc.off)
			if first != tc.wantFirst {
				t.Fatalf("from(%d) first = %d; want %d", tc.off, first, tc.wantFirst)
			}
			want := all.String()[min(first, total):]
			var gaps uint64
			if first < h {
				want = all.String()[first:h] + all.String()[ringStart:]
				gaps = dropped
			}
			var gotGaps uint64
			for _, c := range cs {
				gotGaps += c.gap
			}
			if got := joined(cs); got != want || gotGaps != gaps {
				t.Errorf("from(%d) = %d bytes, a gap of %d; want the %d from %d, a gap of %d", tc.off, len(got), gotGaps, len(want), first, gaps)
			}
		})
	}
}

// TestOutputLogKeepsTheStart: output over the bound still replays its
// first bytes, then a gap of the bytes dropped, then its newest bytes.
func TestOutputLogKeepsTheStart(t *testing.T) {
	const max = 64 << 10
	l := newOutputLog(max)
	var all bytes.Buffer
	for i := range 20000 {
		line := fmt.Appendf(nil, "line %d\n", i)
		all.Write(line)
		l.add(outStdout, line)
		if l.memory() > max {
			t.Fatalf("after %d lines: memory() = %d; want at most %d", i+1, l.memory(), max)
		}
	}
	cs := l.snapshot(0)
	var gapAt, gap int
	var got strings.Builder
	for i, c := range cs {
		if c.kind == outGap {
			gapAt, gap = i, int(c.gap)
		}
		got.Write(c.data)
	}
	head := joined(cs[:gapAt])
	if gap == 0 || !strings.HasPrefix(head, "line 0\nline 1\n") || len(head) < max/headShare/2 {
		t.Fatalf("snapshot starts with %d bytes %.20q before a gap of %d; want the first lines, then a gap", len(head), head, gap)
	}
	if want := all.String()[:len(head)] + all.String()[len(head)+gap:]; got.String() != want || !strings.HasSuffix(want, "line 19999\n") {
		t.Errorf("snapshot = %d bytes around a gap of %d; want the head and the end of the output", got.Len(), gap)
	}
	if held, dropped := l.held(); held != uint64(got.Len()) || dropped != uint64(gap) {
		t.Errorf("held() = %d, %d; want %d, %d", held, dropped, got.Len(), gap)
	}
	// A tail stays in the ring: no gap.
	if tail := l.snapshot(2); joined(tail) != "line 19998\nline 19999\n" || len(tail) != 1 {
		t.Errorf("snapshot(2) = %+v; want the last two lines", tail)
	}
}
