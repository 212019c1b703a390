package testutil

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// Module is this repository's module path, with a trailing slash.
const Module = "github.com/corral-sandbox/corral/"

// WalkImports follows the non-test imports of the package at import path
// root (a package of this module, read from repo, the repository's
// directory) through this module's packages, and calls check for each
// import (from, imp). An import check rejects (returns false) is not
// followed further. It reads the sources rather than running `go list`,
// so a test whose process reaps children (the agent's) can use it. It
// returns the packages it read, and fails t when it read fewer than two:
// a walk that saw nothing checked nothing.
func WalkImports(t testing.TB, repo, root string, check func(from, imp string) bool) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	var walk func(importPath string)
	walk = func(importPath string) {
		if seen[importPath] {
			return
		}
		seen[importPath] = true
		dir := filepath.Join(repo, strings.TrimPrefix(importPath, Module))
		pkg, err := build.Default.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("read package %s: %v", importPath, err)
		}
		for _, imp := range pkg.Imports {
			if !check(importPath, imp) {
				continue
			}
			if strings.HasPrefix(imp, Module) {
				walk(imp)
			}
		}
	}
	walk(root)
	if len(seen) < 2 {
		t.Errorf("the import walk from %s saw only %v; want the package and its module deps", root, seen)
	}
	return seen
}
