package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

const (
	// maxUDPInFlight bounds the UDP queries being answered at once; a packet
	// that arrives when all slots are busy is dropped and the client retries.
	maxUDPInFlight = 128
	// maxTCPConns bounds the open TCP connections; one more is closed as
	// soon as it is accepted.
	maxTCPConns = 64
	// tcpIdleTimeout closes a TCP connection that sends no complete query
	// for this long.
	tcpIdleTimeout = 10 * time.Second
	// tcpWriteTimeout bounds writing one response.
	tcpWriteTimeout = 10 * time.Second
	// maxAcceptBackoff caps the wait after a failed Accept.
	maxAcceptBackoff = time.Second
)

// ServeUDP answers queries arriving on pc until pc is closed; it returns nil
// then, after the queries in flight have finished. Malformed packets are
// dropped without a response.
func (s *Server) ServeUDP(pc net.PacketConn) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	sem := make(chan struct{}, maxUDPInFlight)
	buf := make([]byte, maxQuerySize+1)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("read dns query: %w", err)
		}
		if n > maxQuerySize {
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			continue
		}
		req := append([]byte(nil), buf[:n]...)
		wg.Go(func() {
			defer func() { <-sem }()
			resp, err := s.handleUDP(withClient(ctx, addr, "udp"), req)
			if err != nil {
				return
			}
			// A failed write is the client's loss; it retries.
			_, _ = pc.WriteTo(resp, addr)
		})
	}
}

// ServeTCP answers queries on connections accepted from ln until ln is
// closed; it returns nil then, after closing the open connections and waiting
// for them. Each message carries a 2-byte length prefix (RFC 1035 section
// 4.2.2) and a connection may carry several queries, answered in order. A
// connection is closed after 10 s without a query, on a malformed message,
// or at once when 64 connections are already open.
func (s *Server) ServeTCP(ln net.Listener) error {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	sem := make(chan struct{}, maxTCPConns)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors, an aborted handshake, ...: wait
			// and keep serving, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), maxAcceptBackoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		select {
		case sem <- struct{}{}:
		default:
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.serveConn(ctx, c)
		})
	}
}

// serveConn answers the queries on one TCP connection until it fails, is
// idle for too long, or ctx ends.
func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	ctx = withClient(ctx, c.RemoteAddr(), "tcp")

	var lenBuf [2]byte
	buf := make([]byte, maxQuerySize)
	for {
		if err := c.SetReadDeadline(time.Now().Add(tcpIdleTimeout)); err != nil {
			return
		}
		if _, err := io.ReadFull(c, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if n == 0 || n > maxQuerySize {
			return
		}
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return
		}
		resp, err := s.Handle(ctx, buf[:n])
		if err != nil {
			return
		}
		out := make([]byte, 2, 2+len(resp))
		binary.BigEndian.PutUint16(out, uint16(len(resp))) //nolint:gosec // responses are far below 64 KiB: one question, at most 8 answers
		out = append(out, resp...)
		if err := c.SetWriteDeadline(time.Now().Add(tcpWriteTimeout)); err != nil {
			return
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}
