package sniff

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestSniffHTTP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    Result // for success; Kind is always HTTP
		errText string
	}{
		{
			name: "origin form",
			in:   "GET /index.html HTTP/1.1\r\nUser-Agent: x\r\nHost: Example.COM:8080\r\nAccept: */*\r\n\r\n",
			want: Result{Name: "example.com", Port: 8080, Method: "GET", Target: "/index.html"},
		},
		{
			name: "bare LF",
			in:   "POST /api HTTP/1.1\nhost: api.example\ncontent-length: 0\n\n",
			want: Result{Name: "api.example", Method: "POST", Target: "/api"},
		},
		{
			name: "mixed line ends",
			in:   "GET / HTTP/1.1\r\nHOST:\t a.example. \t\nX: y\r\n\n",
			want: Result{Name: "a.example", Method: "GET", Target: "/"},
		},
		{
			name: "http 1.0 without host",
			in:   "GET / HTTP/1.0\r\n\r\n",
			want: Result{Method: "GET", Target: "/"},
		},
		{
			name: "ipv6 host",
			in:   "GET / HTTP/1.1\r\nHost: [2001:DB8:0::1]:443\r\n\r\n",
			want: Result{Name: "2001:db8::1", Port: 443, Method: "GET", Target: "/"},
		},
		{
			name: "ipv4 host",
			in:   "GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n",
			want: Result{Name: "192.0.2.1", Method: "GET", Target: "/"},
		},
		{
			name: "asterisk form",
			in:   "OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n",
			want: Result{Name: "a.example", Method: "OPTIONS", Target: "*"},
		},
		{
			name: "absolute form",
			in:   "GET http://A.example:8080/x?y HTTP/1.1\r\nHost: a.example:8080\r\n\r\n",
			want: Result{Name: "a.example", Port: 8080, Method: "GET", Target: "http://A.example:8080/x?y"},
		},
		{
			name: "absolute form without host",
			in:   "GET https://a.example HTTP/1.1\r\n\r\n",
			want: Result{Name: "a.example", Method: "GET", Target: "https://a.example"},
		},
		{
			name: "absolute form host without port",
			in:   "GET http://a.example:8080/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
			want: Result{Name: "a.example", Port: 8080, Method: "GET", Target: "http://a.example:8080/"},
		},
		{
			name:    "absolute form mismatch",
			in:      "GET http://allowed.example/ HTTP/1.1\r\nHost: evil.example\r\n\r\n",
			errText: "Host header differs from the request target",
		},
		{
			name:    "absolute form port mismatch",
			in:      "GET http://a.example:80/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n",
			errText: "Host header differs from the request target",
		},
		{
			name: "connect",
			in:   "CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nProxy-Authorization: x\r\n\r\n",
			want: Result{Name: "a.example", Port: 443, Method: "CONNECT", Target: "a.example:443"},
		},
		{
			name: "connect ipv6 without host",
			in:   "CONNECT [2001:db8::1]:443 HTTP/1.1\r\n\r\n",
			want: Result{Name: "2001:db8::1", Port: 443, Method: "CONNECT", Target: "[2001:db8::1]:443"},
		},
		{
			name:    "connect mismatch",
			in:      "CONNECT allowed.example:443 HTTP/1.1\r\nHost: evil.example:443\r\n\r\n",
			errText: "Host header differs from the request target",
		},
		{name: "connect without port", in: "CONNECT a.example HTTP/1.1\r\n\r\n", errText: "has no port"},
		{name: "connect with path", in: "CONNECT a.example:443/x HTTP/1.1\r\n\r\n", errText: "CONNECT target"},
		{name: "duplicate host", in: "GET / HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\n\r\n", errText: "duplicate Host header"},
		{name: "duplicate identical host", in: "GET / HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n", errText: "duplicate Host header"},
		{name: "host list", in: "GET / HTTP/1.1\r\nHost: a.example, b.example\r\n\r\n", errText: "Host header"},
		{name: "empty host", in: "GET / HTTP/1.1\r\nHost:\r\n\r\n", errText: "empty host"},
		{name: "host with userinfo", in: "GET / HTTP/1.1\r\nHost: user@a.example\r\n\r\n", errText: "userinfo"},
		{name: "absolute form userinfo", in: "GET http://allowed.example@evil.example/ HTTP/1.1\r\n\r\n", errText: "userinfo"},
		{name: "absolute form empty authority", in: "GET http:///x HTTP/1.1\r\n\r\n", errText: "empty host"},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : evil.example\r\n\r\n", errText: "bad header field name"},
		{name: "no colon", in: "GET / HTTP/1.1\r\nHost evil.example\r\n\r\n", errText: "bad header field name"},
		{name: "obs fold", in: "GET / HTTP/1.1\r\nHost: a.example\r\n evil.example\r\n\r\n", errText: "obsolete line folding"},
		{name: "bare CR", in: "GET / HTTP/1.1\r\nX: a\rHost: evil.example\r\n\r\n", errText: "bare CR"},
		{name: "control byte in value", in: "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", errText: "control byte"},
		{name: "http 2 preface", in: "PRI * HTTP/2.0\r\n\r\n", errText: "unsupported version"},
		{name: "http 0.9 style", in: "GET /\r\n\r\n", errText: "not METHOD SP target SP version"},
		{name: "double space", in: "GET  / HTTP/1.1\r\n\r\n", errText: "not METHOD SP target SP version"},
		{name: "trailing space", in: "GET / HTTP/1.1 \r\n\r\n", errText: "not METHOD SP target SP version"},
		{name: "lowercase version", in: "GET / http/1.1\r\n\r\n", errText: "unsupported version"},
		{name: "control byte in target", in: "GET /\x01 HTTP/1.1\r\n\r\n", errText: "bad target"},
		{name: "relative target", in: "GET index.html HTTP/1.1\r\n\r\n", errText: "not in origin"},
		{name: "asterisk with GET", in: "GET * HTTP/1.1\r\n\r\n", errText: "not in origin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{
				strings.NewReader(tc.in),
				iotest.OneByteReader(strings.NewReader(tc.in)),
			} {
				res, got, err := Sniff(r, 0)
				if string(got) != tc.in {
					t.Errorf("Sniff() returned %q; want %q", got, tc.in)
				}
				if res.Kind != HTTP {
					t.Errorf("Sniff().Kind = %v; want HTTP", res.Kind)
				}
				if tc.errText != "" {
					if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.errText) {
						t.Fatalf("Sniff() = %+v, %v; want ErrMalformed containing %q", res, err, tc.errText)
					}
					continue
				}
				want := tc.want
				want.Kind = HTTP
				if err != nil || res.Kind != want.Kind || res.Name != want.Name || res.Port != want.Port ||
					res.Method != want.Method || res.Target != want.Target || res.ALPN != nil {
					t.Fatalf("Sniff() = %+v, %v; want %+v", res, err, want)
				}
			}
		})
	}
}

