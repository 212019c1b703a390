// Package log carries a *slog.Logger in a context.Context, in the shape of
// containerd's log.G: callers add attributes once at a boundary with With and
// every function below reads the logger back with G.
package log

import (
	"context"
	"io"
	"log/slog"
)

type loggerKey struct{}

// discard is returned by G when no logger was attached.
var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// G returns the logger stored in ctx, or slog.Default() if there is none.
func G(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// WithLogger returns a copy of ctx that carries l.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// With returns a copy of ctx whose logger has the given attributes added.
func With(ctx context.Context, args ...any) context.Context {
	return WithLogger(ctx, G(ctx).With(args...))
}

// Discard returns a logger that drops everything.
func Discard() *slog.Logger { return discard }

// ParseLevel turns "debug", "info", "warn" or "error" into a slog.Level.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	err := l.UnmarshalText([]byte(s))
	return l, err
}
