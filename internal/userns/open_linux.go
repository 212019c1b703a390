package userns

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/agentbin"
)

// holdEnv makes a process started by Hold wait, in its new namespaces,
// until its stdin closes (see init).
const holdEnv = "_CORRAL_USERNS_HOLD"

// ownerEnv makes a process started by Hold, running as the box's base
// host uid, start the holder in new namespaces of the types it gives
// (CLONE_NEWUSER and more, in decimal), print the holder's pid and wait
// until its stdin closes (see init).
const ownerEnv = "_CORRAL_USERNS_OWNER"

// init is the children of Hold where this build embeds no box init (see
// hold): a Go process cannot unshare a user namespace (it has threads), so
// Hold starts this binary again, as the box's base host uid (the owner),
// which starts it once more in the new namespaces (the holder). Any
// program that links this package can be those children.
func init() {
	switch {
	case os.Getenv(holdEnv) == "1":
		waitStdin()
		os.Exit(0)
	case os.Getenv(ownerEnv) != "":
		if err := owner(os.Getenv(ownerEnv)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// waitStdin returns when stdin closes.
func waitStdin() {
	var b [1]byte
	for {
		if _, err := os.Stdin.Read(b[:]); err != nil {
			return
		}
	}
}

// owner is the middle child of Hold: it starts the holder in new
// namespaces of the types in flags, prints its pid and keeps it until
// stdin closes. Running as the box's base host uid, it makes the new user
// namespace that uid's: the kernel charges the per-user counts of every
// level above a user namespace (such as inotify instances) to its
// owner, so each box is charged to its own uid there, not to host root.
func owner(flags string) error {
	fl, err := strconv.ParseUint(flags, 10, 64)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", ownerEnv, flags, err)
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"corral-userns"}
	cmd.Env = []string{holdEnv + "=1"}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: uintptr(fl),
		Pdeathsig:  syscall.SIGKILL,
	}
	w, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start holder: %w", err)
	}
	fmt.Printf("%d\n", cmd.Process.Pid)
	os.Stdout.Close()
	waitStdin()
	w.Close()
	return cmd.Wait()
}

// Open returns a user namespace whose uids and gids 0 to r.Size-1 are host
// ids r.HostID and up, for mount_setattr(MOUNT_ATTR_IDMAP). The caller
// closes it; the namespace lives as long as the file or a mount using it.
func Open(r Range) (*os.File, error) {
	h, err := Hold(r, 0)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(h.NSPath("user"))
	if rerr := h.Release(); err == nil && rerr != nil {
		f.Close()
		return nil, rerr
	}
	if err != nil {
		return nil, fmt.Errorf("user namespace %s: %w", r, err)
	}
	return f, nil
}

// Holder is a process that holds a new user namespace with a box's
// mapping (and the namespaces made with it, see Hold) until Release.
type Holder struct {
	r      Range
	cmd    *exec.Cmd
	w      io.Closer
	pid    int
	stderr *bytes.Buffer
}

// Hold starts a process in a new user namespace whose uids and gids 0 to
// r.Size-1 are host ids r.HostID and up, and in new namespaces of the
// types in flags (such as unix.CLONE_NEWNET), which that user namespace
// owns. The process waits until Release; open or bind its namespaces
// (NSPath) before, as they live only as long as something holds them.
//
// The user namespace is made by host uid r.HostID (the process that
// unshares it, the embedded box init's holder mode or the daemon's binary
// as the holder's parent, runs as it, without supplementary groups), so
// that it is that uid's:
// the kernel charges per-user limits such as fs.inotify.max_user_instances
// at every level of user namespaces, above a box's to the uid that made
// it, and a box must not use up host root's. Making a user namespace
// needs no privilege, and the namespaces made with it are its own; the
// caller, root, writes the mapping.
//
// Where r.HostID may not do so (a host that confines unprivileged user
// namespaces, such as AppArmor's restrict_unprivileged_userns, or a
// daemon binary that only root may run), root makes them, and the box
// shares those limits with host root.
func Hold(r Range, flags uintptr) (*Holder, error) {
	if r.Size == 0 {
		return nil, fmt.Errorf("user namespace %s: empty range", r)
	}
	h, err := hold(r, flags, &syscall.Credential{Uid: r.HostID, Gid: r.HostID, Groups: []uint32{}})
	if err == nil {
		return h, nil
	}
	h, rerr := hold(r, flags, nil)
	if rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	rootOwnedOnce.Do(func() {
		// Not silent: the boxes keep their own ids, but their per-uid
		// kernel counts (inotify) are host root's again.
		slog.Warn("USER NAMESPACES MADE BY HOST ROOT: a box's uid cannot make its own here, so boxes share host root's per-uid kernel limits (inotify); see docs/operations.md, host limits",
			"error", err)
	})
	return h, nil
}

// rootOwnedOnce warns once that Hold fell back to root-owned namespaces.
var rootOwnedOnce sync.Once

