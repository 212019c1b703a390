package agent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupMem reads the memory controller of the box's own cgroup, mounted at
// root (inside the box: /sys/fs/cgroup through a cgroup namespace). Both
// layouts are supported: v2 (memory.events, memory.max) and v1
// (memory/memory.oom_control, memory/memory.limit_in_bytes).
type cgroupMem struct {
	root string
}

// readSmall reads a pseudo-file of up to 64 KiB (/proc/stat: its "intr"
// line grows with the host's interrupts) in one read, without trusting its
// size. For metrics requests, not for every command (see readCgroup).
func readSmall(path string) ([]byte, error) {
	return readOnce(path, make([]byte, 64<<10))
}

// readCgroup reads a cgroup file of a few lines (memory.events,
// memory.oom_control, a single value). The agent reads the OOM counter
// before and after every command, so this one uses a buffer on the stack:
// a 64 KiB allocation per read was most of the agent's garbage per exec.
func readCgroup(path string) ([]byte, error) {
	var buf [4096]byte
	b, err := readOnce(path, buf[:])
	return bytes.Clone(b), err
}

func readOnce(path string, buf []byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := f.Read(buf)
	if n == 0 && err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// oomKills returns the cgroup's oom_kill counter, and false when no counter
// can be read (no memory controller, or a kernel without the field).
func (c cgroupMem) oomKills() (uint64, bool) {
	for _, p := range []string{
		filepath.Join(c.root, "memory.events"),
		filepath.Join(c.root, "memory", "memory.oom_control"),
	} {
		b, err := readCgroup(p)
		if err != nil {
			continue
		}
		if n, ok := parseKeyed(b, "oom_kill"); ok {
			return n, true
		}
	}
	return 0, false
}

// limit returns the memory limit in bytes, and false when unlimited or unknown.
func (c cgroupMem) limit() (uint64, bool) {
	if b, err := readCgroup(filepath.Join(c.root, "memory.max")); err == nil {
		return parseLimit(b)
	}
	if b, err := readCgroup(filepath.Join(c.root, "memory", "memory.limit_in_bytes")); err == nil {
		return parseLimit(b)
	}
	return 0, false
}

// usage returns the memory in use by the box in bytes.
func (c cgroupMem) usage() (uint64, bool) {
	for _, p := range []string{
		filepath.Join(c.root, "memory.current"),
		filepath.Join(c.root, "memory", "memory.usage_in_bytes"),
	} {
		if b, err := readCgroup(p); err == nil {
			if n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

// parseKeyed finds "key N" in a flat-keyed cgroup file.
func parseKeyed(b []byte, key string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok || k != key {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// parseLimit parses memory.max / memory.limit_in_bytes. "max" and the v1
// "unlimited" value (close to 2^63) mean no limit.
func parseLimit(b []byte) (uint64, bool) {
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// humanSize formats n bytes with binary units: 512 MiB, 1.5 GiB.
func humanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	s := strconv.FormatFloat(v, 'f', 1, 64)
	s = strings.TrimSuffix(s, ".0")
	return s + " " + string("KMGTPE"[exp]) + "iB"
}

// oomError is the end-event error of a command the OOM killer ended.
func (c cgroupMem) oomError() string {
	if l, ok := c.limit(); ok {
		return "killed: out of memory (memory limit " + humanSize(l) + ")"
	}
	return "killed: out of memory"
}
