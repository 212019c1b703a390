package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/osthread"
)

// dialAbstract connects to the abstract unix socket "@name" of the network
// namespace at nsFile. The dial runs on an OS thread that joins the
// namespace and then returns to its own; if it cannot return, the thread
// ends with its goroutine, so nothing else ever runs in the box's
// namespace by accident.
func dialAbstract(ctx context.Context, nsFile, name string) (net.Conn, error) {
	ns, err := os.OpenFile(nsFile, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("network namespace %s: %w", nsFile, errdefs.ErrNotFound)
		}
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer ns.Close()
	type result struct {
		c   net.Conn
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
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			if errors.Is(err, unix.EINVAL) {
				err = fmt.Errorf("%s is not a network namespace: %w", nsFile, errdefs.ErrNotFound)
			}
			ch <- result{err: fmt.Errorf("join network namespace: %w", err)}
			return true
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", "@"+name)
		if serr := unix.Setns(orig, unix.CLONE_NEWNET); serr != nil {
			if c != nil {
				c.Close()
			}
			ch <- result{err: fmt.Errorf("return to own network namespace: %w", serr)}
			return false // the thread ends with its goroutine
		}
		ch <- result{c, err}
		return true
	})
	r := <-ch
	return r.c, r.err
}
