package sniff

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// checkName fails when a name returned by the package is not normalised.
func checkName(t *testing.T, name string) {
	t.Helper()
	if name != strings.ToLower(name) || strings.HasSuffix(name, ".") {
		t.Fatalf("name %q is not normalised", name)
	}
	if strings.Contains(name, ":") {
		if addr, err := netip.ParseAddr(name); err != nil || !addr.Is6() {
			t.Fatalf("name %q has a colon but is not an IPv6 address", name)
		}
	}
}

func FuzzSniff(f *testing.F) {
	record := clientHello(f, &tls.Config{ServerName: "example.com", NextProtos: []string{"h2"}})
	f.Add(record, uint16(0))
	f.Add(frame(handshake(f, record), 3), uint16(0))
	f.Add(record[:len(record)/2], uint16(0))
	f.Add(record, uint16(len(record)-1))
	f.Add(frame(message(helloBody([][]byte{sniExt("a.example", "\x01:x"), alpnExt("h2")})), 2), uint16(0))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a.example:8080\r\n\r\nbody"), uint16(0))
	f.Add([]byte("GET http://a.example/ HTTP/1.1\nHost: b.example\n\n"), uint16(0))
	f.Add([]byte("CONNECT [::1]:443 HTTP/1.1\r\nhost: [::1]:443\r\n\r\n"), uint16(0))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), uint16(0))
	f.Add([]byte("SSH-2.0-OpenSSH_9.6\r\n"), uint16(0))
	f.Add([]byte("\x16\x03\x01\x00"), uint16(0))
	f.Add([]byte("ABCDEFGH"), uint16(4))
	f.Fuzz(func(t *testing.T, data []byte, maxBytes uint16) {
		limit := int(maxBytes)
		if limit == 0 {
			limit = DefaultMax
		}
		type outcome struct {
			res Result
			out []byte
			err error
		}
		var outs []outcome
		for _, r := range []io.Reader{bytes.NewReader(data), iotest.OneByteReader(bytes.NewReader(data))} {
			res, out, err := Sniff(r, int(maxBytes))
			if len(out) > limit || !bytes.HasPrefix(data, out) {
				t.Fatalf("Sniff() returned %d bytes that are not a prefix of the %d given (limit %d)", len(out), len(data), limit)
			}
			if err == nil && res.Name != "" {
				checkName(t, res.Name)
			}
			outs = append(outs, outcome{res, out, err})
		}
		// However the bytes are split into reads, the decision is the same.
		a, b := outs[0], outs[1]
		for _, target := range []error{ErrMalformed, ErrTooLarge, io.ErrUnexpectedEOF, io.EOF} {
			if errors.Is(a.err, target) != errors.Is(b.err, target) {
				t.Fatalf("whole reads: %v; 1-byte reads: %v", a.err, b.err)
			}
		}
		if (a.err == nil) != (b.err == nil) || a.res.Kind != b.res.Kind || a.res.Name != b.res.Name || a.res.Port != b.res.Port ||
			a.res.Method != b.res.Method || a.res.Target != b.res.Target || !slices.Equal(a.res.ALPN, b.res.ALPN) {
			t.Fatalf("whole reads: %+v, %v; 1-byte reads: %+v, %v", a.res, a.err, b.res, b.err)
		}
	})
}

func FuzzParseHostHeader(f *testing.F) {
	for _, s := range []string{
		"example.com", "example.com:8080", "[2001:db8::1]:443", "EXAMPLE.com.", "192.0.2.1:80",
		"127.1", "a@b", "a:b:c", "[fe80::1%eth0]", "[::ffff:1.2.3.4]", "a..b", "0x7f.1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		host, _, err := ParseHostHeader(v)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseHostHeader(%q) = %v; want an ErrMalformed", v, err)
			}
			return
		}
		if host == "" {
			t.Fatalf("ParseHostHeader(%q) = empty host", v)
		}
		checkName(t, host)
		// Normalising is idempotent.
		again := host
		if strings.Contains(host, ":") {
			again = "[" + host + "]"
		}
		if h2, p2, err := ParseHostHeader(again); err != nil || h2 != host || p2 != 0 {
			t.Fatalf("ParseHostHeader(%q) = %q, %d, %v; want %q again", again, h2, p2, err, host)
		}
	})
}

func FuzzParseClientHello(f *testing.F) {
	f.Add(handshake(f, clientHello(f, &tls.Config{ServerName: "example.com", NextProtos: []string{"h2"}}))[handshakeHeaderLen:])
	f.Add(helloBody([][]byte{sniExt("a.example", "\x01:x"), alpnExt("h2", "http/1.1")}))
	f.Add(helloBody(nil))
	f.Fuzz(func(t *testing.T, msg []byte) {
		sni, alpn, err := ParseClientHello(msg)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ParseClientHello() = %v; want an ErrMalformed", err)
			}
			return
		}
		if sni != "" {
			checkName(t, sni)
			if strings.Contains(sni, ":") || endsInNumber(sni) {
				t.Fatalf("ParseClientHello() = IP literal %q", sni)
			}
		}
		for _, p := range alpn {
			if p == "" {
				t.Fatalf("ParseClientHello() = empty ALPN protocol in %q", alpn)
			}
		}
	})
}
