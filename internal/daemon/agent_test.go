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

func TestPruneAgents(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	// Agents a, b, c, then inits a, b, c: b of each is unused.
	for _, prefix := range []string{agentbin.Prefix, agentbin.InitPrefix} {
		for _, n := range []string{"a", "b", "c"} {
			p, err := agentbin.InstallAs(dir, prefix, []byte(prefix+n))
			if err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
	}
	other := filepath.Join(dir, "not-an-agent")
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	pruneAgents(log.WithLogger(context.Background(), log.Discard()), dir, map[string]bool{paths[0]: true, paths[2]: true, paths[3]: true, paths[5]: true})
	for i, p := range paths {
		_, err := os.Stat(p)
		if kept := err == nil; kept != (i%3 != 1) {
			t.Errorf("%s: kept %v, want %v", p, kept, i%3 != 1)
		}
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not an agent was removed: %v", err)
	}
	pruneAgents(context.Background(), filepath.Join(dir, "missing"), nil) // no directory: nothing to do
}

func TestDefaultInit(t *testing.T) {
	ctx := log.WithLogger(context.Background(), log.Discard())
	if p := defaultInit(ctx, t.TempDir(), nil); p != "" {
		t.Errorf("nothing embedded: init %q, want none (the agent is PID 1)", p)
	}
	// Not an ELF file: refused, so boxes never get a PID 1 that cannot start.
	if p := defaultInit(ctx, t.TempDir(), []byte("#!/bin/sh\n")); p != "" {
		t.Errorf("a script: init %q, want none", p)
	}
}
