package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/osthread"
	"github.com/corral-sandbox/corral/internal/userns"
)

// AgentSocketName is the abstract unix socket ("@corral-agent") on which the
// agent listens inside its sandbox's network namespace. See Runtime for why
// it is abstract.
const AgentSocketName = "corral-agent"

// netnsFile is the bind mount of the sandbox's network namespace in its
// directory.
const netnsFile = "netns"

// usernsFile is the bind mount of the user namespace that owns the network
// namespace of a sandbox with a user namespace (see newUserNetNS).
const usernsFile = "userns"

// newNetNS makes a network namespace with its loopback up, bind-mounts it
// at p in the daemon's mount namespace (so that it lives, and can be
// joined, until removeNetNS), and with listen returns a listening socket
// bound to "@corral-agent" in it.
//
// The work runs on an OS thread (see osthread.Locked) that unshares its
// network namespace and then returns to the daemon's; if it cannot return,
// the thread ends with its goroutine.
func newNetNS(p string, listen bool) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", p, err)
	}
	f.Close()
	type result struct {
		l   *os.File
		err error
	}
	ch := make(chan result, 1)
	osthread.Locked(func() bool {
		orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- result{err: fmt.Errorf("open own network namespace: %w", err)}
			return true
		}
		defer unix.Close(orig)
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("unshare network namespace: %w", err)}
			return true
		}
		l, err := setupNetNS(p, listen)
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			if l != nil {
				l.Close()
			}
			_ = unix.Unmount(p, unix.MNT_DETACH)
			ch <- result{err: fmt.Errorf("return to own network namespace: %w", serr)}
			return false // the thread ends with its goroutine
		}
		ch <- result{l, err}
		return true
	})
	r := <-ch
	return r.l, r.err
}

// newUserNetNS makes, for a sandbox with a user namespace, a user namespace
// with the box's mapping u and a network namespace that it owns, bound at
// up and p in the daemon's mount namespace; the box joins both (see
// buildSpec). So the box's root, whose capabilities are over its own user
// namespace, owns its network namespace as it would one the runtime made:
// the kernel lets it mount a sysfs of its own there, and CRIU, working in
// the box's user namespace, can enter it. The daemon, root in the host's
// user namespace, keeps every capability over both: it sets up the
// loopback, the agent's listening socket (with listen) and later the
// nftables rules, address and routes (internal/network) as before.
//
// The namespaces are made by a short-lived child process (userns.Hold),
// as the box's base host uid, so that the box's per-user limits are not
// host root's: a Go process cannot unshare a user namespace.
func newUserNetNS(p, up string, u userns.Range, listen bool) (l *os.File, retErr error) {
	for _, f := range []string{p, up} {
		fl, err := os.OpenFile(f, os.O_RDONLY|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o400)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", f, err)
		}
		fl.Close()
	}
	h, err := userns.Hold(u, unix.CLONE_NEWNET)
	if err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			_ = mount.Unmount(p)
			_ = mount.Unmount(up)
		}
	}()
	err = unix.Mount(h.NSPath("user"), up, "", unix.MS_BIND, "")
	if err != nil {
		err = fmt.Errorf("bind user namespace to %s: %w", up, err)
	} else if err = unix.Mount(h.NSPath("net"), p, "", unix.MS_BIND, ""); err != nil {
		err = fmt.Errorf("bind network namespace to %s: %w", p, err)
	}
	if rerr := h.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer f.Close()
	err = osthread.InNamespace(int(f.Fd()), unix.CLONE_NEWNET, func() error {
		if err := loopbackUp(); err != nil {
			return err
		}
		if listen {
			var err error
			l, err = listenAbstract()
			return err
		}
		return nil
	})
	if err != nil {
		if l != nil {
			l.Close()
		}
		return nil, err
	}
	return l, nil
}

// setupNetNS runs in the new namespace: loopback up, bind mount, socket.
func setupNetNS(p string, listen bool) (*os.File, error) {
	if err := loopbackUp(); err != nil {
		return nil, err
	}
	if err := unix.Mount("/proc/thread-self/ns/net", p, "", unix.MS_BIND, ""); err != nil {
		return nil, fmt.Errorf("bind network namespace to %s: %w", p, err)
	}
	if !listen {
		return nil, nil
	}
	l, err := listenAbstract()
	if err != nil {
		_ = unix.Unmount(p, unix.MNT_DETACH)
		return nil, err
	}
	return l, nil
}

// loopbackUp sets the flag IFF_UP on "lo" of the calling thread's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}

