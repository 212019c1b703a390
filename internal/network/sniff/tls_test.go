package sniff

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

// clientHello returns the first TLS record crypto/tls sends as a client
// with cfg: its ClientHello.
func clientHello(tb testing.TB, cfg *tls.Config) []byte {
	tb.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = tls.Client(c, cfg).Handshake() // fails once s is closed
		c.Close()
	}()
	defer func() { s.Close(); <-done }()
	hdr := make([]byte, recordHeaderLen)
	if _, err := io.ReadFull(s, hdr); err != nil {
		tb.Fatalf("read record header: %v", err)
	}
	body := make([]byte, int(hdr[3])<<8|int(hdr[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		tb.Fatalf("read record body: %v", err)
	}
	return append(hdr, body...)
}

// handshake returns the handshake bytes of a single-record ClientHello.
func handshake(tb testing.TB, record []byte) []byte {
	tb.Helper()
	if record[0] != recordTypeHandshake || len(record)-recordHeaderLen != int(record[3])<<8|int(record[4]) {
		tb.Fatalf("not one handshake record: % x", record[:min(len(record), 8)])
	}
	return record[recordHeaderLen:]
}

// frame splits handshake bytes into n records of about equal size, with
// record version 0x0301 as clients use.
func frame(hs []byte, n int) []byte {
	var out []byte
	size := (len(hs) + n - 1) / n
	for chunk := range slices.Chunk(hs, max(size, 1)) {
		out = append(out, recordTypeHandshake, 3, 1, byte(len(chunk)>>8), byte(len(chunk)))
		out = append(out, chunk...)
	}
	return out
}

// message wraps a ClientHello body in its handshake header.
func message(body []byte) []byte {
	n := len(body)
	return append([]byte{typeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

func vec8(parts ...[]byte) []byte {
	b := bytes.Join(parts, nil)
	return append([]byte{byte(len(b))}, b...)
}

func vec16(parts ...[]byte) []byte {
	b := bytes.Join(parts, nil)
	return append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)
}

func ext(typ uint16, data ...[]byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ)}, vec16(data...)...)
}

// sniExt builds a server_name extension with one entry per name; a name
// starting with "\x01:" gets name type 1.
func sniExt(names ...string) []byte {
	var entries [][]byte
	for _, n := range names {
		typ := byte(nameTypeHostName)
		if rest, ok := strings.CutPrefix(n, "\x01:"); ok {
			typ, n = 1, rest
		}
		entries = append(entries, append([]byte{typ}, vec16([]byte(n))...))
	}
	return ext(extServerName, vec16(entries...))
}

func alpnExt(protos ...string) []byte {
	var list [][]byte
	for _, p := range protos {
		list = append(list, vec8([]byte(p)))
	}
	return ext(extALPN, vec16(list...))
}

// helloBody builds a ClientHello body with the given extensions; no
// extensions at all when exts is nil.
func helloBody(exts [][]byte) []byte {
	b := []byte{3, 3}
	b = append(b, make([]byte, 32)...)          // random
	b = append(b, vec8(make([]byte, 32))...)    // session id
	b = append(b, vec16([]byte{0x13, 0x01})...) // cipher suites
	b = append(b, vec8([]byte{0})...)           // compression
	if exts != nil {
		b = append(b, vec16(exts...)...)
	}
	return b
}

