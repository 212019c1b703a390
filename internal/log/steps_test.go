package log

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestSteps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		want  []string
	}{
		{"debug", slog.LevelDebug, []string{`msg="oci create"`, "disk=", "run=", "took=", "sandbox=x"}},
		{"info", slog.LevelInfo, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			ctx := WithLogger(context.Background(), slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level})))
			st := StartSteps(ctx)
			if st.On() != (tc.want != nil) {
				t.Fatalf("StartSteps at %v: On() = %v; want %v", tc.level, st.On(), tc.want != nil)
			}
			st.Step("disk")
			st.Step("run")
			st.Done(ctx, "oci create", "sandbox", "x")
			st.Done(ctx, "oci create", "sandbox", "x") // once only
			out := buf.String()
			if tc.want == nil {
				if out != "" {
					t.Fatalf("log at %v = %q; want nothing", tc.level, out)
				}
				return
			}
			if n := strings.Count(out, "\n"); n != 1 {
				t.Fatalf("log has %d lines; want 1:\n%s", n, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log = %q; want it to contain %q", out, w)
				}
			}
			if strings.Index(out, "disk=") > strings.Index(out, "run=") {
				t.Errorf("log = %q; want the steps in order", out)
			}
		})
	}
}

func TestStepsZero(t *testing.T) {
	var st Steps
	st.Step("x")
	st.Done(context.Background(), "nothing")
	if st.On() {
		t.Fatal("zero Steps is on")
	}
}
