package oci

import (
	"fmt"
	"path/filepath"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/identifiers"
)

// Config is the [runtime.oci] table of the daemon's configuration.
//
// To add a field: document it here, give it a default in Default and
// withDefaults, check it in Validate, and use it in the mechanism.
type Config struct {
	// Binary is the OCI runtime to run: "crun" (default), "runc", or a
	// path to a compatible binary.
	Binary string `toml:"binary"`
	// StateDir is the runtime's state directory (its --root).
	StateDir string `toml:"state_dir"`
	// RunDir holds one directory per sandbox: bundle/config.json,
	// bundle/rootfs, netns (the bind mount of its network namespace),
	// agent.log, pid and mounts.json.
	RunDir string `toml:"run_dir"`
	// CgroupParent is the cgroup under which every sandbox gets its own
	// cgroup "/<CgroupParent>/<id>" (cgroupfs driver).
	CgroupParent string `toml:"cgroup_parent"`
	// Seccomp applies the default seccomp profile (see seccomp.go). A nil
	// value means true; set false only to debug a syscall denial.
	Seccomp *bool `toml:"seccomp"`
}

// Default returns the default configuration.
func Default() Config {
	t := true
	return Config{
		Binary:       "crun",
		StateDir:     "/run/corral/runtime",
		RunDir:       "/run/corral/sandboxes",
		CgroupParent: "corral",
		Seccomp:      &t,
	}
}

// withDefaults fills the zero fields of c from Default.
func (c Config) withDefaults() Config {
	d := Default()
	if c.Binary == "" {
		c.Binary = d.Binary
	}
	if c.StateDir == "" {
		c.StateDir = d.StateDir
	}
	if c.RunDir == "" {
		c.RunDir = d.RunDir
	}
	if c.CgroupParent == "" {
		c.CgroupParent = d.CgroupParent
	}
	if c.Seccomp == nil {
		c.Seccomp = d.Seccomp
	}
	return c
}

// Validate checks c after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	if !filepath.IsAbs(c.StateDir) || !filepath.IsAbs(c.RunDir) {
		return fmt.Errorf("oci: state_dir and run_dir must be absolute paths: %w", errdefs.ErrInvalidArgument)
	}
	if err := identifiers.Validate("oci cgroup_parent", c.CgroupParent); err != nil {
		return err
	}
	return nil
}
