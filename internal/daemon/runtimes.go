package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/runtime/oci"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// runtimeVersionTimeout bounds `<runtime> --version`.
const runtimeVersionTimeout = 5 * time.Second

// assessRuntime finds the binary of configured runtime name (runtime_paths,
// else name in the daemon's PATH), asks its version and decides whether to
// offer it: a version with a known vulnerability (oci.Advisories), or one
// that cannot be told, is refused unless allow_unsafe_runtimes names the
// runtime. Available is left for the caller to set once the runtime
// started.
func assessRuntime(ctx context.Context, cfg Config, name string) rest.RuntimeInfo {
	ri := rest.RuntimeInfo{Name: name, Default: name == cfg.defaultRuntime()}
	bin, where := cfg.RuntimePaths[name], "runtime_paths."+name
	if name == RunscName && cfg.Runtime.GVisor.Path != "" {
		bin, where = cfg.Runtime.GVisor.Path, "runtime.gvisor.path"
	}
	if bin == "" {
		bin, where = name, "the daemon's PATH"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		ri.Status, ri.Reason = rest.RuntimeNotFound, fmt.Sprintf("binary %s not found (%s)", bin, where)
		return ri
	}
	ri.Path = path
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), runtimeVersionTimeout)
	defer cancel()
	out, err := exec.CommandContext(vctx, path, "--version").Output()
	ri.Version = versionLine(string(out))
	if err != nil {
		ri.Status, ri.Reason = rest.RuntimeRefused, fmt.Sprintf("`%s --version` failed (%v), so its version is unknown", path, err)
		return ri
	}
	if name == RunscName {
		return assessRunsc(cfg, ri, string(out))
	}
	a, err := oci.Assess(name, string(out))
	if err != nil {
		ri.Status, ri.Reason = rest.RuntimeRefused, fmt.Sprintf("cannot tell the version of %s, so it is not known to be safe: %v", path, err)
		return ri
	}
	unsafe := a.Unsafe()
	switch {
	case unsafe == "":
		ri.Status = rest.RuntimeOK
	case slices.Contains(cfg.AllowUnsafeRuntimes, name):
		ri.Status, ri.Reason = rest.RuntimeUnsafe, unsafe
	default:
		ri.Status, ri.Reason = rest.RuntimeRefused, unsafe
	}
	return ri
}

// refusedHint says which configuration keys change the fate of a runtime
// that is not offered.
func refusedHint(ri rest.RuntimeInfo) string {
	if ri.Name == RunscName {
		return runscHint(ri)
	}
	if ri.Status == rest.RuntimeNotFound {
		return fmt.Sprintf("install it, or set runtime_paths.%s to its binary", ri.Name)
	}
	return fmt.Sprintf("install a fixed release (and set runtime_paths.%s to it if it is not first in PATH), or add %q to allow_unsafe_runtimes to run it anyway", ri.Name, ri.Name)
}

// errDefaultRuntime is the start failure when the default runtime (the
// default tier's) is not offered.
func errDefaultRuntime(ri rest.RuntimeInfo) error {
	if ri.Name == RunscName {
		return fmt.Errorf("default_tier %q is not available on this host: runsc is %s: %s; %s, or set default_tier = %q: %w",
			sandbox.TierGVisor, strings.ReplaceAll(ri.Status, "_", " "), ri.Reason, refusedHint(ri), sandbox.TierContainer, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("default runtime %s is %s: %s; set default_runtime to another runtime, or %s: %w",
		ri.Name, strings.ReplaceAll(ri.Status, "_", " "), ri.Reason, refusedHint(ri), errdefs.ErrUnavailable)
}

// versionLine returns the first line of `--version` output that names a
// version ("crun version 1.14", "runc version 1.1.12"), else its first
// line.
func versionLine(out string) string {
	first := ""
	sc := bufio.NewScanner(bytes.NewReader([]byte(out)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first == "" {
			first = line
		}
		if strings.Contains(strings.ToLower(line), "version") {
			return line
		}
	}
	return first
}