// hold is Hold, with the user namespace made by cred (nil: the caller's):
// by the box init's holder mode where this build embeds one, else (or
// where that fails and the daemon's binary does not) by the daemon's
// binary.
func hold(r Range, flags uintptr, cred *syscall.Credential) (*Holder, error) {
	f := helperFile()
	if f == nil {
		return holdWith(r, flags, cred, nil)
	}
	h, err := holdWith(r, flags, cred, f)
	if err == nil {
		return h, nil
	}
	h, gerr := holdWith(r, flags, cred, nil)
	if gerr != nil {
		return nil, errors.Join(err, gerr)
	}
	helperFailed(err)
	return h, nil
}

// helper is the box init (cmd/corral-init) in a memfd, which Hold runs
// with --userns-hold: one small C process makes and holds the namespaces
// where the daemon's binary takes two Go processes. It is nil where this
// build embeds no init (a plain go build) or it cannot be run.
var helper struct {
	sync.Mutex
	loaded bool
	f      *os.File
}

// helperBin is the box init to run as the holder (a variable for tests).
var helperBin = agentbin.EmbeddedInit

// helperFile returns the memfd of the box init, loading it on first use,
// or nil.
func helperFile() *os.File {
	helper.Lock()
	defer helper.Unlock()
	if !helper.loaded {
		helper.loaded = true
		if bin := helperBin(); len(bin) > 0 {
			f, err := loadHelper(bin)
			if err != nil {
				slog.Warn("user namespaces: not using the embedded corral-init to make them, but the daemon's binary", "error", err)
			}
			helper.f = f
		}
	}
	return helper.f
}

// helperFailed stops using the helper after it failed where the daemon's
// binary did not. The memfd stays open: a concurrent Hold may be passing
// it to its child.
func helperFailed(err error) {
	helper.Lock()
	defer helper.Unlock()
	if helper.f != nil {
		helper.f = nil
		slog.Warn("user namespaces: the embedded corral-init cannot make them here, the daemon's binary does", "error", err)
	}
}

// loadHelper copies bin into a sealed, executable memfd.
func loadHelper(bin []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("corral-userns", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) { // a kernel before MFD_EXEC
		fd, err = unix.MemfdCreate("corral-userns", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "corral-userns")
	if _, err := f.Write(bin); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("memfd: seal: %w", err)
	}
	return f, nil
}

// holdWith is hold, by the helper in memfd f, or by the daemon's binary
// where f is nil.
func holdWith(r Range, flags uintptr, cred *syscall.Credential, f *os.File) (*Holder, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"corral-userns-owner"}
	cmd.Env = []string{fmt.Sprintf("%s=%d", ownerEnv, unix.CLONE_NEWUSER|flags)}
	if f != nil {
		// The child runs its fd 3, which it may open whatever the mode
		// of the directories above the daemon's files.
		cmd = exec.Command("/proc/self/fd/3")
		cmd.Args = []string{"corral-userns", "--userns-hold", fmt.Sprint(unix.CLONE_NEWUSER | flags)}
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{f}
	}
	stderr := new(bytes.Buffer)
	cmd.Stderr = stderr
	// No parent-death signal: the kernel sends it when the OS thread that
	// started the child ends, and Go ends threads whose goroutine exits
	// locked (namespace work), which killed holders of concurrent creates.
	// The owner exits when its stdin closes, which a dead daemon's does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	w, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("user namespace %s: %w", r, err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("user namespace %s: %w", r, err)
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("user namespace %s: start holder: %w", r, err)
	}
	h := &Holder{r: r, cmd: cmd, w: w, stderr: stderr}
	b, rerr := io.ReadAll(out)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if rerr != nil || err != nil || pid <= 0 {
		err := h.Release()
		return nil, fmt.Errorf("user namespace %s: start holder: %w", r, errors.Join(rerr, err, fmt.Errorf("no pid in %q", b)))
	}
	h.pid = pid
	// Boxes join it: their processes set their supplementary groups (the
	// agent runs commands as image users), so setgroups stays "allow".
	m := fmt.Sprintf("0 %d %d\n", r.HostID, r.Size)
	for _, f := range []string{"uid_map", "gid_map"} {
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, f), []byte(m), 0); err != nil {
			_ = h.Release()
			return nil, fmt.Errorf("user namespace %s: write %s: %w", r, f, err)
		}
	}
	return h, nil
}

// NSPath is the holder's namespace of type name ("user", "net"...) in
// /proc.
func (h *Holder) NSPath(name string) string {
	return fmt.Sprintf("/proc/%d/ns/%s", h.pid, name)
}

// Release ends the holder and waits for it.
func (h *Holder) Release() error {
	h.w.Close()
	if err := h.cmd.Wait(); err != nil {
		if msg := strings.TrimSpace(h.stderr.String()); msg != "" {
			return fmt.Errorf("user namespace %s: holder: %w: %s", h.r, err, msg)
		}
		return fmt.Errorf("user namespace %s: holder: %w", h.r, err)
	}
	return nil
}
