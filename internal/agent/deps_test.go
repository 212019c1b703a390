package agent

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestDeps keeps the agent small and free of daemon-side code: its
// non-test imports, followed through this module's packages, may only be
// the standard library, api/gen, internal/log and a few modules. It reads
// the sources instead of running `go list`, because the agent's reaper in
// this test process would steal the exit status of any forked child.
func TestDeps(t *testing.T) {
	const module = testutil.Module
	allowed := []string{
		module + "internal/agent",
		module + "api/gen/",
		module + "internal/log",
		"golang.org/x/sys/",
		"golang.org/x/net/",
		"connectrpc.com/connect",
		"google.golang.org/protobuf/",
		"github.com/creack/pty",
	}
	isAllowed := func(dep string) bool {
		if first, _, _ := strings.Cut(dep, "/"); !strings.Contains(first, ".") {
			return true // standard library
		}
		for _, a := range allowed {
			if dep == strings.TrimSuffix(a, "/") || strings.HasPrefix(dep, a) {
				return true
			}
		}
		return false
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WalkImports(t, repo, module+"internal/agent", func(from, imp string) bool {
		if !isAllowed(imp) {
			t.Errorf("%s imports %s; the agent may only use %v", from, imp, allowed)
			return false
		}
		return true
	})
}
