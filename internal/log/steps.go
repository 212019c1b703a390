package log

import (
	"context"
	"log/slog"
	"time"
)

// Steps times the steps of one operation for a single debug-level log line
// ("steps" then each step's name and duration, in order, and "took"). It
// costs nothing beyond a level check when debug logging is off: Step and
// Done do no work then. The zero value is off.
//
//	st := log.StartSteps(ctx)
//	mountDisk()
//	st.Step("disk")
//	startRuntime()
//	st.Step("run")
//	st.Done(ctx, "oci create")
type Steps struct {
	on          bool
	start, last time.Time
	attrs       []any
}

// StartSteps starts timing when ctx's logger logs at debug level.
func StartSteps(ctx context.Context) *Steps {
	if !G(ctx).Enabled(ctx, slog.LevelDebug) {
		return &Steps{}
	}
	now := time.Now()
	return &Steps{on: true, start: now, last: now, attrs: make([]any, 0, 24)}
}

// On reports whether the steps are timed (debug logging is on).
func (s *Steps) On() bool { return s.on }

// Step ends the step called name, which began at the previous Step (or at
// StartSteps).
func (s *Steps) Step(name string) {
	if !s.on {
		return
	}
	now := time.Now()
	s.attrs = append(s.attrs, name, now.Sub(s.last).Round(time.Microsecond))
	s.last = now
}

// Done logs msg at debug level with the steps and the total, followed by
// args.
func (s *Steps) Done(ctx context.Context, msg string, args ...any) {
	if !s.on {
		return
	}
	s.attrs = append(s.attrs, "took", time.Since(s.start).Round(time.Microsecond))
	G(ctx).Debug(msg, append(s.attrs, args...)...)
	s.on = false
}