func TestSniffHTTPStopsAtBlankLine(t *testing.T) {
	head := "POST /upload HTTP/1.1\r\nHost: a.example\r\nContent-Length: 5\r\n\r\n"
	r := io.MultiReader(iotest.OneByteReader(strings.NewReader(head)), failReader{t})
	res, got, err := Sniff(r, 0)
	if err != nil || res.Name != "a.example" || string(got) != head {
		t.Fatalf("Sniff() = %+v, %q, %v; want a.example and the head", res, got, err)
	}
	// A body (or a second request) read together with the head comes back
	// for replay and is not parsed.
	in := head + "hello GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n"
	res, got, err = Sniff(strings.NewReader(in), 0)
	if err != nil || res.Name != "a.example" || string(got) != in {
		t.Fatalf("Sniff(head+body) = %+v, %q, %v; want a.example and all bytes", res, got, err)
	}
}

func TestSniffHTTPTruncated(t *testing.T) {
	in := "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nAccept: */*\r\n\r\n"
	for n := range len(in) {
		res, got, err := Sniff(strings.NewReader(in[:n]), 0)
		want := io.ErrUnexpectedEOF
		if n == 0 {
			want = io.EOF
		}
		if !errors.Is(err, want) || string(got) != in[:n] {
			t.Fatalf("Sniff(%q) = %+v, %q, %v; want %v", in[:n], res, got, err, want)
		}
		if n >= 4 && res.Kind != HTTP {
			t.Fatalf("Sniff(%q).Kind = %v; want HTTP", in[:n], res.Kind)
		}
	}
}

