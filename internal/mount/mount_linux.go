package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

var flagOptions = map[string]struct {
	clear bool
	flag  uintptr
}{
	"ro":          {false, unix.MS_RDONLY},
	"rw":          {true, unix.MS_RDONLY},
	"nosuid":      {false, unix.MS_NOSUID},
	"nodev":       {false, unix.MS_NODEV},
	"noexec":      {false, unix.MS_NOEXEC},
	"noatime":     {false, unix.MS_NOATIME},
	"relatime":    {false, unix.MS_RELATIME},
	"bind":        {false, unix.MS_BIND},
	"rbind":       {false, unix.MS_BIND | unix.MS_REC},
	"remount":     {false, unix.MS_REMOUNT},
	"private":     {false, unix.MS_PRIVATE},
	"rprivate":    {false, unix.MS_PRIVATE | unix.MS_REC},
	"slave":       {false, unix.MS_SLAVE},
	"rslave":      {false, unix.MS_SLAVE | unix.MS_REC},
	"sync":        {false, unix.MS_SYNCHRONOUS},
	"strictatime": {false, unix.MS_STRICTATIME},
}

// loopOptions are the options that say how a file is attached to a loop
// device; they are not passed to mount(2).
type loopOptions struct {
	attach   bool // "loop": Source is a file to attach to a free loop device
	directIO bool // "direct-io": the device reads and writes the file with O_DIRECT
}

// parseOptions splits options into mount flags, the data string and the
// loop device options.
func parseOptions(opts []string) (flags uintptr, data string, loop loopOptions) {
	var d []string
	for _, o := range opts {
		switch o {
		case "loop":
			loop.attach = true
			continue
		case "direct-io":
			loop.directIO = true
			continue
		}
		if f, ok := flagOptions[o]; ok {
			if f.clear {
				flags &^= f.flag
			} else {
				flags |= f.flag
			}
			continue
		}
		d = append(d, o)
	}
	return flags, strings.Join(d, ","), loop
}

// All mounts ms in order; a Mount with an empty Target goes on root. On
// error the mounts already made are undone.
func All(ms []Mount, root string) error {
	for i, m := range ms {
		target := m.Target
		if target == "" {
			target = root
		}
		if err := m.Mount(target); err != nil {
			for j := i - 1; j >= 0; j-- {
				t := ms[j].Target
				if t == "" {
					t = root
				}
				_ = Unmount(t)
			}
			return err
		}
	}
	return nil
}

// Mount performs m on target. Bind mounts with "ro" and other flags are
// remounted after the bind, because MS_BIND ignores them.
func (m Mount) Mount(target string) error {
	flags, data, loop := parseOptions(m.Options)
	source := m.Source
	if loop.directIO && !loop.attach {
		return fmt.Errorf("mount %s on %s: option direct-io needs option loop", m.Source, target)
	}
	if loop.attach {
		dev, err := attachLoop(source, flags&unix.MS_RDONLY != 0, loop.directIO)
		if err != nil {
			return fmt.Errorf("mount %s on %s: %w", m.Source, target, err)
		}
		// The device was attached with LO_FLAGS_AUTOCLEAR: it detaches when
		// the mount goes away, and closing our fd here is what lets it.
		defer dev.Close()
		source = dev.Name()
	}
	if err := unix.Mount(source, target, m.Type, flags, data); err != nil {
		if len(data) > 256 {
			data = data[:256] + "..."
		}
		return fmt.Errorf("mount %s (%s, %q) on %s: %w", m.Source, m.Type, data, target, err)
	}
	const bindRemountable = unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if flags&unix.MS_BIND != 0 && flags&bindRemountable != 0 {
		rf := unix.MS_BIND | unix.MS_REMOUNT | flags&bindRemountable
		if err := unix.Mount("", target, "", rf, ""); err != nil {
			_ = unix.Unmount(target, unix.MNT_DETACH)
			return fmt.Errorf("remount %s read-only: %w", target, err)
		}
	}
	return nil
}

// Unmount unmounts target, lazily if it is busy; a target that is not a mount
// point or does not exist is success.
func Unmount(target string) error {
	for range 50 {
		err := unix.Unmount(target, 0)
		switch {
		case err == nil:
			continue // stacked mounts: unmount until nothing is left
		case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.EBUSY):
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", target, err)
			}
			return nil
		default:
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmount %s: too many stacked mounts", target)
}