func TestSniffRealClientHellos(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      *tls.Config
		wantName string
		wantALPN []string
	}{
		{"server name", &tls.Config{ServerName: "example.com"}, "example.com", nil},
		{"mixed case", &tls.Config{ServerName: "WWW.Example.COM"}, "www.example.com", nil},
		{"trailing dot", &tls.Config{ServerName: "example.com."}, "example.com", nil},
		{"alpn", &tls.Config{ServerName: "api.example.org", NextProtos: []string{"h2", "http/1.1"}}, "api.example.org", []string{"h2", "http/1.1"}},
		{"ip server name sends no sni", &tls.Config{ServerName: "192.0.2.1"}, "", nil},
		{"no server name", &tls.Config{InsecureSkipVerify: true}, "", nil},
		{"tls 1.2 only", &tls.Config{ServerName: "old.example", MaxVersion: tls.VersionTLS12}, "old.example", nil},
		{"tls 1.3 only", &tls.Config{ServerName: "new.example", MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}}, "new.example", []string{"h2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			record := clientHello(t, tc.cfg)
			hs := handshake(t, record)
			three := frame(hs, 3)
			for _, in := range []struct {
				name string
				data []byte
				r    func([]byte) io.Reader
			}{
				{"one record", record, func(b []byte) io.Reader { return bytes.NewReader(b) }},
				{"one record, 1-byte reads", record, func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
				{"three records", three, func(b []byte) io.Reader { return bytes.NewReader(b) }},
				{"three records, 1-byte reads", three, func(b []byte) io.Reader { return iotest.OneByteReader(bytes.NewReader(b)) }},
				{"one record per byte", frame(hs, len(hs)), func(b []byte) io.Reader { return bytes.NewReader(b) }},
			} {
				res, got, err := Sniff(in.r(in.data), 0)
				if err != nil {
					t.Fatalf("%s: Sniff() error = %v", in.name, err)
				}
				if res.Kind != TLS || res.Name != tc.wantName || !slices.Equal(res.ALPN, tc.wantALPN) {
					t.Errorf("%s: Sniff() = %+v; want TLS %q %q", in.name, res, tc.wantName, tc.wantALPN)
				}
				if !bytes.Equal(got, in.data) {
					t.Errorf("%s: Sniff() returned %d bytes; want the %d it was given", in.name, len(got), len(in.data))
				}
			}
		})
	}
}

func TestSniffTLSStopsAtEndOfHello(t *testing.T) {
	record := clientHello(t, &tls.Config{ServerName: "example.com"})
	// After the ClientHello, a reader that fails the test: Sniff must not
	// read on once the hello is complete.
	r := io.MultiReader(iotest.OneByteReader(bytes.NewReader(record)), failReader{t})
	res, got, err := Sniff(r, 0)
	if err != nil || res.Name != "example.com" || !bytes.Equal(got, record) {
		t.Fatalf("Sniff() = %+v, %d bytes, %v; want example.com, %d bytes", res, len(got), err, len(record))
	}
	// Bytes after the hello that arrive with it are returned for replay,
	// even when they are not a valid record.
	in := append(slices.Clip(record), "\x17\x03\x03garbage"...)
	res, got, err = Sniff(bytes.NewReader(in), 0)
	if err != nil || res.Name != "example.com" || !bytes.Equal(got, in) {
		t.Fatalf("Sniff(hello+garbage) = %+v, %d bytes, %v; want example.com, %d bytes", res, len(got), err, len(in))
	}
}

type failReader struct{ t *testing.T }

func (r failReader) Read([]byte) (int, error) {
	r.t.Error("Sniff read past the point of decision")
	return 0, io.EOF
}

func TestSniffTLSTruncated(t *testing.T) {
	record := clientHello(t, &tls.Config{ServerName: "example.com", NextProtos: []string{"h2"}})
	hs := handshake(t, record)
	for _, in := range [][]byte{record, frame(hs, 3)} {
		for n := range len(in) {
			res, got, err := Sniff(bytes.NewReader(in[:n]), 0)
			want := io.ErrUnexpectedEOF
			if n == 0 {
				want = io.EOF
			}
			if !errors.Is(err, want) {
				t.Fatalf("Sniff(first %d of %d bytes) = %+v, %v; want %v", n, len(in), res, err, want)
			}
			if !bytes.Equal(got, in[:n]) {
				t.Fatalf("Sniff(first %d bytes) returned %d bytes", n, len(got))
			}
			if n >= 3 && res.Kind != TLS {
				t.Fatalf("Sniff(first %d bytes).Kind = %v; want TLS", n, res.Kind)
			}
		}
	}
	// Every truncation of the body must be handled without a panic; those
	// that end inside the fixed fields are errors.
	body := hs[handshakeHeaderLen:]
	for n := range len(body) {
		_, _, err := ParseClientHello(body[:n])
		if n < 2+32+1 && err == nil {
			t.Fatalf("ParseClientHello(first %d bytes) = nil error", n)
		}
	}
}

