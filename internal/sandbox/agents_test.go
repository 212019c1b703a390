package sandbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestWithAgent checks that WithAgent calls its function with the agent
// of a running box while holding the box, and refuses without waiting a
// box that an operation holds, that is paused or that is gone.
func TestWithAgent(t *testing.T) {
	ctx := testutil.Context(t)
	m := newManager(t, sandboxtest.NewEnv())
	rec, err := m.Create(ctx, sandbox.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	called := false
	err = m.WithAgent(ctx, rec.ID, func(ctx context.Context, addr string) error {
		called = addr == rec.AgentAddr
		// An operation on the box now would have to wait: another
		// WithAgent does not.
		if err := m.WithAgent(ctx, rec.ID, func(context.Context, string) error { return nil }); !errors.Is(err, sandbox.ErrBusy) {
			t.Errorf("WithAgent while the box is held = %v; want ErrBusy", err)
		}
		return nil
	})
	if err != nil || !called {
		t.Fatalf("WithAgent(running box) = %v, called with its agent %v; want nil, true", err, called)
	}
	if _, err := m.Pause(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.WithAgent(ctx, rec.ID, func(context.Context, string) error { t.Error("called for a paused box"); return nil }); !errors.Is(err, sandbox.ErrBusy) || !errdefs.IsUnavailable(err) {
		t.Errorf("WithAgent(paused box) = %v; want ErrBusy (unavailable)", err)
	}
	if err := m.Delete(ctx, rec.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := m.WithAgent(ctx, rec.ID, func(context.Context, string) error { return nil }); !errdefs.IsNotFound(err) {
		t.Errorf("WithAgent(removed box) = %v; want not found", err)
	}
}
