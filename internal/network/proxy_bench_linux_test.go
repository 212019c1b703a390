package network

import (
	"context"
	"io"
	"net"
	"testing"

	"github.com/corral-sandbox/corral/internal/netpolicy"
)

// Egress proxy cost: a box's connection goes box -> (redirect) -> the
// daemon's socket in the box -> policy -> a new connection from the host.
// The peers are the same client and server with a direct connection on the
// host. Compare with:
//
//	go test -run XXX -bench 'Connect|Throughput' ./internal/network/
//
// ConnectDirect/ConnectProxied is the added connect latency (time to the
// first byte back); ThroughputDirect/ThroughputProxied the copy cost.

// sink is a TCP server that answers "ok" to each connection, then discards
// what it reads (and counts nothing: the client side measures).
func sink(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.Write([]byte("ok"))
				io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln
}

func proxiedBox(b *testing.B, upstream string) (dial func() (net.Conn, error)) {
	ns := boxNetNSB(b)
	svc, err := New(Config{
		StateDir: b.TempDir(),
		Resolver: mapResolver{},
		Guard:    testGuard{},
		Dial: func(ctx context.Context, nw, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, nw, upstream)
		},
		Limits: netpolicy.Limits{ConnectionsPerMinute: 1 << 30},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { svc.Close() })
	if err := svc.Attach(context.Background(), "bench", ns, nsPid(ns), netpolicy.Settings{Mode: netpolicy.ModeFull}); err != nil {
		b.Fatal(err)
	}
	return func() (net.Conn, error) { return DialInNS(ns, "tcp4", "203.0.113.1:9000") }
}

func connectOnce(b *testing.B, dial func() (net.Conn, error)) {
	c, err := dial()
	if err != nil {
		b.Fatal(err)
	}
	// An unknown protocol: the proxy decides by address after its short
	// wait for a first byte, so send one at once, as clients do.
	c.Write([]byte{'x'})
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil {
		b.Fatal(err)
	}
	c.Close()
}

func BenchmarkConnectDirect(b *testing.B) {
	ln := sink(b)
	defer ln.Close()
	dial := func() (net.Conn, error) { return net.Dial("tcp4", ln.Addr().String()) }
	for b.Loop() {
		connectOnce(b, dial)
	}
}

func BenchmarkConnectProxied(b *testing.B) {
	ln := sink(b)
	defer ln.Close()
	dial := proxiedBox(b, ln.Addr().String())
	for b.Loop() {
		connectOnce(b, dial)
	}
}

func throughput(b *testing.B, c net.Conn) {
	buf := make([]byte, 1<<20)
	io.ReadFull(c, make([]byte, 2))
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	c.Close()
}

func BenchmarkThroughputDirect(b *testing.B) {
	ln := sink(b)
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	throughput(b, c)
}

func BenchmarkThroughputProxied(b *testing.B) {
	ln := sink(b)
	defer ln.Close()
	c, err := proxiedBox(b, ln.Addr().String())()
	if err != nil {
		b.Fatal(err)
	}
	c.Write([]byte{'x'})
	throughput(b, c)
}