// listenAbstract makes a listening unix socket bound to "@corral-agent" in
// the calling thread's network namespace.
func listenAbstract() (*os.File, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	f := os.NewFile(uintptr(fd), "@"+AgentSocketName)
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + AgentSocketName}); err != nil {
		f.Close()
		return nil, fmt.Errorf("bind agent socket: %w", err)
	}
	if err := unix.Listen(fd, 128); err != nil {
		f.Close()
		return nil, fmt.Errorf("listen on agent socket: %w", err)
	}
	return f, nil
}

// exposeNetNS makes the network namespace bound at p (in the daemon's
// mount namespace) visible at the same path in the runtime thread's mount
// namespace, where the OCI runtime opens it. Mounts propagate there by
// themselves only when the host's mounts are shared; after a daemon
// restart the thread's namespace is new and has none.
func (r *Runtime) exposeNetNS(p string) error { return r.exposeNSOf(p, unix.CLONE_NEWNET) }

// exposeNSOf is exposeNetNS for a namespace of type nstype
// (unix.CLONE_NEWNET or CLONE_NEWUSER).
func (r *Runtime) exposeNSOf(p string, nstype int) error {
	f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open namespace: %w", err)
	}
	defer f.Close()
	if t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || t != nstype {
		return fmt.Errorf("%s is not a namespace of type %#x", p, nstype)
	}
	return r.ns.Do(func() error {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && st.Type == unix.NSFS_MAGIC {
			return nil
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind namespace to %s in the runtime's mount namespace: %w", p, err)
		}
		return nil
	})
}

// removeNetNS unmounts the network (or user) namespace at p in both mount
// namespaces and removes the file; a missing one is success.
func (r *Runtime) removeNetNS(p string) error {
	if err := mount.Unmount(p); err != nil {
		return err
	}
	if err := r.ns.Do(func() error { return mount.Unmount(p) }); err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// PrepareNS makes the network namespace of a future sandbox under key, in
// a user namespace with range u when u is set, with the agent's listening
// socket, as Create would (see sandbox.NSPreparer): a Create whose
// Spec.Premade is key takes them over (takeNS); Delete(key) removes them.
// gVisor makes its namespace at start: ErrNotImplemented.
func (r *Runtime) PrepareNS(ctx context.Context, key string, u *userns.Range) (retErr error) {
	if r.runsc != nil {
		return fmt.Errorf("prepare namespaces: %w", errdefs.ErrNotImplemented)
	}
	if err := identifiers.Validate("namespace key", key); err != nil {
		return err
	}
	// Made under a temporary name and renamed whole: key's directory
	// exists only once everything in it does (what a crash leaves under
	// the temporary name, List reports too).
	tmp := key + ".new"
	cu, err := r.newDir(ctx, tmp)
	if err != nil {
		return err
	}
	defer cu.Clean()
	l, err := r.makeNetNS(tmp, u, true)
	if err != nil {
		return fmt.Errorf("prepare namespaces %s: %w", key, err)
	}
	if err := unix.Renameat2(unix.AT_FDCWD, r.Dir(tmp), unix.AT_FDCWD, r.Dir(key), unix.RENAME_NOREPLACE); err != nil {
		l.Close()
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("prepare namespaces %s: %w", key, errdefs.ErrAlreadyExists)
		}
		return fmt.Errorf("prepare namespaces %s: %w", key, err)
	}
	r.mu.Lock()
	r.listeners[key] = l
	r.mu.Unlock()
	cu.Release()
	return nil
}

// takeNS makes the namespaces prepared under key sandbox id's: it renames
// key's directory (the namespaces' bind mounts move with it, in the
// daemon's and the runtime thread's mount namespaces alike) and hands the
// agent's socket over. It returns the cleanup that deletes id, as newDir.
func (r *Runtime) takeNS(ctx context.Context, key, id string) (*cleanup.Cleanup, error) {
	if err := identifiers.Validate("namespace key", key); err != nil {
		return nil, err
	}
	r.mu.Lock()
	l := r.listeners[key]
	r.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("create %s: no namespaces prepared under %s: %w", id, key, errdefs.ErrNotFound)
	}
	// RENAME_NOREPLACE: an existing sandbox id is never replaced.
	if err := unix.Renameat2(unix.AT_FDCWD, r.Dir(key), unix.AT_FDCWD, r.Dir(id), unix.RENAME_NOREPLACE); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("create %s: take namespaces %s: %w", id, key, err)
	}
	r.mu.Lock()
	delete(r.listeners, key)
	r.listeners[id] = l
	r.mu.Unlock()
	cu := cleanup.Make(func() {
		cleanup.Do(ctx, func(ctx context.Context) {
			if err := r.Delete(ctx, id); err != nil {
				log.G(ctx).Warn("roll back sandbox", "sandbox", id, "error", err)
			}
		})
	})
	return &cu, nil
}
