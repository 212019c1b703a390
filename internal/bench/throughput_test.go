package bench

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPerSecond(t *testing.T) {
	tests := []struct {
		ops     int
		elapsed time.Duration
		want    float64
	}{
		{100, time.Second, 100},
		{100, 4 * time.Second, 25},
		{1, 10 * time.Millisecond, 100},
		{5, 0, 0},
		{0, time.Second, 0},
	}
	for _, tc := range tests {
		if got := perSecond(tc.ops, tc.elapsed); got != tc.want {
			t.Errorf("perSecond(%d, %s) = %v; want %v", tc.ops, tc.elapsed, got, tc.want)
		}
	}
	tp := throughputOf("x", 4, []time.Duration{3, 1, 2, 4}, 2*time.Second, nil)
	if tp.Ops != 4 || tp.PerSecond != 2 || tp.Median != 3 || tp.P90 != 4 || tp.Err != "" {
		t.Errorf("throughputOf = %+v; want 4 ops, 2/s, median 3, p90 4", tp)
	}
}

func TestParallel(t *testing.T) {
	ctx := context.Background()
	for _, clients := range []int{1, 3, 50} {
		var (
			mu            sync.Mutex
			seen          = map[int]int{}
			running, peak atomic.Int64
		)
		s, elapsed, err := parallel(ctx, clients, 20, func(_ context.Context, i int) error {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			running.Add(-1)
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 20 || len(seen) != 20 || elapsed <= 0 {
			t.Errorf("parallel(%d clients, 20) = %d samples, %d distinct indices, elapsed %s; want 20, 20, > 0", clients, len(s), len(seen), elapsed)
		}
		for i, n := range seen {
			if n != 1 || i < 0 || i >= 20 {
				t.Errorf("parallel(%d clients) ran index %d %d times", clients, i, n)
			}
		}
		if p := peak.Load(); p > int64(clients) {
			t.Errorf("parallel(%d clients) ran %d at once", clients, p)
		}
	}
}

func TestParallelStopsOnError(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	s, _, err := parallel(context.Background(), 1, 100, func(_ context.Context, i int) error {
		calls.Add(1)
		if i == 4 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Errorf("parallel error = %v; want boom", err)
	}
	if len(s) != 4 || calls.Load() != 5 {
		t.Errorf("parallel after an error: %d samples, %d calls; want 4 and 5", len(s), calls.Load())
	}
	if s, el, err := parallel(context.Background(), 4, 0, nil); s != nil || el != 0 || err != nil {
		t.Errorf("parallel of 0 ops = %v, %v, %v; want nothing", s, el, err)
	}
}

func TestSequential(t *testing.T) {
	var idx []int
	s, err := sequential(context.Background(), 3, 2, func(_ context.Context, i int) error {
		idx = append(idx, i)
		return nil
	})
	if err != nil || len(s) != 3 || len(idx) != 5 || idx[4] != 4 {
		t.Errorf("sequential(3, warm 2) = %d samples, calls %v, %v; want 3 samples of 5 calls", len(s), idx, err)
	}
}

func TestParseCPUBusy(t *testing.T) {
	const stat = "cpu  100 5 50 9000 40 3 2 1 7 0\ncpu0 50 2 25 4500 20 1 1 0 3 0\n"
	got, err := parseCPUBusy(stat)
	if err != nil {
		t.Fatal(err)
	}
	// user 100 + nice 5 + system 50 + irq 3 + softirq 2 + steal 1 = 161 ticks of 10 ms.
	if want := 1610 * time.Millisecond; got != want {
		t.Errorf("parseCPUBusy = %s; want %s (idle, iowait and guest left out)", got, want)
	}
	for _, bad := range []string{"", "intr 1 2 3\n", "cpu 1 2 3\n", "cpu 1 x 3 4 5 6 7 8\n"} {
		if _, err := parseCPUBusy(bad); err == nil {
			t.Errorf("parseCPUBusy(%q) succeeded", bad)
		}
	}
}
