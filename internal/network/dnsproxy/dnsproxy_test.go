package dnsproxy_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/corral-sandbox/corral/internal/network/dnsproxy"
)

// ioTimeout only keeps a broken test from hanging; no assertion depends on it.
const ioTimeout = 30 * time.Second

// longName is a 253-byte name, the longest there is.
var longName = strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." +
	strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)

// logEntry is one call to Config.Log.
type logEntry struct {
	q dnsproxy.Query
	v dnsproxy.Verdict
	a *dnsproxy.Answer
}

// harness is a Server on loopback UDP and TCP sockets with a fake policy and
// resolver.
type harness struct {
	udp, tcp string

	mu      sync.Mutex
	lookups []string   // guarded by mu
	allows  []string   // guarded by mu
	logs    []logEntry // guarded by mu
}

// fakeDNS is what the fake resolver knows. Names under "allowed." or equal
// to an entry are allowed by the fake policy.
var fakeDNS = map[string]struct {
	addrs []string
	err   error
}{
	"example.com": {addrs: []string{"192.0.2.1", "2001:db8::1", "::ffff:192.0.2.2"}},
	"v6only.test": {addrs: []string{"2001:db8::2"}},
	"nx.test":     {err: &net.DNSError{Err: "no such host", Name: "nx.test", IsNotFound: true}},
	"gone.test":   {err: fmt.Errorf("lookup gone.test: %w", errdefs.ErrNotFound)},
	"broken.test": {err: errors.New("upstream timed out")},
	"many.test":   {addrs: manyAddrs(20)},
	"_srv.test":   {addrs: []string{"192.0.2.3"}},
	"example.org": {addrs: []string{"192.0.2.4"}},
	longName:      {addrs: manyAddrs(20)},
	"denied.test": {addrs: []string{"192.0.2.66"}}, // resolvable, but the policy denies it
	// resolvable, but every address is one the caller's guard drops
	"guarded.test": {err: fmt.Errorf("every address is blocked: 127.0.0.1 is a loopback address: %w", dnsproxy.ErrNoAllowedAddress)},
}

func manyAddrs(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("198.51.100.%d", i+1))
	}
	return out
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{}
	s := dnsproxy.New(dnsproxy.Config{
		Allow: func(name string) dnsproxy.Verdict {
			h.mu.Lock()
			h.allows = append(h.allows, name)
			h.mu.Unlock()
			if _, ok := fakeDNS[name]; ok && name != "denied.test" {
				return dnsproxy.Verdict{Allowed: true, Reason: "listed"}
			}
			return dnsproxy.Verdict{Reason: "not listed"}
		},
		Lookup: func(ctx context.Context, name string) ([]netip.Addr, error) {
			h.mu.Lock()
			h.lookups = append(h.lookups, name)
			h.mu.Unlock()
			e, ok := fakeDNS[name]
			if !ok {
				return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
			}
			if e.err != nil {
				return nil, e.err
			}
			var out []netip.Addr
			for _, a := range e.addrs {
				out = append(out, netip.MustParseAddr(a))
			}
			return out, nil
		},
		Log: func(q dnsproxy.Query, v dnsproxy.Verdict, a *dnsproxy.Answer) {
			h.mu.Lock()
			h.logs = append(h.logs, logEntry{q, v, a})
			h.mu.Unlock()
		},
	})

	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.udp, h.tcp = pc.LocalAddr().String(), ln.Addr().String()
	udpDone, tcpDone := make(chan error, 1), make(chan error, 1)
	go func() { udpDone <- s.ServeUDP(pc) }()
	go func() { tcpDone <- s.ServeTCP(ln) }()
	t.Cleanup(func() {
		_ = pc.Close()
		_ = ln.Close()
		if err := <-udpDone; err != nil {
			t.Errorf("ServeUDP after Close = %v; want nil", err)
		}
		if err := <-tcpDone; err != nil {
			t.Errorf("ServeTCP after Close = %v; want nil", err)
		}
	})
	return h
}

func (h *harness) snapshot() (lookups, allows []string, logs []logEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.lookups), slices.Clone(h.allows), slices.Clone(h.logs)
}

