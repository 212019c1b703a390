// Package mount describes mounts as data (after containerd's core/mount) and
// performs them on Linux. Layer stores return []Mount and never mount on a
// caller's behalf; runtimes mount them where they decide.
package mount

import "strings"

// Mount is one mount(2) to perform.
type Mount struct {
	// Type is the file system type ("overlay", "ext4", "bind", "tmpfs"...).
	Type string `json:"type"`
	// Source is the device, directory or file. With the "loop" option it is a
	// regular file that is attached to a free loop device first.
	Source string `json:"source"`
	// Target is where to mount. Empty means the root file system directory
	// chosen by whoever performs the mounts; otherwise an absolute host path.
	Target string `json:"target,omitempty"`
	// Options are fstab-style options: flags such as "ro", "nosuid", "nodev",
	// "noexec", "bind", "rbind", "loop", and data options such as
	// "lowerdir=...", "size=...". "direct-io" (with "loop") attaches the
	// file to its loop device with direct I/O (as losetup --direct-io=on).
	Options []string `json:"options,omitempty"`
}

// Readonly reports whether the mount has the "ro" option.
func (m Mount) Readonly() bool {
	for _, o := range m.Options {
		if o == "ro" {
			return true
		}
	}
	return false
}

// Option returns the value of a "key=value" data option and whether it is set.
func (m Mount) Option(key string) (string, bool) {
	for _, o := range m.Options {
		if v, ok := strings.CutPrefix(o, key+"="); ok {
			return v, true
		}
	}
	return "", false
}
