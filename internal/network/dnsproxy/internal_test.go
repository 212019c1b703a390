package dnsproxy

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Responses built by the server never exceed 512 bytes (see
// TestUDPLongestAnswerFits), so truncation is exercised here with a smaller
// limit.
func TestTruncation(t *testing.T) {
	q := dnsmessage.Question{Name: dnsmessage.MustNewName("Example.COM."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}
	newReply := func(edns bool) *reply {
		r := &reply{
			hdr:  dnsmessage.Header{ID: 42, Response: true, RecursionDesired: true, RecursionAvailable: true},
			q:    &q,
			ttl:  30,
			edns: edns,
		}
		for i := range 8 {
			r.addrs = append(r.addrs, netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}))
		}
		return r
	}
	tests := []struct {
		name      string
		edns      bool
		limit     int
		wantTC    bool
		wantAnswn int
	}{
		{"no limit", false, 0, false, 8},
		{"fits", false, 512, false, 8},
		{"over the limit", false, 100, true, 0},
		{"over the limit with EDNS", true, 100, true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := newReply(tc.edns).pack(tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			var m dnsmessage.Message
			if err := m.Unpack(raw); err != nil {
				t.Fatal(err)
			}
			if m.Truncated != tc.wantTC || len(m.Answers) != tc.wantAnswn {
				t.Errorf("pack(%d) = TC %v, %d answers; want TC %v, %d answers", tc.limit, m.Truncated, len(m.Answers), tc.wantTC, tc.wantAnswn)
			}
			if tc.limit > 0 && len(raw) > tc.limit {
				t.Errorf("pack(%d) = %d bytes; want at most the limit", tc.limit, len(raw))
			}
			if m.ID != 42 || len(m.Questions) != 1 || m.Questions[0] != q {
				t.Errorf("pack(%d): ID %d, questions %v; want ID 42 and the question reflected", tc.limit, m.ID, m.Questions)
			}
			if got := len(m.Additionals) == 1; got != tc.edns {
				t.Errorf("pack(%d): additionals %v; want an OPT record: %v", tc.limit, m.Additionals, tc.edns)
			}
		})
	}
}

func TestUDPLimit(t *testing.T) {
	tests := []struct {
		edns bool
		size int
		want int
	}{
		{false, 0, 512},
		{true, 0, 512},
		{true, 100, 512},
		{true, 1000, 1000},
		{true, 1232, 1232},
		{true, 4096, 1232},
		{true, 65535, 1232},
	}
	for _, tc := range tests {
		r := &reply{edns: tc.edns, ednsSize: tc.size}
		if got := r.udpLimit(); got != tc.want {
			t.Errorf("udpLimit(edns %v, size %d) = %d; want %d", tc.edns, tc.size, got, tc.want)
		}
	}
}

func TestValidName(t *testing.T) {
	long := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = 'a'
		}
		return string(b)
	}
	tests := []struct {
		name string
		want bool
	}{
		{"example.com", true},
		{"a", true},
		{"_dmarc.example-1.com", true},
		{long(63) + ".com", true},
		{long(64) + ".com", false},
		{long(63) + "." + long(63) + "." + long(63) + "." + long(61), true},
		{long(63) + "." + long(63) + "." + long(63) + "." + long(62), false},
		{"", false},
		{"a..b", false},
		{".a", false},
		{"a.", false},
		{"Example.com", false}, // not normalised
		{"a b", false},
		{"a*.com", false},
		{"\x00.com", false},
		{"bücher.de", false},
	}
	for _, tc := range tests {
		if got := validName(tc.name); got != tc.want {
			t.Errorf("validName(%q) = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzHandle(f *testing.F) {
	add := func(b *dnsmessage.Builder, addOPT bool) {
		if addOPT {
			_ = b.StartAdditionals()
			var rh dnsmessage.ResourceHeader
			_ = rh.SetEDNS0(4096, 0, true)
			_ = b.OPTResource(rh, dnsmessage.OPTResource{})
		}
		msg, err := b.Finish()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(msg)
	}
	for _, tc := range []struct {
		names []string
		typ   dnsmessage.Type
		opt   bool
	}{
		{[]string{"example.com."}, dnsmessage.TypeA, false},
		{[]string{"EXAMPLE.com."}, dnsmessage.TypeAAAA, true},
		{[]string{"nx.test."}, dnsmessage.TypeA, false},
		{[]string{"fail.test."}, dnsmessage.TypeA, true},
		{[]string{"example.com."}, dnsmessage.TypeTXT, false},
		{[]string{"example.com.", "example.org."}, dnsmessage.TypeA, false},
		{nil, dnsmessage.TypeA, true},
	} {
		b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 0x4242, RecursionDesired: true})
		b.EnableCompression()
		_ = b.StartQuestions()
		for _, n := range tc.names {
			_ = b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(n), Type: tc.typ, Class: dnsmessage.ClassINET})
		}
		add(&b, tc.opt)
	}
	f.Add([]byte{})
	f.Add([]byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1}) // pointer loop
	f.Add([]byte{0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 1, 0, 1, 0, 0, 41, 2, 0, 0, 0, 0, 0, 0, 0})

	s := New(Config{
		Allow: func(name string) Verdict { return Verdict{Allowed: len(name)%2 == 1, Reason: "fuzz"} },
		Lookup: func(_ context.Context, name string) ([]netip.Addr, error) {
			switch len(name) % 4 {
			case 0:
				return nil, &net.DNSError{IsNotFound: true}
			case 1:
				return nil, errors.New("fuzz failure")
			}
			addrs := make([]netip.Addr, 12)
			for i := range addrs {
				addrs[i] = netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			}
			return addrs, nil
		},
	})
	f.Fuzz(func(t *testing.T, req []byte) {
		check := func(resp []byte, err error, limit int) {
			if err != nil {
				if resp != nil {
					t.Fatalf("Handle returned %d bytes and error %v", len(resp), err)
				}
				return
			}
			var m dnsmessage.Message
			if err := m.Unpack(resp); err != nil {
				t.Fatalf("response does not parse: %v", err)
			}
			if len(req) < 2 || m.ID != binary.BigEndian.Uint16(req) || !m.Response {
				t.Fatalf("response ID %#x QR %v; want the query's ID and QR", m.ID, m.Response)
			}
			if len(m.Questions) > 1 || len(m.Answers) > maxAnswers {
				t.Fatalf("response has %d questions, %d answers", len(m.Questions), len(m.Answers))
			}
			if limit > 0 && len(resp) > limit {
				t.Fatalf("UDP response of %d bytes; want at most %d", len(resp), limit)
			}
		}
		resp, err := s.Handle(t.Context(), req)
		check(resp, err, 0)
		resp, err = s.handleUDP(t.Context(), req)
		check(resp, err, maxUDPSize)
	})
}