func TestSniffHTTPTooLarge(t *testing.T) {
	in := "GET / HTTP/1.1\r\nHost: a.example\r\nCookie: " + strings.Repeat("x", 100) + "\r\n\r\n"
	res, got, err := Sniff(strings.NewReader(in), 64)
	if !errors.Is(err, ErrTooLarge) || res.Kind != HTTP || string(got) != in[:64] {
		t.Fatalf("Sniff(max 64) = %+v, %q, %v; want HTTP, the first 64 bytes, ErrTooLarge", res, got, err)
	}
	if _, _, err := Sniff(strings.NewReader(in), len(in)); err != nil {
		t.Fatalf("Sniff(max %d) = %v; want success at the exact size", len(in), err)
	}
}

func TestParseHostHeader(t *testing.T) {
	for _, tc := range []struct {
		in       string
		wantHost string
		wantPort uint16
		errText  string
	}{
		{"example.com", "example.com", 0, ""},
		{"example.com:8080", "example.com", 8080, ""},
		{"EXAMPLE.com.", "example.com", 0, ""},
		{"EXAMPLE.com.:443", "example.com", 443, ""},
		{"[2001:db8::1]:443", "2001:db8::1", 443, ""},
		{"[2001:DB8:0:0::1]", "2001:db8::1", 0, ""},
		{"[::ffff:192.0.2.1]", "::ffff:192.0.2.1", 0, ""},
		{"192.0.2.1:80", "192.0.2.1", 80, ""},
		{"localhost:65535", "localhost", 65535, ""},
		{"a.example:00080", "a.example", 80, ""},
		{"_srv.a-b.example", "_srv.a-b.example", 0, ""},
		{"", "", 0, "empty host"},
		{":80", "", 0, "empty host name"},
		{"a.example:", "", 0, "bad port"},
		{"a.example:0", "", 0, "out of range"},
		{"a.example:65536", "", 0, "out of range"},
		{"a.example:123456", "", 0, "bad port"},
		{"a.example:+80", "", 0, "bad port"},
		{"a.example:8o", "", 0, "bad port"},
		{"user@a.example", "", 0, "userinfo"},
		{"user:pw@a.example", "", 0, "userinfo"},
		{"a.example 80", "", 0, "space"},
		{" a.example", "", 0, "space"},
		{"a.example\t", "", 0, "control byte"},
		{"a.exam\x00ple", "", 0, "control byte"},
		{"a.example\x7f", "", 0, "control byte"},
		{"2001:db8::1", "", 0, "more than one colon"},
		{"a:b:c", "", 0, "more than one colon"},
		{"[2001:db8::1", "", 0, "no closing bracket"},
		{"[2001:db8::1]x", "", 0, "after the closing bracket"},
		{"[2001:db8::1]:", "", 0, "bad port"},
		{"[192.0.2.1]", "", 0, "not a bracketed IPv6"},
		{"[fe80::1%25eth0]", "", 0, "not a bracketed IPv6"},
		{"[a.example]", "", 0, "not a bracketed IPv6"},
		{"a.example]", "", 0, "contains byte"},
		{"a..example", "", 0, "empty label"},
		{"a.example..", "", 0, "empty label"},
		{"a_b.ex/ample", "", 0, "contains byte"},
		{"bücher.example", "", 0, "contains byte"},
		{"127.1", "", 0, "not an IPv4 address"},
		{"0x7f.0.0.1", "", 0, "not an IPv4 address"},
		{"0177.0.0.1", "", 0, "not an IPv4 address"},
		{"example.0x10", "", 0, "not an IPv4 address"},
		{"1.2.3.4.5", "", 0, "not an IPv4 address"},
		{strings.Repeat("a", 64) + ".example", "", 0, "longer than 63"},
	} {
		host, port, err := ParseHostHeader(tc.in)
		if tc.errText == "" {
			if err != nil || host != tc.wantHost || port != tc.wantPort {
				t.Errorf("ParseHostHeader(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.wantHost, tc.wantPort)
			}
			continue
		}
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tc.errText) {
			t.Errorf("ParseHostHeader(%q) = %q, %d, %v; want ErrMalformed containing %q", tc.in, host, port, err, tc.errText)
		}
	}
}

