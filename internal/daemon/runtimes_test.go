package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// fakeRuntime writes an executable that prints out for --version.
func fakeRuntime(t *testing.T, name, out string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\nprintf '"+out+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAssessRuntime checks that a runtime whose version has a known
// vulnerability is refused unless allow_unsafe_runtimes names it, that
// one whose version cannot be told is refused, and what each reason says.
func TestAssessRuntime(t *testing.T) {
	ctx := testutil.Context(t)
	debianRunc := fakeRuntime(t, "runc", `runc version 1.1.15+ds1\ncommit: 1.1.15+ds1-2+b4\nspec: 1.2.0\n`)
	for _, tc := range []struct {
		name, runtime, path string
		allow               []string
		status, reason      string
		available           bool
	}{
		{"runc below the fixes", "runc", debianRunc, nil, rest.RuntimeRefused, "runc 1.1.15 is below the minimum safe version 1.2.8, 1.3.3 or 1.4.0-rc.3 (CVE-2025-31133, CVE-2025-52565, CVE-2025-52881)", false},
		{"runc allowed unsafe", "runc", debianRunc, []string{"runc"}, rest.RuntimeUnsafe, "CVE-2025-31133", true},
		{"runc fixed", "runc", fakeRuntime(t, "runc", `runc version 1.3.3\n`), nil, rest.RuntimeOK, "", true},
		{"crun", "crun", fakeRuntime(t, "crun", `crun version 1.21\ncommit: 1026984\n`), nil, rest.RuntimeOK, "", true},
		{"no version", "runc", fakeRuntime(t, "runc", `usage: runc\n`), []string{"runc"}, rest.RuntimeRefused, "cannot tell the version", false},
		{"missing", "runc", "/nonexistent/runc", nil, rest.RuntimeNotFound, "binary /nonexistent/runc not found (runtime_paths.runc)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.RuntimePaths = map[string]string{tc.runtime: tc.path}
			cfg.AllowUnsafeRuntimes = tc.allow
			ri := assessRuntime(ctx, cfg, tc.runtime)
			if ri.Status != tc.status || !strings.Contains(ri.Reason, tc.reason) || (tc.reason == "") != (ri.Reason == "") {
				t.Errorf("assessRuntime(%s) = status %q, reason %q; want %q, %q", tc.path, ri.Status, ri.Reason, tc.status, tc.reason)
			}
			if ri.Status == rest.RuntimeNotFound {
				return
			}
			if ri.Path != tc.path {
				t.Errorf("assessRuntime(%s).Path = %q; want the configured binary", tc.path, ri.Path)
			}
		})
	}

	// A refused default runtime stops the daemon with the keys to change.
	cfg := DefaultConfig()
	cfg.DefaultRuntime = "runc"
	cfg.RuntimePaths = map[string]string{"runc": debianRunc}
	err := errDefaultRuntime(assessRuntime(ctx, cfg, "runc"))
	for _, want := range []string{"default runtime runc is refused", "CVE-2025-31133", "default_runtime", "runtime_paths.runc", `add "runc" to allow_unsafe_runtimes`} {
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("errDefaultRuntime(refused runc) = %v; want unavailable naming %q", err, want)
		}
	}

	// A default tier whose runtime is missing names default_tier.
	cfg = DefaultConfig()
	cfg.DefaultTier = "gvisor"
	cfg.Runtime.GVisor.Path = "/nonexistent/runsc"
	ri := assessRuntime(ctx, cfg, RunscName)
	if !ri.Default {
		t.Errorf("assessRuntime(runsc) with default_tier gvisor: Default = false; want the default runtime")
	}
	err = errDefaultRuntime(ri)
	for _, want := range []string{`default_tier "gvisor" is not available`, "install the runsc package", `set default_tier = "container"`} {
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("errDefaultRuntime(missing runsc) = %v; want unavailable naming %q", err, want)
		}
	}
}
