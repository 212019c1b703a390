package sniff

import (
	"net"
	"sync"
)

// Replay returns a net.Conn that yields prefix before reading from c, so a
// sniffed connection can be handed to crypto/tls, net/http or an upstream
// copy loop as if nothing had been read. Replay keeps prefix without
// copying it. Writes, Close and deadlines go straight to c; deadlines do not
// apply to the prefix. When c has a CloseWrite method (*net.TCPConn,
// *net.UnixConn) the returned conn has one too.
func Replay(c net.Conn, prefix []byte) net.Conn {
	if len(prefix) == 0 {
		return c
	}
	rc := &replayConn{Conn: c, prefix: prefix}
	if _, ok := c.(closeWriter); ok {
		return &replayHalfCloser{rc}
	}
	return rc
}

type closeWriter interface {
	CloseWrite() error
}

type replayConn struct {
	net.Conn

	mu     sync.Mutex
	prefix []byte // guarded by mu
}

func (c *replayConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

type replayHalfCloser struct {
	*replayConn
}

func (c *replayHalfCloser) CloseWrite() error {
	return c.Conn.(closeWriter).CloseWrite() // Replay checked it

}