// question is one question of a test query.
type question struct {
	name  string // presentation form; a trailing dot is added when missing
	typ   dnsmessage.Type
	class dnsmessage.Class // IN when zero
}

// buildQuery packs a query with the given questions and, when ednsSize is
// positive, an OPT record of that payload size and version.
func buildQuery(t testing.TB, id uint16, opcode dnsmessage.OpCode, qs []question, ednsSize int, ednsVersion uint8) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, OpCode: opcode, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		name := q.name
		if !strings.HasSuffix(name, ".") {
			name += "."
		}
		class := q.class
		if class == 0 {
			class = dnsmessage.ClassINET
		}
		if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: q.typ, Class: class}); err != nil {
			t.Fatal(err)
		}
	}
	if ednsSize > 0 {
		if err := b.StartAdditionals(); err != nil {
			t.Fatal(err)
		}
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false); err != nil {
			t.Fatal(err)
		}
		rh.TTL |= uint32(ednsVersion) << 16
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func query(t testing.TB, id uint16, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	return buildQuery(t, id, 0, []question{{name: name, typ: typ}}, 0, 0)
}

// exchangeUDP sends req and returns the raw response.
func exchangeUDP(t *testing.T, addr string, req []byte) []byte {
	t.Helper()
	c, err := net.Dial("udp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read UDP response: %v", err)
	}
	return buf[:n]
}

func unpack(t *testing.T, raw []byte) *dnsmessage.Message {
	t.Helper()
	var m dnsmessage.Message
	if err := m.Unpack(raw); err != nil {
		t.Fatalf("unpack response: %v", err)
	}
	return &m
}

func answerAddrs(t *testing.T, m *dnsmessage.Message) []string {
	t.Helper()
	var out []string
	for _, rr := range m.Answers {
		a, ok := rr.Body.(*dnsmessage.AResource)
		if !ok {
			t.Fatalf("answer %v is not an A record", rr.Header)
		}
		out = append(out, netip.AddrFrom4(a.A).String())
	}
	return out
}

