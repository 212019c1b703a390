// Package userns hands out the host uid/gid ranges that the user namespaces
// of boxes map to, and (on Linux) opens user namespaces with such a
// mapping for idmapped mounts. See docs/isolation.md, "User namespace".
package userns

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
)

// Size is the number of ids each box gets: uid and gid 0 to 65535 inside
// the box, which covers every id a distribution image uses (nobody is
// 65534), as podman's automatic user namespaces do.
const Size = 65536

// DefaultPool is the default pool of host ids, "2147483648:1073741824":
// from 2^31, above useradd's default subordinate id range (which ends at
// 600100000) and systemd-nspawn's (which ends at 1879048191), so that no
// host user or other container manager owns them; 16384 boxes of Size ids.
const DefaultPool = "2147483648:1073741824"

// maxID is the highest id a mapping may reach: 2^32-1 is (uid_t)-1,
// which the kernel never maps.
const maxID = math.MaxUint32 - 1

// Range is one box's host ids: box uid (and gid) n is host id HostID+n, for
// n below Size.
type Range struct {
	HostID uint32 `json:"host_id"`
	Size   uint32 `json:"size"`
}

// String is "HostID:Size", the form of /etc/subuid.
func (r Range) String() string { return fmt.Sprintf("%d:%d", r.HostID, r.Size) }

// Pool is the host ids that boxes' ranges come from.
type Pool struct {
	Start uint32
	Count uint32
}

func (p Pool) String() string { return fmt.Sprintf("%d:%d", p.Start, p.Count) }

// ParsePool parses "START:COUNT" (field names the setting in errors). START
// must be at least Size (box ids never overlap the host's system and
// regular users) and a multiple of Size, COUNT a non-zero multiple of Size,
// and START+COUNT-1 at most 4294967294.
func ParsePool(field, s string) (Pool, error) {
	a, b, ok := strings.Cut(s, ":")
	start, err1 := strconv.ParseUint(a, 10, 32)
	count, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Pool{}, fmt.Errorf("%s %q: want START:COUNT, two decimal numbers such as %q: %w", field, s, DefaultPool, errdefs.ErrInvalidArgument)
	}
	switch {
	case start < Size || start%Size != 0:
		return Pool{}, fmt.Errorf("%s %q: start must be a multiple of %d and at least %d, so that box ids never map to host users: %w", field, s, Size, Size, errdefs.ErrInvalidArgument)
	case count == 0 || count%Size != 0:
		return Pool{}, fmt.Errorf("%s %q: count must be a non-zero multiple of %d (the ids of one box): %w", field, s, Size, errdefs.ErrInvalidArgument)
	case start+count-1 > maxID:
		return Pool{}, fmt.Errorf("%s %q: the last id %d is above %d: %w", field, s, start+count-1, uint64(maxID), errdefs.ErrInvalidArgument)
	}
	return Pool{Start: uint32(start), Count: uint32(count)}, nil
}

// ErrExhausted is returned by Allocate when every range of the pool is in
// use.
var ErrExhausted = fmt.Errorf("user namespace: every uid range is in use: %w", errdefs.ErrResourceExhausted)

// Allocator hands out the ranges of a Pool, one per owner (a box ID). It
// keeps no state of its own on disk: the owners record their ranges (the
// box's record) and a restarted daemon Reserves them again before it
// Allocates, so that it never hands out a range a live box holds. Safe for
// concurrent use.
type Allocator struct {
	pool Pool
	mu   sync.Mutex
	// owners maps an owner to its slot (range HostID = Start+slot*Size).
	owners map[string]uint32
	used   map[uint32]string
	next   uint32 // where the search for a free slot starts
}

// NewAllocator returns an allocator of the ranges of p.
func NewAllocator(p Pool) *Allocator {
	return &Allocator{pool: p, owners: map[string]uint32{}, used: map[uint32]string{}}
}

// Pool is the allocator's pool.
func (a *Allocator) Pool() Pool { return a.pool }

func (a *Allocator) slots() uint32 { return a.pool.Count / Size }

// Allocate returns a free range for owner and records it as used; an owner
// that holds one gets the same range again. ErrExhausted when none is free.
func (a *Allocator) Allocate(owner string) (Range, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.owners[owner]; ok {
		return a.rangeOf(s), nil
	}
	n := a.slots()
	for i := range n {
		s := (a.next + i) % n
		if _, ok := a.used[s]; ok {
			continue
		}
		a.used[s] = owner
		a.owners[owner] = s
		// Round robin: a range freed a moment ago is the last one reused,
		// so nothing left of its box (a process the kernel has not reaped
		// yet) meets a new box with the same ids.
		a.next = (s + 1) % n
		return a.rangeOf(s), nil
	}
	return Range{}, fmt.Errorf("%w (pool %s holds %d boxes; remove boxes or widen userns_pool)", ErrExhausted, a.pool, n)
}

func (a *Allocator) rangeOf(slot uint32) Range {
	return Range{HostID: a.pool.Start + slot*Size, Size: Size}
}

// Reserve records r as owner's, as found in its record. It fails with
// errdefs.ErrAlreadyExists when another owner holds r, and with
// errdefs.ErrInvalidArgument when r is not one of the pool's ranges (the
// pool was changed while boxes lived): such a box keeps its ids, which
// the allocator never hands out anyway as they are outside its pool.
func (a *Allocator) Reserve(owner string, r Range) error {
	if r.Size != Size || r.HostID < a.pool.Start || uint64(r.HostID)+uint64(r.Size) > uint64(a.pool.Start)+uint64(a.pool.Count) || (r.HostID-a.pool.Start)%Size != 0 {
		return fmt.Errorf("user namespace range %s of %s is not a range of the pool %s: %w", r, owner, a.pool, errdefs.ErrInvalidArgument)
	}
	s := (r.HostID - a.pool.Start) / Size
	a.mu.Lock()
	defer a.mu.Unlock()
	if o, ok := a.used[s]; ok && o != owner {
		return fmt.Errorf("user namespace range %s of %s is held by %s: %w", r, owner, o, errdefs.ErrAlreadyExists)
	}
	if old, ok := a.owners[owner]; ok && old != s {
		delete(a.used, old)
	}
	a.used[s] = owner
	a.owners[owner] = s
	return nil
}

// Free returns how many ranges are free.
func (a *Allocator) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.slots()) - len(a.used)
}

// Release frees owner's range; an owner without one is no error.
func (a *Allocator) Release(owner string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.owners[owner]; ok {
		delete(a.owners, owner)
		delete(a.used, s)
	}
}

// InUse returns the owners that hold a range, sorted (for tests and
// diagnostics).
func (a *Allocator) InUse() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]string, 0, len(a.owners))
	for o := range a.owners {
		out = append(out, o)
	}
	slices.Sort(out)
	return out
}
