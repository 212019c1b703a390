package oci

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
)

// RunscConfig tunes the gvisor tier: Binary run as gVisor's runsc.
//
// The dialect. runsc reads the same bundle as crun and runc (config.json,
// the root file system Create mounts, the network namespace the daemon
// makes, the cgroup) and the freezer, the pid file and the cleanup work the
// same, so runsc is a dialect of this package and not a copy. What differs:
//
//   - The agent's socket. gVisor implements unix sockets in its own
//     kernel, so neither an abstract socket of the box's network namespace
//     nor a listening socket handed in as fd 3 reaches the box (runsc's
//     --pass-fd imports it, and accept on it fails with EINVAL). runsc
//     runs with --network=host instead: the box uses the host kernel's
//     network stack inside its own network namespace, and the agent listens
//     on TCP 127.0.0.1:AgentTCPPort there (E2B's envd port). The daemon dials
//     it from an OS thread that joins the namespace
//     (agentclient.SchemeTCPNetNS), as it does the abstract socket. The
//     box's processes share that namespace, so the agent serves only
//     connections that send the box's token first (Runtime.agentToken).
//   - The network. With --network=host the box's packets go through the
//     namespace's own nftables rules, so the egress redirect to the proxy,
//     the allowlist and the egress log apply unchanged (runsc's default
//     netstack would send raw frames past them).
//   - No corral-init: the agent is PID 1 of gVisor's kernel and never exits
//     when idle.
//   - No memory checkpoint: `runsc checkpoint` of release 20240729 refuses
//     a sandbox on the host's network stack ("checkpoint not supported
//     when using hostinet", runsc/boot/restore.go), and this dialect needs
//     --network=host. gVisor supports it from release 20260721, which is
//     not tested here. Suspend and fork keep files only (FilesOnly).
//   - The pids limit. gVisor has its own cgroups, and refuses a fork
//     past pids.max of its pids cgroup with EAGAIN; the host's limit
//     counts gVisor's kernel and helpers too (under systrap every process
//     of the box also has a host stub), and when gVisor's kernel cannot
//     make a thread the whole box ends. So the agent writes the box's
//     limit to gVisor's cgroup (--pids-max) before anything runs, and the
//     host's cgroup gets RunscHostPids of it: a fork bomb fails like in
//     the container tier, and the box lives on.
//   - The pid file names the sandbox's kernel process (runsc-sandbox), in
//     the box's cgroup; SIGTERM to it reaches the box's PID 1 (the agent),
//     SIGKILL ends the whole box.
type RunscConfig struct {
	// Platform is gVisor's system call interception: "systrap" (default),
	// "ptrace" or "kvm".
	Platform string
	// Flags are extra global runsc flags, before Corral's own.
	Flags []string
}

// DefaultRunscPlatform works on hosts and in VMs without nested
// virtualisation.
const DefaultRunscPlatform = "systrap"

// RunscPlatforms are the platforms RunscConfig.Platform may name.
var RunscPlatforms = []string{"systrap", "ptrace", "kvm"}

// RunscOwnFlags are the global runsc flags Corral sets itself, which
// RunscConfig.Flags may not repeat.
var RunscOwnFlags = []string{"root", "log", "platform", "network", "overlay2", "host-uds", "file-access"}

// AgentTCPPort is the port of the agent of a gvisor box, on its loopback.
const AgentTCPPort = 49983

func (c RunscConfig) validate() error {
	if !slices.Contains(RunscPlatforms, c.Platform) {
		return fmt.Errorf("runsc platform %q must be one of %s: %w", c.Platform, strings.Join(RunscPlatforms, ", "), errdefs.ErrInvalidArgument)
	}
	return nil
}

// globalArgs are the runsc flags before the subcommand.
func (c RunscConfig) globalArgs() []string {
	return append(slices.Clone(c.Flags),
		"--platform="+c.Platform,
		// The netns's own kernel stack: see RunscConfig.
		"--network=host",
		// Writes go to the box's disk (the writable layer Create mounts),
		// which snapshot and fork copy and disk_bytes bounds, and not to
		// an overlay in the sandbox's memory.
		"--overlay2=none",
	)
}

// MinRunscRelease is the oldest runsc release the gvisor tier accepts: the
// oldest tested with the systrap platform (Debian trixie's build). Older
// ones (Debian bookworm's 20221219) have no systrap.
const MinRunscRelease = 20240729

// runscReleaseRE finds the release date in `runsc --version`: "runsc
// version release-20240729.0", or Debian's "runsc version 0.0~20240729.0".
var runscReleaseRE = regexp.MustCompile(`(?m)^runsc version \S*?(20\d{6})(?:\.\d+)?\S*\s*$`)

// AssessRunsc reads the release of runsc from the output of `runsc
// --version` and says why it is refused, "" when it is recent enough.
func AssessRunsc(out string) (release int, refused string) {
	m := runscReleaseRE.FindStringSubmatch(out)
	if m == nil {
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return 0, fmt.Sprintf("cannot tell the release of runsc from %q", first)
	}
	fmt.Sscan(m[1], &release)
	if release < MinRunscRelease {
		return release, fmt.Sprintf("runsc release %d is older than %d, the oldest with the systrap platform Corral has tested (install runsc from Debian trixie or gVisor's releases)", release, MinRunscRelease)
	}
	return release, ""
}

// RunscHostPids is the host cgroup's pids limit of a gvisor box whose own
// limit (in gVisor's cgroup) is n: room for gVisor's kernel and gofer
// threads (about 24 host tasks in an idle box) and systrap's stubs (about
// 2 host tasks for each task of the box), so that the box's own limit is
// reached first. The host's limit stays the bound on what the box costs
// the host.
func RunscHostPids(n int64) int64 {
	return 3*n + 128
}
