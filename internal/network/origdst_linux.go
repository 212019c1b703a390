package network

import (
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// originalDst is the destination a redirected connection was made to
// (SO_ORIGINAL_DST, from the box's conntrack table: the accepted socket
// lives in the box's namespace).
func originalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("not a TCP connection")
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		// SO_ORIGINAL_DST returns a sockaddr_in; IPv6Mreq is the 20-byte
		// getsockopt helper x/sys offers for it.
		m, e := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if e != nil {
			serr = e
			return
		}
		port := uint16(m.Multiaddr[2])<<8 | uint16(m.Multiaddr[3])
		ip := netip.AddrFrom4([4]byte{m.Multiaddr[4], m.Multiaddr[5], m.Multiaddr[6], m.Multiaddr[7]})
		ap = netip.AddrPortFrom(ip, port)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return ap, nil
}