// attachLoop attaches file to a free loop device with autoclear set and
// returns the open device. With directIO the device reads and writes file
// with O_DIRECT, so that its data is not cached a second time in file's
// page cache; where file's file system cannot (no O_DIRECT, or a sector
// larger than the device's block size), the kernel attaches it buffered.
func attachLoop(file string, readonly, directIO bool) (*os.File, error) {
	mode := os.O_RDWR
	if readonly {
		mode = os.O_RDONLY
	}
	back, err := os.OpenFile(file, mode|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open loop backing file: %w", err)
	}
	defer back.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/loop-control: %w", err)
	}
	defer ctl.Close()
	for range 32 { // another process may take the free device first
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return nil, fmt.Errorf("find a free loop device: %w", err)
		}
		dev, err := os.OpenFile(fmt.Sprintf("/dev/loop%d", n), mode|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) {
			continue // removed meanwhile (TrimLoops): ask for another
		}
		if err != nil {
			return nil, fmt.Errorf("open loop device: %w", err)
		}
		cfg := unix.LoopConfig{Fd: uint32(back.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		if readonly {
			cfg.Info.Flags |= unix.LO_FLAGS_READ_ONLY
		}
		if directIO {
			cfg.Info.Flags |= unix.LO_FLAGS_DIRECT_IO
		}
		copy(cfg.Info.File_name[:], file)
		err = unix.IoctlLoopConfigure(int(dev.Fd()), &cfg)
		if err == nil {
			return dev, nil
		}
		dev.Close()
		if !errors.Is(err, unix.EBUSY) {
			return nil, fmt.Errorf("configure loop device: %w", err)
		}
	}
	return nil, errors.New("configure loop device: every free device was taken by others")
}

// Under returns the mount points listed in the mountinfo file at path that are
// dir or lie beneath it, in the order they were mounted; unmount them last
// first. Mount points are unescaped (mountinfo writes a space as
// \040).
func Under(mountinfo, dir string) ([]string, error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return nil, err
	}
	dir = filepath.Clean(dir)
	var out []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := unescapeMountinfo(f[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			out = append(out, p)
		}
	}
	return out, nil
}

// At reports the source and type of the topmost mount on dir in the
// mountinfo file at path (ok is false when nothing is mounted there).
func At(mountinfo, dir string) (source, fstype string, ok bool, err error) {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return "", "", false, err
	}
	for line := range strings.Lines(string(b)) {
		// id parent major:minor root mountpoint options [optional...] - type source superoptions
		f := strings.Fields(line)
		if len(f) < 5 || unescapeMountinfo(f[4]) != dir {
			continue
		}
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				fstype, source, ok = f[i+1], unescapeMountinfo(f[i+2]), true
				break
			}
		}
	}
	return source, fstype, ok, nil
}

// unescapeMountinfo undoes the octal escapes (\040, \011, \012, \134) the
// kernel writes for space, tab, newline and backslash.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// TrimLoops removes the free loop devices (attached to no file) beyond the
// keep lowest-numbered free ones, and returns how many it removed. A loop
// device stays in the kernel after its file is detached, with its disk,
// queue and workqueue (slab and per-CPU memory) for reuse: a host that
// once ran a thousand boxes at a time keeps a thousand of them. The kernel
// hands out the lowest free number first, so the devices kept are the
// ones the next attaches take, here and in other programs; one that is
// being taken meanwhile (open) is busy and stays, and attachLoop asks for
// another when the one it was given is removed before it opens it.
func TrimLoops(keep int) (int, error) {
	return trimLoops("/sys/block", "/dev/loop-control", keep)
}

func trimLoops(sysBlock, control string, keep int) (int, error) {
	free, err := freeLoops(sysBlock)
	if err != nil {
		return 0, fmt.Errorf("trim loop devices: %w", err)
	}
	if len(free) <= keep {
		return 0, nil
	}
	ctl, err := os.OpenFile(control, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("trim loop devices: %w", err)
	}
	defer ctl.Close()
	removed := 0
	for _, n := range free[keep:] {
		// EBUSY: attached or opened since the listing; it stays.
		if err := unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_REMOVE, n); err == nil {
			removed++
		}
	}
	return removed, nil
}

// freeLoops returns the numbers of the loop devices listed in sysBlock
// that are attached to no file, lowest first.
func freeLoops(sysBlock string) ([]int, error) {
	ents, err := os.ReadDir(sysBlock)
	if err != nil {
		return nil, err
	}
	var free []int
	for _, e := range ents {
		num, ok := strings.CutPrefix(e.Name(), "loop")
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 0 {
			continue
		}
		if _, err := os.Stat(filepath.Join(sysBlock, e.Name(), "loop", "backing_file")); err == nil {
			continue // attached
		}
		free = append(free, n)
	}
	slices.Sort(free)
	return free, nil
}
