package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// sockDiag looks up one TCP socket of a box by its addresses with a
// NETLINK_SOCK_DIAG request *without* NLM_F_DUMP: the kernel then finds the
// socket in its hash table (inet_diag_find_one_icsk) instead of walking
// every socket of the host, which costs milliseconds on a large machine
// (as /proc/net/tcp and dump-based libraries do).
type sockDiag struct {
	mu  sync.Mutex
	fd  int
	seq uint32
}

// newSockDiag opens the netlink socket inside the namespace at nsPath (a
// socket queries the namespace it was made in).
func newSockDiag(nsPath string) (*sockDiag, error) {
	d := &sockDiag{fd: -1}
	err := inNetNS(nsPath, func(netns.NsHandle) error {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
		if err != nil {
			return err
		}
		d.fd = fd
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sock_diag in the box's namespace: %w", err)
	}
	tv := unix.Timeval{Sec: 1}
	unix.SetsockoptTimeval(d.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return d, nil
}

func (d *sockDiag) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil
	}
	err := unix.Close(d.fd)
	d.fd = -1
	return err
}

// inode returns the inode of the IPv4 TCP socket whose local address is
// local and remote address remote.
func (d *sockDiag) inode(local, remote netip.AddrPort) (uint32, error) {
	return d.lookup(unix.IPPROTO_TCP, local, remote)
}

// inodeUDP returns the inode of the IPv4 UDP socket that would receive a
// datagram from remote to local: the socket connected to remote, or one
// bound to local's port and not connected (a resolver that does not
// connect its socket).
func (d *sockDiag) inodeUDP(local, remote netip.AddrPort) (uint32, error) {
	// The kernel's UDP lookup (udp_dump_one) takes the request's source
	// as the datagram's source, unlike TCP's: the addresses are swapped.
	return d.lookup(unix.IPPROTO_UDP, remote, local)
}

// lookup asks for the socket of protocol proto with the request's source
// src and destination dst.
func (d *sockDiag) lookup(proto uint8, local, remote netip.AddrPort) (uint32, error) {
	if !local.Addr().Is4() || !remote.Addr().Is4() {
		return 0, errors.New("sock_diag: IPv4 only")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return 0, errors.New("sock_diag: closed")
	}
	d.seq++
	const hdr, reqLen = 16, 56
	msg := make([]byte, hdr+reqLen)
	le := binary.NativeEndian
	le.PutUint32(msg[0:], uint32(len(msg)))
	le.PutUint16(msg[4:], unix.SOCK_DIAG_BY_FAMILY)
	le.PutUint16(msg[6:], unix.NLM_F_REQUEST)
	le.PutUint32(msg[8:], d.seq)
	r := msg[hdr:]
	r[0] = unix.AF_INET
	r[1] = proto
	le.PutUint32(r[4:], 0xffffffff) // every state
	id := r[8:]
	binary.BigEndian.PutUint16(id[0:], local.Port())
	binary.BigEndian.PutUint16(id[2:], remote.Port())
	l4, r4 := local.Addr().As4(), remote.Addr().As4()
	copy(id[4:], l4[:])
	copy(id[20:], r4[:])
	le.PutUint32(id[40:], 0xffffffff) // INET_DIAG_NOCOOKIE
	le.PutUint32(id[44:], 0xffffffff)
	if err := unix.Sendto(d.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(d.fd, buf, 0)
		if err != nil {
			return 0, err
		}
		for b := buf[:n]; len(b) >= hdr; {
			l := int(le.Uint32(b[0:]))
			if l < hdr || l > len(b) {
				return 0, errors.New("sock_diag: short message")
			}
			typ, seq := le.Uint16(b[4:]), le.Uint32(b[8:])
			body := b[hdr:l]
			b = b[(l+3)&^3:]
			if seq != d.seq {
				continue // an answer to an earlier, timed-out request
			}
			switch typ {
			case unix.NLMSG_ERROR:
				if len(body) >= 4 {
					if e := int32(le.Uint32(body)); e != 0 {
						return 0, unix.Errno(-e)
					}
				}
				return 0, errors.New("sock_diag: not found")
			case unix.SOCK_DIAG_BY_FAMILY:
				// struct inet_diag_msg: 4 bytes, id (48), expires, rqueue,
				// wqueue, uid, inode.
				if len(body) < 72 {
					return 0, errors.New("sock_diag: short answer")
				}
				return le.Uint32(body[68:]), nil
			}
			if len(b) == 0 {
				break
			}
		}
	}
}
