package agent

import (
	"path"
	"strings"
)

// resolvePath turns a path from a request into an absolute, clean path of
// the box. Relative paths (and "~", "~/x") are taken against home. Inside the
// box "/" is the sandbox root, so ".." can never climb above it; no host path
// is ever built from request input.
func resolvePath(home, p string) string {
	if home == "" || home[0] != '/' {
		home = "/"
	}
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = home + p[1:]
	case !strings.HasPrefix(p, "/"):
		p = home + "/" + p
	}
	return path.Clean(p)
}