func TestQueries(t *testing.T) {
	tests := []struct {
		name      string
		qname     string
		qtype     dnsmessage.Type
		wantRCode dnsmessage.RCode
		wantAddrs []string
		wantQuery dnsproxy.Query // what Log gets
		wantAllow bool           // Verdict.Allowed in the log
		wantPol   bool           // Allow was consulted
		wantLook  bool           // Lookup was called
		wantErr   bool           // the logged answer has an error (set for every RCode but success)
	}{
		{
			name: "allowed A keeps IPv4 only", qname: "example.com", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"192.0.2.1", "192.0.2.2"},
			wantQuery: dnsproxy.Query{Name: "example.com", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "case-insensitive with trailing dot", qname: "ExAmPlE.CoM.", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"192.0.2.1", "192.0.2.2"},
			wantQuery: dnsproxy.Query{Name: "example.com", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "at most 8 answers", qname: "many.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: manyAddrs(8),
			wantQuery: dnsproxy.Query{Name: "many.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "allowed name without IPv4", qname: "v6only.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess,
			wantQuery: dnsproxy.Query{Name: "v6only.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "denied name is not looked up", qname: "denied.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeRefused,
			wantQuery: dnsproxy.Query{Name: "denied.test", Type: "A"}, wantPol: true,
		},
		{
			name: "unknown name is denied", qname: "exfil-c2VjcmV0.attacker.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeRefused,
			wantQuery: dnsproxy.Query{Name: "exfil-c2vjcmv0.attacker.test", Type: "A"}, wantPol: true,
		},
		{
			name: "denied AAAA", qname: "denied.test", qtype: dnsmessage.TypeAAAA,
			wantRCode: dnsmessage.RCodeRefused,
			wantQuery: dnsproxy.Query{Name: "denied.test", Type: "AAAA"}, wantPol: true,
		},
		{
			name: "allowed AAAA is empty", qname: "example.com", qtype: dnsmessage.TypeAAAA,
			wantRCode: dnsmessage.RCodeSuccess,
			wantQuery: dnsproxy.Query{Name: "example.com", Type: "AAAA"}, wantAllow: true, wantPol: true,
		},
		{
			name: "TXT refused", qname: "example.com", qtype: dnsmessage.TypeTXT,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "example.com", Type: "TXT"},
		},
		{
			name: "MX refused", qname: "example.com", qtype: dnsmessage.TypeMX,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "example.com", Type: "MX"},
		},
		{
			name: "ANY refused", qname: "example.com", qtype: dnsmessage.TypeALL,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "example.com", Type: "ALL"},
		},
		{
			name: "SRV refused", qname: "_srv.test", qtype: dnsmessage.TypeSRV,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "_srv.test", Type: "SRV"},
		},
		{
			name: "NULL refused", qname: "example.com", qtype: dnsmessage.Type(10),
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "example.com", Type: "TYPE10"},
		},
		{
			name: "underscore label allowed", qname: "_srv.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantAddrs: []string{"192.0.2.3"},
			wantQuery: dnsproxy.Query{Name: "_srv.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "NXDOMAIN from net.DNSError", qname: "nx.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeNameError,
			wantQuery: dnsproxy.Query{Name: "nx.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "NXDOMAIN from errdefs", qname: "gone.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeNameError,
			wantQuery: dnsproxy.Query{Name: "gone.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "SERVFAIL", qname: "broken.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeServerFailure,
			wantQuery: dnsproxy.Query{Name: "broken.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "no allowed address is an empty answer", qname: "guarded.test", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeSuccess, wantErr: true,
			wantQuery: dnsproxy.Query{Name: "guarded.test", Type: "A"}, wantAllow: true, wantPol: true, wantLook: true,
		},
		{
			name: "invalid characters refused", qname: "bad!name.example.com", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "bad!name.example.com", Type: "A"},
		},
		{
			name: "space refused", qname: "a b.example.com", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "a b.example.com", Type: "A"},
		},
		{
			name: "root refused", qname: ".", qtype: dnsmessage.TypeA,
			wantRCode: dnsmessage.RCodeRefused, wantQuery: dnsproxy.Query{Name: "", Type: "A"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			const id = 0xbeef
			req := query(t, id, tc.qname, tc.qtype)
			m := unpack(t, exchangeUDP(t, h.udp, req))

			if m.ID != id || !m.Response || !m.RecursionAvailable || !m.RecursionDesired || m.Truncated {
				t.Errorf("header = %+v; want ID %#x, QR, RA, RD and no TC", m.Header, id)
			}
			if m.RCode != tc.wantRCode {
				t.Errorf("%s %v: RCode = %v; want %v", tc.qname, tc.qtype, m.RCode, tc.wantRCode)
			}
			wantName := tc.qname
			if !strings.HasSuffix(wantName, ".") {
				wantName += "."
			}
			if len(m.Questions) != 1 || m.Questions[0].Name.String() != wantName ||
				m.Questions[0].Type != tc.qtype || m.Questions[0].Class != dnsmessage.ClassINET {
				t.Errorf("questions = %v; want the query's question %q %v IN", m.Questions, wantName, tc.qtype)
			}
			if got := answerAddrs(t, m); !slices.Equal(got, tc.wantAddrs) {
				t.Errorf("answers = %v; want %v", got, tc.wantAddrs)
			}
			for _, rr := range m.Answers {
				if rr.Header.Name.String() != wantName || rr.Header.TTL != 30 || rr.Header.Class != dnsmessage.ClassINET {
					t.Errorf("answer header = %+v; want name %q, TTL 30, class IN", rr.Header, wantName)
				}
			}

			lookups, allows, logs := h.snapshot()
			if got := len(lookups) > 0; got != tc.wantLook {
				t.Errorf("Lookup calls = %q; want called %v", lookups, tc.wantLook)
			}
			if got := len(allows) > 0; got != tc.wantPol {
				t.Errorf("Allow calls = %q; want called %v", allows, tc.wantPol)
			}
			for _, name := range slices.Concat(lookups, allows) {
				if name != tc.wantQuery.Name {
					t.Errorf("policy or resolver got %q; want %q", name, tc.wantQuery.Name)
				}
			}
			if len(logs) != 1 {
				t.Fatalf("Log called %d times; want once", len(logs))
			}
			l := logs[0]
			if !l.q.Client.IsValid() || l.q.Transport != "udp" {
				t.Errorf("Log query client %v over %q; want the client's address over udp", l.q.Client, l.q.Transport)
			}
			l.q.Client, l.q.Transport = netip.AddrPort{}, "" // TestLogClient checks them
			if l.q != tc.wantQuery || l.v.Allowed != tc.wantAllow || l.v.Reason == "" {
				t.Errorf("Log(%+v, %+v, ...); want Log(%+v, {Allowed: %v, Reason: <set>}, ...)", l.q, l.v, tc.wantQuery, tc.wantAllow)
			}
			if (l.a != nil) != tc.wantAllow {
				t.Errorf("Log answer = %+v; want non-nil only when allowed", l.a)
			}
			if l.a != nil {
				var got []string
				for _, a := range l.a.Addrs {
					got = append(got, a.String())
				}
				if !slices.Equal(got, tc.wantAddrs) {
					t.Errorf("logged addrs = %v; want %v", got, tc.wantAddrs)
				}
				if wantErr := tc.wantErr || tc.wantRCode != dnsmessage.RCodeSuccess; (l.a.Err != nil) != wantErr {
					t.Errorf("logged error = %v; want one: %v", l.a.Err, wantErr)
				}
				if tc.wantErr && !errors.Is(l.a.Err, dnsproxy.ErrNoAllowedAddress) {
					t.Errorf("logged error = %v; want it to wrap ErrNoAllowedAddress", l.a.Err)
				}
			}
		})
	}
}

