// Package cgroups reads the resource use of a cgroup on cgroup v1 (legacy or
// hybrid) and v2 (unified) hosts, and finds and removes a cgroup's
// directories. Every function takes the cgroup file system root (normally
// /sys/fs/cgroup) so tests can run over fake files.
package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Root is where the cgroup file systems are mounted.
const Root = "/sys/fs/cgroup"

// Mode is the cgroup layout of a host.
type Mode int

const (
	// Legacy is cgroup v1: one hierarchy per controller under root,
	// possibly with a cgroup2 mount at root/unified (hybrid).
	Legacy Mode = iota + 1
	// Unified is cgroup v2 mounted at root.
	Unified
)

func (m Mode) String() string {
	switch m {
	case Legacy:
		return "v1"
	case Unified:
		return "v2"
	}
	return "unknown"
}

// DetectMode returns Unified when root is a cgroup2 mount (it has a
// cgroup.controllers file) and Legacy otherwise.
func DetectMode(root string) Mode {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return Unified
	}
	return Legacy
}

// SwapAccounting reports whether the host can limit memory+swap: v1 has
// memory.memsw.limit_in_bytes, v2 has memory.swap.max in a non-root cgroup
// (its presence is tested on the root's controllers list).
func SwapAccounting(root string) bool {
	if DetectMode(root) == Unified {
		// memory.swap.max exists only below the root; look for any child.
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); err == nil && !bytes.Contains(b, []byte("memory")) {
			return false
		}
		ents, err := os.ReadDir(root)
		if err != nil {
			return false
		}
		for _, e := range ents {
			if e.IsDir() {
				if _, err := os.Stat(filepath.Join(root, e.Name(), "memory.swap.max")); err == nil {
					return true
				}
			}
		}
		return false
	}
	_, err := os.Stat(filepath.Join(root, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
}

// Stats is the resource use of one cgroup. Limits are 0 when unlimited.
type Stats struct {
	CPUNanos         uint64
	MemoryBytes      uint64
	MemoryPeakBytes  uint64
	MemoryLimitBytes uint64
	Pids             uint64
	PidsLimit        uint64
	OOMKills         uint64
	// CacheBytes is the page cache charged to the cgroup and
	// InactiveFileBytes the part of it the kernel reclaims first (from
	// memory.stat; 0 where it cannot be read). MemoryBytes minus
	// InactiveFileBytes is the working set, which docker stats shows.
	CacheBytes        uint64
	InactiveFileBytes uint64
}

// WorkingSet is MemoryBytes less the inactive page cache, which the
// kernel reclaims before it would fail an allocation.
func (s Stats) WorkingSet() uint64 {
	return s.MemoryBytes - min(s.InactiveFileBytes, s.MemoryBytes)
}

// unlimitedV1 is the smallest value a v1 limit file shows for "no limit"
// (PAGE_COUNTER_MAX rounded to pages is just below 2^63).
const unlimitedV1 = 1 << 62

// Read returns the stats of the cgroup rel (for example "/corral/sb1") in
// whatever layout root has.
func Read(root, rel string) (Stats, error) {
	if DetectMode(root) == Unified {
		return ReadV2(root, rel)
	}
	return ReadV1(root, rel)
}

// ReadV1 reads the cgroup rel from the per-controller hierarchies under
// root. The memory controller must exist; cpuacct and pids are optional.
func ReadV1(root, rel string) (Stats, error) {
	var s Stats
	mem := filepath.Join(root, "memory", rel)
	var err error
	if s.MemoryBytes, err = readUint(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return Stats{}, err
	}
	if s.MemoryPeakBytes, err = readUint(filepath.Join(mem, "memory.max_usage_in_bytes")); err != nil {
		return Stats{}, err
	}
	if s.MemoryLimitBytes, err = readUint(filepath.Join(mem, "memory.limit_in_bytes")); err != nil {
		return Stats{}, err
	}
	if s.MemoryLimitBytes >= unlimitedV1 {
		s.MemoryLimitBytes = 0
	}
	if s.OOMKills, err = readKey(filepath.Join(mem, "memory.oom_control"), "oom_kill"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Stats{}, err
	}
	if err := readMemoryStat(filepath.Join(mem, "memory.stat"), "total_cache", "total_inactive_file", &s); err != nil {
		return Stats{}, err
	}
	if s.CPUNanos, err = readUint(filepath.Join(root, "cpuacct", rel, "cpuacct.usage")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Stats{}, err
	}
	if err := readPids(filepath.Join(root, "pids", rel), &s); err != nil {
		return Stats{}, err
	}
	return s, nil
}

// ReadV2 reads the cgroup root/rel of a unified hierarchy. memory.peak is
// optional (Linux 5.19+).
func ReadV2(root, rel string) (Stats, error) {
	var s Stats
	dir := filepath.Join(root, rel)
	var err error
	if s.MemoryBytes, err = readUint(filepath.Join(dir, "memory.current")); err != nil {
		return Stats{}, err
	}
	if s.MemoryPeakBytes, err = readUint(filepath.Join(dir, "memory.peak")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Stats{}, err
	}
	if s.MemoryLimitBytes, err = readUint(filepath.Join(dir, "memory.max")); err != nil {
		return Stats{}, err
	}
	if s.OOMKills, err = readKey(filepath.Join(dir, "memory.events"), "oom_kill"); err != nil {
		return Stats{}, err
	}
	if err := readMemoryStat(filepath.Join(dir, "memory.stat"), "file", "inactive_file", &s); err != nil {
		return Stats{}, err
	}
	usec, err := readKey(filepath.Join(dir, "cpu.stat"), "usage_usec")
	if err != nil {
		return Stats{}, err
	}
	s.CPUNanos = usec * 1000
	if err := readPids(dir, &s); err != nil {
		return Stats{}, err
	}
	return s, nil
}

// readMemoryStat fills s's page cache figures from the memory.stat file
// at path (keys cache and inactive; hierarchical ones on v1). A missing
// file leaves them 0.
func readMemoryStat(path, cache, inactive string, s *Stats) error {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("read cgroup file: %w", err)
	}
	for line := range bytes.Lines(b) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte(" "))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(k) {
		case cache:
			dst = &s.CacheBytes
		case inactive:
			dst = &s.InactiveFileBytes
		default:
			continue
		}
		if *dst, err = parseUint(path, string(v)); err != nil {
			return err
		}
	}
	return nil
}

