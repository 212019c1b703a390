package agent

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"golang.org/x/sys/unix"
)

// guardAbstract wraps ln in outsideOnly when it is an abstract unix socket,
// and returns it unchanged otherwise.
func guardAbstract(ln net.Listener) net.Listener {
	ul, ok := ln.(*net.UnixListener)
	if !ok || !strings.HasPrefix(ln.Addr().String(), "@") {
		return ln
	}
	return &outsideOnly{UnixListener: ul}
}

// outsideOnly accepts connections only from processes outside the agent's
// pid namespace.
//
// An abstract unix socket has no file and so no permissions: every process
// in its network namespace can connect to it, and the box's own processes
// share the box's network namespace with the agent. What tells them apart
// is the peer's pid as the kernel translates it into the agent's pid
// namespace (SO_PEERCRED, taken at connect time): a process of the box (or
// of a namespace nested in it) always has a pid there, while the daemon,
// which reaches the socket by joining the network namespace from the host,
// has none and reads as 0. So a box process can never drive its own agent,
// whatever its privileges inside the box.
type outsideOnly struct {
	*net.UnixListener
}

// Accept returns the next connection from outside the pid namespace; it
// closes the others at once.
func (l *outsideOnly) Accept() (net.Conn, error) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			return nil, err
		}
		pid, err := peerPID(c)
		if err == nil && pid == 0 {
			return c, nil
		}
		c.Close()
	}
}

// errNoPeer is returned when a connection has no peer credentials.
var errNoPeer = errors.New("no peer credentials")

// peerPID returns the pid of c's peer (at connect time) in this process's
// pid namespace, 0 when the peer is outside it.
func peerPID(c *net.UnixConn) (int32, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *unix.Ucred
	var gerr error
	if err := rc.Control(func(fd uintptr) {
		cred, gerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if gerr != nil {
		return -1, fmt.Errorf("SO_PEERCRED: %w", gerr)
	}
	if cred == nil {
		return -1, errNoPeer
	}
	return cred.Pid, nil
}