func TestMalformedQueries(t *testing.T) {
	tests := []struct {
		name      string
		req       []byte
		wantRCode dnsmessage.RCode
		wantQs    int
	}{
		{
			name:      "two questions",
			req:       buildQuery(t, 7, 0, []question{{name: "example.com", typ: dnsmessage.TypeA}, {name: "example.org", typ: dnsmessage.TypeA}}, 0, 0),
			wantRCode: dnsmessage.RCodeFormatError,
		},
		{
			name:      "no question",
			req:       buildQuery(t, 7, 0, nil, 0, 0),
			wantRCode: dnsmessage.RCodeFormatError,
		},
		{
			name:      "two OPT records",
			req:       twoOPT(t),
			wantRCode: dnsmessage.RCodeFormatError,
			wantQs:    1,
		},
		{
			name:      "opcode STATUS",
			req:       buildQuery(t, 7, 2, []question{{name: "example.com", typ: dnsmessage.TypeA}}, 0, 0),
			wantRCode: dnsmessage.RCodeNotImplemented,
			wantQs:    1,
		},
		{
			name:      "class CHAOS",
			req:       buildQuery(t, 7, 0, []question{{name: "version.bind", typ: dnsmessage.TypeTXT, class: dnsmessage.ClassCHAOS}}, 0, 0),
			wantRCode: dnsmessage.RCodeRefused,
			wantQs:    1,
		},
		{
			name:      "class CHAOS type A of an allowed name",
			req:       buildQuery(t, 7, 0, []question{{name: "example.com", typ: dnsmessage.TypeA, class: dnsmessage.ClassCHAOS}}, 0, 0),
			wantRCode: dnsmessage.RCodeRefused,
			wantQs:    1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			m := unpack(t, exchangeUDP(t, h.udp, tc.req))
			if m.ID != 7 || !m.Response || m.RCode != tc.wantRCode || len(m.Questions) != tc.wantQs || len(m.Answers) != 0 {
				t.Errorf("response = %+v; want ID 7, QR, RCode %v, %d questions, no answers", m, tc.wantRCode, tc.wantQs)
			}
			if lookups, _, _ := h.snapshot(); len(lookups) != 0 {
				t.Errorf("Lookup called for %q; want no call", lookups)
			}
		})
	}
}

