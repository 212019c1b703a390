// Package sniff reads the first bytes a client sends on a transparently
// intercepted TCP connection and learns where it is going: the server_name
// (SNI) of a TLS ClientHello or the Host of an HTTP/1.x request head. The
// egress proxy matches that name against a sandbox's allowlist and replays
// the bytes it read to the upstream server (see Replay).
//
// The bytes come from code we do not trust, so every length is bounds-checked,
// every ambiguity that could make us and the upstream server disagree about the
// destination (two host_name entries, two Host headers, a Host that differs
// from an absolute request target, obsolete line folding, bare CR) is an
// error wrapping ErrMalformed, and names are normalised before they are
// returned: lowercased, one trailing dot removed, no port, no brackets.
package sniff

import (
	"errors"
	"fmt"
	"io"

	"github.com/containerd/errdefs"
)

// DefaultMax is the read limit Sniff uses when given maxBytes <= 0. A
// ClientHello with post-quantum key shares is about 2 KiB; browsers' HTTP
// request heads rarely pass 16 KiB.
const DefaultMax = 64 << 10

var (
	// ErrMalformed is wrapped by every error about bytes that claim to be
	// TLS or HTTP but break the protocol.
	ErrMalformed = fmt.Errorf("malformed connection preface: %w", errdefs.ErrInvalidArgument)
	// ErrTooLarge is returned when no decision is possible within the read
	// limit, or a ClientHello declares a length beyond it.
	ErrTooLarge = fmt.Errorf("connection preface too large: %w", errdefs.ErrInvalidArgument)
)

// malformed returns an error wrapping ErrMalformed.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrMalformed)
}

// Kind of the first bytes of a connection.
type Kind int

const (
	// Unknown is neither a TLS handshake nor an HTTP/1.x request.
	Unknown Kind = iota
	// TLS is a TLS handshake record (0x16 0x03 0x00-0x04).
	TLS
	// HTTP is an HTTP/1.x request: an upper-case method token and a space.
	HTTP
)

func (k Kind) String() string {
	switch k {
	case Unknown:
		return "unknown"
	case TLS:
		return "tls"
	case HTTP:
		return "http"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Result of sniffing.
type Result struct {
	Kind Kind
	// Name is the SNI host name (TLS) or the Host header's host part (HTTP),
	// normalised: lowercased, one trailing dot removed, no port, IPv6
	// brackets removed. "" when absent.
	Name string
	// Port is the port from the Host header when it has one (HTTP), else 0.
	// For CONNECT and absolute-form targets it comes from the target.
	Port uint16
	// ALPN lists the ClientHello's ALPN protocols (TLS).
	ALPN []string
	// Method and Target are the HTTP request line's method and request
	// target (HTTP).
	Method, Target string
}

// maxEmptyReads bounds the (0, nil) reads Sniff tolerates in a row, the
// way bufio does.
const maxEmptyReads = 100

// Sniff reads from r until it can decide what the connection is: a complete
// ClientHello (possibly spread over several TLS records and reads), a
// complete HTTP/1.x request head up to the blank line, or bytes that are
// neither. It never reads more than maxBytes (DefaultMax when maxBytes <=
// 0) and returns ErrTooLarge when that is not enough. It returns the result and
// all the bytes it read, which may run past the ClientHello or request head;
// the caller replays them upstream.
//
// Bytes that are neither a TLS handshake record (0x16 0x03 0x00-0x04) nor an
// upper-case HTTP method token followed by a space yield Kind Unknown and a
// nil error as soon as a read shows it, without waiting for more. Malformed
// TLS or HTTP yields an error wrapping ErrMalformed; Result.Kind then still
// says what was recognised. A read error before a decision is returned
// wrapped, with io.EOF turned into io.ErrUnexpectedEOF once some bytes have
// arrived; a read error that arrives with the bytes that complete the
// decision is dropped (the caller meets it again on its next read).
//
// Sniff blocks as long as r does: protocols where the server speaks first
// send nothing, so the caller sets a read deadline.
func Sniff(r io.Reader, maxBytes int) (Result, []byte, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultMax
	}
	s := sniffer{max: maxBytes}
	buf := make([]byte, 0, min(maxBytes, 4096))
	empty := 0
	for {
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(2*cap(buf), maxBytes))
			copy(nb, buf)
			buf = nb
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		if n < 0 || n > cap(buf)-len(buf) {
			return s.res, buf, fmt.Errorf("read connection preface: reader returned %d bytes", n)
		}
		buf = buf[:len(buf)+n]
		if n > 0 {
			empty = 0
			done, serr := s.step(buf)
			if serr != nil || done {
				return s.res, buf, serr
			}
			if len(buf) >= maxBytes {
				return s.res, buf, fmt.Errorf("no decision after %d bytes (%s so far): %w", len(buf), s.res.Kind, ErrTooLarge)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.EOF
				if len(buf) > 0 {
					err = io.ErrUnexpectedEOF
				}
			}
			return s.res, buf, fmt.Errorf("read connection preface: %w", err)
		}
		if n == 0 {
			if empty++; empty >= maxEmptyReads {
				return s.res, buf, fmt.Errorf("read connection preface: %w", io.ErrNoProgress)
			}
		}
	}
}

// sniffer is the state Sniff keeps between reads, so each byte is looked
// at a bounded number of times however the client splits its writes.
type sniffer struct {
	max int
	res Result

	// TLS: pos is the offset in buf of the next byte not yet consumed,
	// recLeft the bytes left in the current record, hs the handshake bytes
	// so far and need the length of the handshake message with its header
	// (0 until the header is known).
	pos     int
	recLeft int
	hs      []byte
	need    int

	// HTTP: lineStart is the offset of the line being read and scanned
	// that of the first byte not yet searched for its end.
	lineStart int
	scanned   int
}

// step looks at buf, which holds all bytes read so far, and reports whether
// a decision is made.
func (s *sniffer) step(buf []byte) (bool, error) {
	if s.res.Kind == Unknown {
		k, decided := classify(buf)
		if !decided {
			return false, nil
		}
		if k == Unknown {
			return true, nil
		}
		s.res.Kind = k
	}
	if s.res.Kind == TLS {
		return s.stepTLS(buf)
	}
	return s.stepHTTP(buf)
}

// maxMethodLen bounds HTTP method tokens; the longest registered one,
// UPDATEREDIRECTREF, has 17 bytes.
const maxMethodLen = 20

// classify decides from the first bytes whether they start a TLS handshake,
// an HTTP request or neither; decided is false while more bytes could
// still make them either.
func classify(b []byte) (k Kind, decided bool) {
	if b[0] == recordTypeHandshake {
		switch {
		case len(b) >= 2 && b[1] != 3, len(b) >= 3 && b[2] > 4:
			return Unknown, true
		case len(b) < 3:
			return Unknown, false
		}
		return TLS, true
	}
	for i, c := range b {
		switch {
		case c == ' ' && i > 0:
			return HTTP, true
		case i >= maxMethodLen || !isMethodByte(c, i):
			return Unknown, true
		}
	}
	return Unknown, false
}

// isMethodByte reports whether c may be byte i of a method we recognise:
// upper-case letters, and '-' or '_' after the first.
func isMethodByte(c byte, i int) bool {
	return 'A' <= c && c <= 'Z' || i > 0 && (c == '-' || c == '_')
}

// quote renders untrusted bytes for an error message, cut to a readable
// length.
func quote(s string) string {
	const maxQuoted = 64
	if len(s) > maxQuoted {
		return fmt.Sprintf("%q...", s[:maxQuoted])
	}
	return fmt.Sprintf("%q", s)
}