func TestSniffTLSRecords(t *testing.T) {
	msg := message(helloBody([][]byte{sniExt("example.com")}))
	good := frame(msg, 2)
	second := len(good) - (len(msg) - (len(msg)+1)/2) - recordHeaderLen // offset of the second record header
	patch := func(off int, b ...byte) []byte {
		out := slices.Clone(good)
		copy(out[off:], b)
		return out
	}
	hugeLen := DefaultMax // declared handshake length beyond the limit
	for _, tc := range []struct {
		name    string
		in      []byte
		wantErr error
		errText string
	}{
		{"two records", good, nil, ""},
		{"record version 3.4 accepted", patch(1, 3, 4), nil, ""},
		{"later record version loose", patch(second+1, 3, 0x7f), nil, ""},
		{"alert inside the hello", patch(second, 0x15), ErrMalformed, "record of type 21"},
		{"later record version 2", patch(second+1, 2, 0), ErrMalformed, "record version"},
		{"empty record", append([]byte{0x16, 3, 1, 0, 0}, good...), ErrMalformed, "empty tls handshake record"},
		{"record too long", []byte{0x16, 3, 1, 0x48, 0x01, 1, 0, 0, 1}, ErrMalformed, "exceeds"},
		{"server hello", frame(append([]byte{2}, msg[1:]...), 1), ErrMalformed, "want a client hello"},
		{"declared length too large", frame([]byte{1, byte(hugeLen >> 16), byte(hugeLen >> 8), byte(hugeLen), 3, 3}, 1), ErrTooLarge, "tls client hello of"},
		{"empty hello", frame([]byte{1, 0, 0, 0}, 1), ErrMalformed, "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The early ErrTooLarge must not wait for more bytes.
			r := io.MultiReader(iotest.OneByteReader(bytes.NewReader(tc.in)), failReader{t})
			if tc.wantErr == nil {
				r = bytes.NewReader(tc.in)
			}
			res, _, err := Sniff(r, 0)
			if !errors.Is(err, tc.wantErr) || tc.wantErr != nil && !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("Sniff() = %+v, %v; want %v containing %q", res, err, tc.wantErr, tc.errText)
			}
			if res.Kind != TLS {
				t.Errorf("Sniff().Kind = %v; want TLS", res.Kind)
			}
			if err == nil && res.Name != "example.com" {
				t.Errorf("Sniff().Name = %q; want example.com", res.Name)
			}
		})
	}
}

func TestSniffTLSMaxTooSmall(t *testing.T) {
	record := clientHello(t, &tls.Config{ServerName: "example.com"})
	// The declared length fits but the records around it do not.
	res, got, err := Sniff(bytes.NewReader(record), len(record)-1)
	if !errors.Is(err, ErrTooLarge) || res.Kind != TLS || len(got) != len(record)-1 {
		t.Fatalf("Sniff(max %d) = %+v, %d bytes, %v; want TLS, %d bytes, ErrTooLarge", len(record)-1, res, len(got), err, len(record)-1)
	}
	if _, _, err := Sniff(bytes.NewReader(record), len(record)); err != nil {
		t.Fatalf("Sniff(max %d) = %v; want success at the exact size", len(record), err)
	}
}

