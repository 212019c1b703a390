package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/agentbin"
	"github.com/corral-sandbox/corral/internal/log"
)

func TestDefaultAgent(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ctx := log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
	dir := filepath.Join(t.TempDir(), "agent")

	// Nothing embedded: the daemon's own binary is the agent.
	if got, err := defaultAgent(ctx, dir, nil); err != nil || got != self {
		t.Errorf("no slim agent: %q, %v; want %q", got, err, self)
	}

	// A slim agent from this very build (the test binary stands in for
	// it): installed under dir and used.
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	got, err := defaultAgent(ctx, dir, bin)
	if err != nil || filepath.Dir(got) != dir || !strings.HasPrefix(filepath.Base(got), agentbin.Prefix) {
		t.Fatalf("slim agent of the same build: %q, %v; want it installed in %s", got, err, dir)
	}
	if installed, err := os.ReadFile(got); err != nil || !bytes.Equal(installed, bin) {
		t.Errorf("installed agent differs from the embedded one (%v)", err)
	}
	if logs.Len() != 0 {
		t.Errorf("unexpected log: %s", logs.String())
	}

	// Not from this build: never run, the daemon's binary is used and the
	// log says why.
	got, err = defaultAgent(ctx, dir, []byte("#!/bin/sh\n"))
	if err != nil || got != self {
		t.Errorf("foreign slim agent: %q, %v; want %q", got, err, self)
	}
	if !strings.Contains(logs.String(), "not using the embedded slim agent") {
		t.Errorf("no warning about the foreign agent in %q", logs.String())
	}
}
