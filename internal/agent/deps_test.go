package agent

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestDeps keeps the agent small and free of daemon-side code: its
// non-test imports, followed through this module's packages, may only be
// the standard library, api/gen, internal/log and a few modules. It reads
// the sources instead of running `go list`, because the agent's reaper in
// this test process would steal the exit status of any forked child.
func TestDeps(t *testing.T) {
	const module = "github.com/corral-sandbox/corral/"
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
	seen := map[string]bool{}
	var walk func(importPath string)
	walk = func(importPath string) {
		if seen[importPath] {
			return
		}
		seen[importPath] = true
		dir := filepath.Join(repo, strings.TrimPrefix(importPath, module))
		pkg, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read package %s: %v", importPath, err)
		}
		for _, imp := range pkg.Imports {
			if !isAllowed(imp) {
				t.Errorf("%s imports %s; the agent may only use %v", importPath, imp, allowed)
				continue
			}
			if strings.HasPrefix(imp, module) {
				walk(imp)
			}
		}
	}
	walk(module + "internal/agent")
	if len(seen) < 2 {
		t.Errorf("TestDeps saw only %v; want the agent and its module deps", seen)
	}
}