// twoOPT returns an A query for an allowed name carrying two OPT records,
// which RFC 6891 section 6.1.1 makes a FORMERR.
func twoOPT(t *testing.T) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: 7, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName("example.com."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	if err := b.StartAdditionals(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false); err != nil {
			t.Fatal(err)
		}
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

func TestEDNS(t *testing.T) {
	h := newHarness(t)

	m := unpack(t, exchangeUDP(t, h.udp, buildQuery(t, 9, 0, []question{{name: "example.com", typ: dnsmessage.TypeA}}, 4096, 0)))
	if m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 2 {
		t.Errorf("EDNS query: RCode %v with %d answers; want success with 2", m.RCode, len(m.Answers))
	}
	if len(m.Additionals) != 1 || m.Additionals[0].Header.Type != dnsmessage.TypeOPT || m.Additionals[0].Header.Class != 1232 {
		t.Errorf("additionals = %v; want one OPT advertising 1232 bytes", m.Additionals)
	}

	m = unpack(t, exchangeUDP(t, h.udp, buildQuery(t, 10, 0, []question{{name: "example.com", typ: dnsmessage.TypeA}}, 1232, 1)))
	if len(m.Additionals) != 1 || m.Additionals[0].Header.Type != dnsmessage.TypeOPT {
		t.Fatalf("additionals = %v; want one OPT", m.Additionals)
	}
	if got := m.Additionals[0].Header.ExtendedRCode(m.RCode); got != 16 || len(m.Answers) != 0 {
		t.Errorf("EDNS version 1: extended RCode %d with %d answers; want BADVERS (16) with none", got, len(m.Answers))
	}

	m = unpack(t, exchangeUDP(t, h.udp, query(t, 11, "example.com", dnsmessage.TypeA)))
	if len(m.Additionals) != 0 {
		t.Errorf("additionals = %v; want none for a query without OPT", m.Additionals)
	}
}

func TestUDPLongestAnswerFits(t *testing.T) {
	// The longest name with the most answers still fits 512 bytes thanks to
	// name compression, so clients without TCP (old musl) get every answer.
	h := newHarness(t)
	raw := exchangeUDP(t, h.udp, query(t, 12, longName, dnsmessage.TypeA))
	m := unpack(t, raw)
	if m.Truncated || len(m.Answers) != 8 || len(raw) > 512 {
		t.Errorf("%d-byte name: %d bytes, TC %v, %d answers; want <= 512 bytes, no TC, 8 answers", len(longName), len(raw), m.Truncated, len(m.Answers))
	}
}

func TestUDPDropsMalformed(t *testing.T) {
	h := newHarness(t)
	c, err := net.Dial("udp4", h.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}

	resp := query(t, 1, "example.com", dnsmessage.TypeA)
	resp[2] |= 0x80 // QR: a response, not a query
	junk := [][]byte{
		{},
		{0x12},
		bytes.Repeat([]byte{0xff}, 11),
		bytes.Repeat([]byte{0xff}, 100),
		query(t, 2, "example.com", dnsmessage.TypeA)[:20], // cut in the question
		resp,
		make([]byte, 5000), // over the size bound
	}
	for _, j := range junk {
		if _, err := c.Write(j); err != nil {
			t.Fatal(err)
		}
	}
	// Only the valid query is answered: the first response read is its.
	if _, err := c.Write(query(t, 3, "example.com", dnsmessage.TypeA)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	if m := unpack(t, buf[:n]); m.ID != 3 || m.RCode != dnsmessage.RCodeSuccess {
		t.Errorf("first response: ID %d RCode %v; want ID 3 success (junk must get no response)", m.ID, m.RCode)
	}
}

// writeTCP writes msgs each with its 2-byte length prefix, in one write.
func writeTCP(t *testing.T, c net.Conn, msgs ...[]byte) {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		out = binary.BigEndian.AppendUint16(out, uint16(len(m)))
		out = append(out, m...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
}

func readTCP(t *testing.T, c net.Conn) *dnsmessage.Message {
	t.Helper()
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("read TCP length: %v", err)
	}
	buf := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read TCP message: %v", err)
	}
	return unpack(t, buf)
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp4", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	return c
}

// wantClosed asserts that the server closes c without sending anything.
func wantClosed(t *testing.T, c net.Conn) {
	t.Helper()
	var b [1]byte
	n, err := c.Read(b[:])
	var ne net.Error
	if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("Read = %d, %v; want the connection closed by the server", n, err)
	}
}