func readPids(dir string, s *Stats) error {
	var err error
	if s.Pids, err = readUint(filepath.Join(dir, "pids.current")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if s.PidsLimit, err = readUint(filepath.Join(dir, "pids.max")); err != nil {
		return err
	}
	return nil
}

// readUint parses a file holding one unsigned number; "max" is 0
// (unlimited).
func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read cgroup file: %w", err)
	}
	return parseUint(path, strings.TrimSpace(string(b)))
}

func parseUint(path, v string) (uint64, error) {
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// readKey returns the value of key in a flat-keyed file ("key value" lines).
// A missing key is 0.
func readKey(path, key string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read cgroup file: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			return parseUint(path, strings.TrimSpace(v))
		}
	}
	return 0, nil
}

// Dirs returns the existing directories of the cgroup rel: root/rel on a
// unified host, root/<hierarchy>/rel for every hierarchy otherwise
// (including the cgroup2 one of a hybrid host). Hierarchies reached through
// symbolic links (cpuacct -> cpu,cpuacct) are listed once.
func Dirs(root, rel string) ([]string, error) {
	if DetectMode(root) == Unified {
		d := filepath.Join(root, rel)
		if _, err := os.Stat(d); err != nil {
			return nil, nil
		}
		return []string{d}, nil
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list cgroup hierarchies: %w", err)
	}
	var dirs []string
	for _, e := range ents {
		if !e.IsDir() { // symbolic links to combined hierarchies are skipped
			continue
		}
		d := filepath.Join(root, e.Name(), rel)
		if _, err := os.Stat(d); err == nil {
			dirs = append(dirs, d)
		}
	}
	return dirs, nil
}

// Remove removes every directory of the cgroup rel, children first. The
// cgroup must hold no process. A missing cgroup is success.
func Remove(root, rel string) error {
	dirs, err := Dirs(root, rel)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		// The common case: a leaf cgroup, removed with one rmdir.
		if err := unix.Rmdir(d); err == nil || errors.Is(err, unix.ENOENT) {
			continue
		}
		var all []string
		_ = filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err == nil && e.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		slices.Reverse(all) // children before parents
		for _, p := range all {
			if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// RemoveEmpty removes the directories of the cgroup rel that hold no child
// cgroup and no process; a directory that still holds one stays (rmdir
// fails with EBUSY). A missing cgroup is success.
func RemoveEmpty(root, rel string) error {
	dirs, err := Dirs(root, rel)
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.ENOTEMPTY) {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}

// DropCharges reclaims the memory still charged to the cgroup rel once its
// processes are gone, so that removing it frees it at once. What stays
// charged to an empty memory cgroup is mostly page cache its processes
// read first and others share (an image's lower layer files, the agent's
// binary): the kernel keeps such pages charged to the removed cgroup,
// which then lingers as a dying cgroup, with its per-CPU statistics and
// slab, until memory pressure reclaims them; on a host with free memory
// that is never. v1 writes memory.force_empty (which refuses while
// processes remain); v2 asks memory.reclaim for what memory.current
// says. A missing cgroup or memory controller is success; so is a
// reclaim that could not take everything (the removal then goes on, as
// before).
func DropCharges(root, rel string) error {
	if DetectMode(root) == Legacy {
		err := os.WriteFile(filepath.Join(root, "memory", rel, "memory.force_empty"), []byte("0"), 0)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("drop memory charges: %w", err)
	}
	dir := filepath.Join(root, rel)
	cur, err := readUint(filepath.Join(dir, "memory.current"))
	if errors.Is(err, fs.ErrNotExist) || (err == nil && cur == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drop memory charges: %w", err)
	}
	err = os.WriteFile(filepath.Join(dir, "memory.reclaim"), []byte(strconv.FormatUint(cur, 10)), 0)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.EAGAIN) {
		return nil
	}
	return fmt.Errorf("drop memory charges: %w", err)
}