func TestParseClientHello(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name     string
		body     []byte
		wantSNI  string
		wantALPN []string
		errText  string // "" for success
	}{
		{"no extensions", helloBody(nil), "", nil, ""},
		{"empty extensions", helloBody([][]byte{}), "", nil, ""},
		{"sni and alpn", helloBody([][]byte{sniExt("Example.COM."), alpnExt("h2", "http/1.1")}), "example.com", []string{"h2", "http/1.1"}, ""},
		{"underscore", helloBody([][]byte{sniExt("_acme.example.com")}), "_acme.example.com", nil, ""},
		{"unknown extensions skipped", helloBody([][]byte{ext(0x0a0a), ext(0xff01, []byte{0}), sniExt("a.example")}), "a.example", nil, ""},
		{"other name type skipped", helloBody([][]byte{sniExt("\x01:whatever", "a.example")}), "a.example", nil, ""},
		{"only other name type", helloBody([][]byte{sniExt("\x01:whatever")}), "", nil, ""},
		{"two host names", helloBody([][]byte{sniExt("a.example", "b.example")}), "", nil, "more than one host_name"},
		{"two sni extensions", helloBody([][]byte{sniExt("a.example"), sniExt("b.example")}), "", nil, "duplicate extension 0"},
		{"two alpn extensions", helloBody([][]byte{alpnExt("h2"), alpnExt("h2")}), "", nil, "duplicate extension 16"},
		{"ipv4 sni", helloBody([][]byte{sniExt("192.0.2.1")}), "", nil, "is an IP address"},
		{"short ipv4 sni", helloBody([][]byte{sniExt("127.1")}), "", nil, "is an IP address"},
		{"hex ipv4 sni", helloBody([][]byte{sniExt("0x7F.1")}), "", nil, "is an IP address"},
		{"numeric last label", helloBody([][]byte{sniExt("example.123")}), "", nil, "is an IP address"},
		{"digits inside is fine", helloBody([][]byte{sniExt("123.example")}), "123.example", nil, ""},
		{"ipv6 sni", helloBody([][]byte{sniExt("2001:db8::1")}), "", nil, "contains byte 0x3a"},
		{"space", helloBody([][]byte{sniExt("exa mple.com")}), "", nil, "contains byte"},
		{"slash", helloBody([][]byte{sniExt("a/b")}), "", nil, "contains byte"},
		{"nul", helloBody([][]byte{sniExt("a.example\x00.evil")}), "", nil, "contains byte"},
		{"utf-8", helloBody([][]byte{sniExt("bücher.example")}), "", nil, "contains byte"},
		{"empty label", helloBody([][]byte{sniExt("a..example")}), "", nil, "empty label"},
		{"leading dot", helloBody([][]byte{sniExt(".example")}), "", nil, "empty label"},
		{"two trailing dots", helloBody([][]byte{sniExt("example..")}), "", nil, "empty label"},
		{"only a dot", helloBody([][]byte{sniExt(".")}), "", nil, "empty host name"},
		{"label too long", helloBody([][]byte{sniExt(long + ".example")}), "", nil, "longer than 63"},
		{"name too long", helloBody([][]byte{sniExt(strings.Repeat("abc.", 64) + "x")}), "", nil, "exceeds 253"},
		{"empty host name", helloBody([][]byte{ext(extServerName, vec16([]byte{0, 0, 0}))}), "", nil, "bad entry"},
		{"empty sni list", helloBody([][]byte{ext(extServerName, vec16())}), "", nil, "bad list length"},
		{"empty sni extension", helloBody([][]byte{ext(extServerName)}), "", nil, "bad list length"},
		{"sni trailing bytes", helloBody([][]byte{ext(extServerName, vec16([]byte{0}, vec16([]byte("a.example"))), []byte{0})}), "", nil, "bad list length"},
		{"sni entry overruns list", helloBody([][]byte{ext(extServerName, vec16([]byte{0, 0, 20}, []byte("a.example")))}), "", nil, "bad entry"},
		{"empty alpn protocol", helloBody([][]byte{alpnExt("h2", "")}), "", nil, "bad protocol name"},
		{"empty alpn list", helloBody([][]byte{ext(extALPN, vec16())}), "", nil, "bad list length"},
		{"extension overruns", append(helloBody(nil), 0, 4, 0, 0, 0, 9), "", nil, "truncated extension"},
		{"extensions length short", append(helloBody(nil), 0, 9), "", nil, "bad extensions length"},
		{"bytes after extensions", append(helloBody([][]byte{sniExt("a.example")}), 0), "", nil, "bad extensions length"},
		{"session id too long", append(append([]byte{3, 3}, make([]byte, 32)...), vec8(make([]byte, 33))...), "", nil, "bad session id"},
		{"odd cipher suites", append(append([]byte{3, 3}, make([]byte, 32)...), 0, 0, 3, 1, 2, 3, 1, 0), "", nil, "bad cipher suites"},
		{"no compression", append(append([]byte{3, 3}, make([]byte, 32)...), 0, 0, 2, 0x13, 1, 0), "", nil, "bad compression"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sni, alpn, err := ParseClientHello(tc.body)
			if tc.errText == "" {
				if err != nil || sni != tc.wantSNI || !slices.Equal(alpn, tc.wantALPN) {
					t.Fatalf("ParseClientHello() = %q, %q, %v; want %q, %q", sni, alpn, err, tc.wantSNI, tc.wantALPN)
				}
				// The same body must come through Sniff, over records.
				res, _, err := Sniff(bytes.NewReader(frame(message(tc.body), 2)), 0)
				if err != nil || res.Name != tc.wantSNI || !slices.Equal(res.ALPN, tc.wantALPN) {
					t.Fatalf("Sniff() = %+v, %v; want %q, %q", res, err, tc.wantSNI, tc.wantALPN)
				}
				return
			}
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.errText) {
				t.Fatalf("ParseClientHello() = %q, %q, %v; want ErrMalformed containing %q", sni, alpn, err, tc.errText)
			}
			if _, _, serr := Sniff(bytes.NewReader(frame(message(tc.body), 1)), 0); !errors.Is(serr, ErrMalformed) {
				t.Fatalf("Sniff() error = %v; want ErrMalformed", serr)
			}
		})
	}
}
