package sandbox

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestDeps keeps the core from leaning on its neighbours: the sandbox
// Manager reaches the network, the secret store, images, runtimes and the
// agents through the small interfaces it defines (Networker, Secrets,
// ImageStore, Runtime, Agents, ...), and it never parses corral.yaml. So
// its non-test imports, followed through this module's packages, may not
// include the packages that implement those interfaces or that consume the
// Manager. netpolicy is allowed: it is stdlib-only policy logic and holds
// the network settings a record keeps.
func TestDeps(t *testing.T) {
	const module = testutil.Module
	forbidden := []string{
		"internal/network", // the egress service: behind Networker
		"internal/secrets", // the secret store: behind Secrets
		"internal/spec",    // the corral.yaml parser
		"internal/image",   // the image store: behind ImageStore
		"internal/snapshot",
		"internal/runtime", // runtimes: behind Runtime
		"internal/agentpool",
		"internal/agentclient",
		"internal/tunnel",
		"internal/meta", // the record store: behind Store
		"internal/build",
		"internal/daemon",
		"internal/httpapi",
		"internal/e2bapi",
		"internal/mcpserver",
		"internal/cli",
	}
	isForbidden := func(dep string) bool {
		for _, f := range forbidden {
			if p := module + f; dep == p || strings.HasPrefix(dep, p+"/") {
				return true
			}
		}
		return false
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	testutil.WalkImports(t, repo, module+"internal/sandbox", func(from, imp string) bool {
		if isForbidden(imp) {
			t.Errorf("%s imports %s; the sandbox core must reach it through an interface it defines", from, imp)
			return false
		}
		return true
	})
}

// TestRecordWritesFunnel keeps every record write in the funnel
// (events.go: write, flush, drop), so that each one is persisted, indexed
// and emitted as an event: no other file of the package calls the Store's
// writes or assigns a box's record.
func TestRecordWritesFunnel(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	bypass := regexp.MustCompile(`\.(PutSandbox|DeleteSandbox)\(|\bb\.rec\s*=[^=]|\.rec, b\.stored\s*=`)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "events.go" {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for i, line := range strings.Split(string(src), "\n") {
			if code, _, _ := strings.Cut(line, "//"); bypass.MatchString(code) {
				t.Errorf("%s:%d: %s\n\twrite records through m.save, m.write or m.drop (events.go)", f, i+1, strings.TrimSpace(line))
			}
		}
	}
	if checked < 5 {
		t.Errorf("TestRecordWritesFunnel checked %d files; want the package's sources", checked)
	}
}