func TestSniffUnknown(t *testing.T) {
	random := make([]byte, 256)
	for i := range random {
		random[i] = byte(i*131 + 7) // a fixed spread of bytes, first 0x07
	}
	for _, tc := range []struct {
		name string
		in   string
		want string // bytes a 1-byte reader has delivered at the decision
	}{
		{"ssh banner", "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n", "SSH-2"},
		{"random bytes", string(random), string(random[:1])},
		{"nul", "\x00\x00\x00\x00", "\x00"},
		{"tls bad major", "\x16\x02\x01\x00\x05", "\x16\x02"},
		{"tls 1.4+ record version", "\x16\x03\x05\x00\x05", "\x16\x03\x05"},
		{"tls alert", "\x15\x03\x03\x00\x02\x02\x28", "\x15"},
		{"sslv2 hello", "\x80\x2e\x01\x03\x01", "\x80"},
		{"lowercase method", "get / HTTP/1.1\r\n\r\n", "g"},
		{"leading space", " GET / HTTP/1.1\r\n\r\n", " "},
		{"leading CRLF", "\r\nGET / HTTP/1.1\r\n\r\n", "\r"},
		{"digit in method", "GET2 / HTTP/1.1\r\n\r\n", "GET2"},
		{"method too long", strings.Repeat("A", maxMethodLen+1) + " / HTTP/1.1\r\n\r\n", strings.Repeat("A", maxMethodLen+1)},
		{"dash first", "-GET / HTTP/1.1\r\n\r\n", "-"},
		{"redis", "*1\r\n$4\r\nPING\r\n", "*"},
		{"postgres startup", "\x00\x00\x00\x08\x04\xd2\x16\x2f", "\x00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// All at once: a decision after the first read.
			r := io.MultiReader(strings.NewReader(tc.in), failReader{t})
			res, got, err := Sniff(r, 0)
			if err != nil || res.Kind != Unknown || string(got) != tc.in {
				t.Fatalf("Sniff(%q) = %+v, %q, %v; want Unknown with all bytes", tc.in, res, got, err)
			}
			// A byte at a time: a decision at the first byte that shows it.
			res, got, err = Sniff(iotest.OneByteReader(strings.NewReader(tc.in)), 0)
			if err != nil || res.Kind != Unknown || string(got) != tc.want {
				t.Fatalf("Sniff(%q, 1-byte reads) = %+v, %q, %v; want Unknown after %q", tc.in, res, got, err, tc.want)
			}
		})
	}
}

func TestSniffUndecided(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", io.EOF},
		{"GE", io.ErrUnexpectedEOF},
		{"\x16", io.ErrUnexpectedEOF},
		{"\x16\x03", io.ErrUnexpectedEOF},
	} {
		res, got, err := Sniff(strings.NewReader(tc.in), 0)
		if !errors.Is(err, tc.want) || res.Kind != Unknown || string(got) != tc.in {
			t.Errorf("Sniff(%q) = %+v, %q, %v; want Unknown, %v", tc.in, res, got, err, tc.want)
		}
	}
	// Upper-case letters up to the limit without a space: too large.
	res, got, err := Sniff(strings.NewReader("ABCDEFGH"), 4)
	if !errors.Is(err, ErrTooLarge) || res.Kind != Unknown || string(got) != "ABCD" {
		t.Errorf("Sniff(ABCDEFGH, max 4) = %+v, %q, %v; want ErrTooLarge after ABCD", res, got, err)
	}
}

type errReader struct {
	data []byte
	err  error
}

func (r *errReader) Read(p []byte) (int, error) {
	n := copy(p, r.data)
	r.data = r.data[n:]
	if n > 0 {
		return n, nil
	}
	return 0, r.err
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestSniffReadErrors(t *testing.T) {
	boom := errors.New("boom")
	res, got, err := Sniff(&errReader{data: []byte("GET / HTTP/1.1\r\n"), err: boom}, 0)
	if !errors.Is(err, boom) || res.Kind != HTTP || string(got) != "GET / HTTP/1.1\r\n" {
		t.Errorf("Sniff(failing reader) = %+v, %q, %v; want HTTP, the bytes, boom", res, got, err)
	}
	if _, _, err := Sniff(zeroReader{}, 0); !errors.Is(err, io.ErrNoProgress) {
		t.Errorf("Sniff(zero reader) = %v; want io.ErrNoProgress", err)
	}
	// An error together with the bytes that complete the decision is dropped.
	in := []byte("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n")
	res, _, err = Sniff(iotest.DataErrReader(bytes.NewReader(in)), 0)
	if err != nil || res.Name != "a.example" {
		t.Errorf("Sniff(data with EOF) = %+v, %v; want a.example", res, err)
	}
}
