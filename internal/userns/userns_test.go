package userns

import (
	"errors"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Pool
		ok   bool
	}{
		{DefaultPool, Pool{Start: 1 << 31, Count: 1 << 30}, true},
		{"65536:65536", Pool{Start: 65536, Count: 65536}, true},
		{"0:65536", Pool{}, false},          // would map box root to host root
		{"100000:65536", Pool{}, false},     // not aligned
		{"65536:0", Pool{}, false},          // empty
		{"65536:1000", Pool{}, false},       // not whole boxes
		{"4294901760:65536", Pool{}, false}, // reaches (uid_t)-1
		{"4294836224:65536", Pool{Start: 4294836224, Count: 65536}, true},
		{"65536", Pool{}, false},
		{"a:b", Pool{}, false},
		{"-65536:65536", Pool{}, false},
	} {
		got, err := ParsePool("userns_pool", tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePool(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParsePool(%q) error %v is not invalid argument", tc.in, err)
		}
	}
}

func TestAllocator(t *testing.T) {
	a := NewAllocator(Pool{Start: 1 << 20, Count: 3 * Size})
	r1, err := a.Allocate("a")
	if err != nil || r1 != (Range{HostID: 1 << 20, Size: Size}) {
		t.Fatalf("Allocate(a) = %v, %v", r1, err)
	}
	if again, _ := a.Allocate("a"); again != r1 {
		t.Errorf("Allocate(a) again = %v; want %v", again, r1)
	}
	r2, _ := a.Allocate("b")
	r3, _ := a.Allocate("c")
	if r2 == r1 || r3 == r1 || r2 == r3 {
		t.Errorf("ranges %v %v %v are not distinct", r1, r2, r3)
	}
	if _, err := a.Allocate("d"); !errors.Is(err, ErrExhausted) || !errdefs.IsResourceExhausted(err) {
		t.Errorf("Allocate(d) on a full pool = %v; want ErrExhausted", err)
	}
	a.Release("b")
	r4, err := a.Allocate("d")
	if err != nil || r4 != r2 {
		t.Errorf("Allocate(d) after Release(b) = %v, %v; want %v", r4, err, r2)
	}
	a.Release("nobody") // no error
}

// TestAllocatorRoundRobin: a range just freed is not the next handed out
// while others are free.
func TestAllocatorRoundRobin(t *testing.T) {
	a := NewAllocator(Pool{Start: 1 << 20, Count: 3 * Size})
	r1, _ := a.Allocate("a")
	a.Release("a")
	if r2, _ := a.Allocate("b"); r2 == r1 {
		t.Errorf("Allocate(b) = %v, the range just released", r2)
	}
}

// TestAllocatorReserve is what a restarted daemon does: the ranges of the
// records are reserved, and new ones never meet them.
func TestAllocatorReserve(t *testing.T) {
	p := Pool{Start: 1 << 20, Count: 2 * Size}
	a := NewAllocator(p)
	held := Range{HostID: 1<<20 + Size, Size: Size}
	if err := a.Reserve("old", held); err != nil {
		t.Fatalf("Reserve(old, %v) = %v", held, err)
	}
	if err := a.Reserve("old", held); err != nil {
		t.Errorf("Reserve(old) again = %v", err)
	}
	if err := a.Reserve("other", held); !errdefs.IsAlreadyExists(err) {
		t.Errorf("Reserve(other, %v) = %v; want already exists", held, err)
	}
	for _, bad := range []Range{{HostID: 1 << 19, Size: Size}, {HostID: 1<<20 + 1, Size: Size}, {HostID: 1 << 20, Size: 10}, {HostID: 1<<20 + 2*Size, Size: Size}} {
		if err := a.Reserve("x", bad); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Reserve(x, %v) = %v; want invalid argument", bad, err)
		}
	}
	r, err := a.Allocate("new")
	if err != nil || r == held {
		t.Errorf("Allocate(new) = %v, %v; want a range other than %v", r, err, held)
	}
	if got := a.InUse(); len(got) != 2 {
		t.Errorf("InUse() = %v; want [new old]", got)
	}
}

func TestAllocatorFree(t *testing.T) {
	a := NewAllocator(Pool{Start: 1 << 20, Count: 3 * Size})
	if got := a.Free(); got != 3 {
		t.Fatalf("Free() of a new 3-range pool = %d; want 3", got)
	}
	if _, err := a.Allocate("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate("a"); err != nil { // the same range again
		t.Fatal(err)
	}
	if got := a.Free(); got != 2 {
		t.Errorf("Free() after one owner allocated = %d; want 2", got)
	}
	a.Release("a")
	if got := a.Free(); got != 3 {
		t.Errorf("Free() after Release = %d; want 3", got)
	}
}