func TestTCP(t *testing.T) {
	h := newHarness(t)
	c := dialTCP(t, h.tcp)

	// Two pipelined queries on one connection, answered in order.
	writeTCP(t, c, query(t, 21, "example.com", dnsmessage.TypeA), query(t, 22, "denied.test", dnsmessage.TypeA))
	if m := readTCP(t, c); m.ID != 21 || m.RCode != dnsmessage.RCodeSuccess || len(m.Answers) != 2 {
		t.Errorf("first TCP response: ID %d RCode %v %d answers; want ID 21 success with 2", m.ID, m.RCode, len(m.Answers))
	}
	if m := readTCP(t, c); m.ID != 22 || m.RCode != dnsmessage.RCodeRefused {
		t.Errorf("second TCP response: ID %d RCode %v; want ID 22 refused", m.ID, m.RCode)
	}
	// A third, after the first two were answered, on the same connection.
	writeTCP(t, c, query(t, 23, "many.test", dnsmessage.TypeA))
	if m := readTCP(t, c); m.ID != 23 || len(m.Answers) != 8 || m.Truncated {
		t.Errorf("third TCP response: ID %d, %d answers, TC %v; want ID 23, 8 answers, no TC", m.ID, len(m.Answers), m.Truncated)
	}
	if lookups, _, _ := h.snapshot(); !slices.Equal(lookups, []string{"example.com", "many.test"}) {
		t.Errorf("lookups = %q; want [example.com many.test]", lookups)
	}
}

func TestTCPMalformedCloses(t *testing.T) {
	tests := []struct {
		name string
		raw  []byte
	}{
		{"garbage message", append([]byte{0, 4}, 1, 2, 3, 4)},
		{"zero length", []byte{0, 0}},
		{"over the size bound", []byte{0xff, 0xff}},
		{"response instead of query", func() []byte {
			q := query(t, 1, "example.com", dnsmessage.TypeA)
			q[2] |= 0x80
			return append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)
		}()},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			c := dialTCP(t, h.tcp)
			if _, err := c.Write(tc.raw); err != nil {
				t.Fatal(err)
			}
			wantClosed(t, c)
		})
	}
}

func TestTCPConnectionLimit(t *testing.T) {
	h := newHarness(t)
	conns := make([]net.Conn, 64)
	for i := range conns {
		conns[i] = dialTCP(t, h.tcp)
		// A round trip proves the server accepted it and holds a slot.
		writeTCP(t, conns[i], query(t, uint16(i), "example.com", dnsmessage.TypeAAAA))
		if m := readTCP(t, conns[i]); m.ID != uint16(i) {
			t.Fatalf("conn %d: response ID %d; want %d", i, m.ID, i)
		}
	}
	extra := dialTCP(t, h.tcp)
	wantClosed(t, extra)

	// Once a connection closes its slot frees up; the server notices
	// asynchronously, so retry until a new connection is served.
	_ = conns[0].Close()
	for {
		c := dialTCP(t, h.tcp)
		writeTCP(t, c, query(t, 99, "example.com", dnsmessage.TypeAAAA))
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err == nil {
			break
		}
		_ = c.Close()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLogClient checks that the log of a query names the address it came
// from and its transport, so that the caller can find the process that
// sent it.
func TestLogClient(t *testing.T) {
	h := newHarness(t)
	c, err := net.Dial("udp4", h.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(query(t, 31, "denied.test", dnsmessage.TypeA)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Read(make([]byte, 2048)); err != nil {
		t.Fatal(err)
	}
	tc := dialTCP(t, h.tcp)
	writeTCP(t, tc, query(t, 32, "denied.test", dnsmessage.TypeA))
	readTCP(t, tc)
	_, _, logs := h.snapshot()
	want := []dnsproxy.Query{
		{Name: "denied.test", Type: "A", Client: c.LocalAddr().(*net.UDPAddr).AddrPort(), Transport: "udp"},
		{Name: "denied.test", Type: "A", Client: tc.LocalAddr().(*net.TCPAddr).AddrPort(), Transport: "tcp"},
	}
	if len(logs) != 2 || logs[0].q != want[0] || logs[1].q != want[1] {
		t.Errorf("logged queries = %+v; want %+v", logs, want)
	}
}
