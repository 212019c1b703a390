// Package cleanup rolls back half-built resources (after gVisor's pkg/cleanup)
// and runs teardown on a context detached from the request (after
// containerd's internal/cleanup).
package cleanup

import (
	"context"
	"time"
)

// Cleanup is a stack of functions run in reverse order by Clean unless
// Release was called first.
//
//	cu := cleanup.Make(func() { undoA() })
//	defer cu.Clean()
//	cu.Add(func() { undoB() })
//	...
//	cu.Release() // success: keep everything
type Cleanup struct {
	fns []func()
}

// Make returns a Cleanup holding fn.
func Make(fn func()) Cleanup {
	c := Cleanup{}
	c.Add(fn)
	return c
}

// Add pushes fn; nil is ignored.
func (c *Cleanup) Add(fn func()) {
	if fn != nil {
		c.fns = append(c.fns, fn)
	}
}

// Clean runs the pushed functions last first, then forgets them.
func (c *Cleanup) Clean() {
	for i := len(c.fns) - 1; i >= 0; i-- {
		c.fns[i]()
	}
	c.fns = nil
}

// Release forgets the pushed functions without running them.
func (c *Cleanup) Release() { c.fns = nil }

// DefaultTimeout bounds teardown started by Do.
const DefaultTimeout = 10 * time.Second

// Do runs fn on a context that keeps ctx's values but not its cancellation,
// bounded by DefaultTimeout, so teardown finishes even when the request that
// triggered it has gone away.
func Do(ctx context.Context, fn func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultTimeout)
	defer cancel()
	fn(ctx)
}
