// Package dnsproxy is the per-sandbox DNS server. Netfilter redirects a
// sandbox's UDP and TCP port 53 traffic to it, and it answers only A queries
// for names the sandbox's policy allows, resolving them itself through the
// caller's resolver. Denied names are refused without any upstream lookup, so
// a sandbox cannot tunnel data out through the names it queries. AAAA queries
// for allowed names get an empty answer (sandboxes are IPv4-only), and every
// other query type is refused.
//
// The package parses untrusted input: a malformed UDP packet is dropped and a
// malformed TCP message closes its connection. Neither can panic the server.
package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/net/dns/dnsmessage"
)

const (
	// maxQuerySize bounds the size of a query message. Real queries are a
	// few hundred bytes: a header, one question of at most 255 bytes of
	// name, and an OPT record.
	maxQuerySize = 4096
	// maxNameLen is the longest name in presentation form without the
	// trailing dot (RFC 1035 section 2.3.4).
	maxNameLen = 253
	// maxLabelLen is the longest label (RFC 1035 section 2.3.4).
	maxLabelLen = 63
	// maxAnswers caps the A records in one answer.
	maxAnswers = 8
	// minUDPSize is the UDP response size every client accepts (RFC 1035).
	minUDPSize = 512
	// maxUDPSize is the largest UDP response we send, whatever a client
	// advertises with EDNS0 (the DNS flag day 2020 value).
	maxUDPSize = 1232
	// defaultTTL is the answer TTL when Config.TTL is not set.
	defaultTTL = 30 * time.Second
	// lookupTimeout bounds one call to Config.Lookup.
	lookupTimeout = 5 * time.Second
	// rcodeBadVers is the extended RCODE for an unsupported EDNS version
	// (RFC 6891 section 6.1.3).
	rcodeBadVers dnsmessage.RCode = 16
)

// Verdict is a policy decision about a name.
type Verdict struct {
	// Allowed reports whether the name may be resolved.
	Allowed bool
	// Reason says why, for the log.
	Reason string
}

// Query is the question of one DNS query, as passed to Config.Log.
type Query struct {
	// Name is normalised: lowercase, no trailing dot. It comes from the
	// sandbox and is untrusted: when the name was refused as invalid it may
	// hold any bytes.
	Name string
	// Type is the query type: "A", "AAAA", "TXT", ..., or "TYPE<n>" for a
	// type without a name (RFC 3597).
	Type string
	// Client is the address the query came from and Transport "udp" or
	// "tcp", when it came through ServeUDP or ServeTCP.
	Client    netip.AddrPort
	Transport string
}

// clientKey carries the client of the query being answered in its ctx.
type clientKey struct{}

type client struct {
	addr      netip.AddrPort
	transport string
}

// withClient returns ctx carrying the query's client address.
func withClient(ctx context.Context, addr net.Addr, transport string) context.Context {
	var ap netip.AddrPort
	switch a := addr.(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		return ctx
	}
	return context.WithValue(ctx, clientKey{}, client{addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), transport: transport})
}

// ErrNoAllowedAddress is the error Lookup wraps when the name resolves but
// none of its addresses may be given to the sandbox (the caller's guard
// dropped them all): the response is then an empty answer (NOERROR, no
// records), as for a name without IPv4 addresses, and Answer.Err says why.
var ErrNoAllowedAddress = errors.New("no allowed address")

// Answer is what Lookup returned for an allowed A query.
type Answer struct {
	// Addrs are the IPv4 addresses put in the response, at most 8.
	Addrs []netip.Addr
	// Err is the error from Lookup, if any. An error that wraps
	// ErrNoAllowedAddress came with an empty answer, not a failure.
	Err error
}

// Config configures a Server. All functions may be called concurrently.
type Config struct {
	// Allow decides a name (already normalised and checked to be a valid
	// host name). A nil Allow denies every name.
	Allow func(name string) Verdict
	// Lookup resolves an allowed name to IPv4 addresses (the caller's
	// resolver; in production the same one the egress proxy uses so the
	// box sees the addresses the proxy will accept). Addresses that are not
	// IPv4 are dropped and at most 8 are answered. A *net.DNSError with
	// IsNotFound set, or an error matching errdefs.ErrNotFound, becomes
	// NXDOMAIN; any other error becomes SERVFAIL. Each call is bounded by a
	// 5 s timeout on ctx. An error wrapping ErrNoAllowedAddress becomes an
	// empty answer. A nil Lookup fails every allowed A query with SERVFAIL.
	Lookup func(ctx context.Context, name string) ([]netip.Addr, error)
	// Log is called once per query that carries exactly one question, with
	// the verdict and the answer (nil Answer when denied). Queries refused
	// for their class, type or an invalid name are logged as denied with a
	// Reason saying so. Optional.
	Log func(q Query, v Verdict, a *Answer)
	// TTL of answers (default 30s).
	TTL time.Duration
}

// Server answers DNS queries for one sandbox. Its methods may be called
// concurrently; one Server can serve UDP and TCP at the same time.
type Server struct {
	cfg Config
	ttl uint32 // answer TTL in seconds
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	ttl := cfg.TTL
	if ttl <= 0 {
		ttl = defaultTTL
	}
	secs := ttl / time.Second
	if secs < 1 {
		secs = 1
	}
	if secs > math.MaxInt32 {
		secs = math.MaxInt32
	}
	return &Server{cfg: cfg, ttl: uint32(secs)}
}

// Handle builds the response for one query message, with no size limit (as
// over TCP). It returns an error, and no response, when req is malformed or is
// not a query; the caller drops it. It is exported for tests and fuzzing.
func (s *Server) Handle(ctx context.Context, req []byte) ([]byte, error) {
	r, err := s.reply(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.pack(0)
}

// handleUDP builds the response for a query received over UDP: it is
// truncated, with TC set, when it exceeds 512 bytes or the client's EDNS0
// payload size, capped at 1232.
func (s *Server) handleUDP(ctx context.Context, req []byte) ([]byte, error) {
	r, err := s.reply(ctx, req)
	if err != nil {
		return nil, err
	}
	return r.pack(r.udpLimit())
}

// reply is a response before it is packed.
type reply struct {
	hdr dnsmessage.Header
	// q is the question to reflect; nil when the query did not carry
	// exactly one.
	q *dnsmessage.Question
	// addrs are the IPv4 addresses to answer with.
	addrs []netip.Addr
	ttl   uint32
	// edns is set when the query carried an OPT record; the response then
	// carries one too.
	edns bool
	// ednsSize is the UDP payload size the client advertised.
	ednsSize int
	// extRCode is the full RCODE when it does not fit the header (BADVERS).
	extRCode dnsmessage.RCode
}

// reply parses req and decides the response.
func (s *Server) reply(ctx context.Context, req []byte) (*reply, error) {
	if len(req) > maxQuerySize {
		return nil, fmt.Errorf("query of %d bytes exceeds %d", len(req), maxQuerySize)
	}
	var p dnsmessage.Parser
	h, err := p.Start(req)
	if err != nil {
		return nil, fmt.Errorf("parse header: %w", err)
	}
	if h.Response {
		return nil, errors.New("message is a response, not a query")
	}
	r := &reply{
		hdr: dnsmessage.Header{
			ID:                 h.ID,
			Response:           true,
			OpCode:             h.OpCode,
			RecursionDesired:   h.RecursionDesired,
			RecursionAvailable: true,
		},
		ttl: s.ttl,
	}

	// Exactly one question.
	q, err := p.Question()
	if errors.Is(err, dnsmessage.ErrSectionDone) {
		r.hdr.RCode = dnsmessage.RCodeFormatError
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("parse question: %w", err)
	}
	switch _, err := p.Question(); {
	case err == nil:
		r.hdr.RCode = dnsmessage.RCodeFormatError
		return r, nil
	case !errors.Is(err, dnsmessage.ErrSectionDone):
		return nil, fmt.Errorf("parse question: %w", err)
	}
	r.q = &q

	// EDNS0: at most one OPT record, version 0.
	if err := p.SkipAllAnswers(); err != nil {
		return nil, fmt.Errorf("parse answers: %w", err)
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return nil, fmt.Errorf("parse authorities: %w", err)
	}
	opts, version := 0, uint32(0)
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse additionals: %w", err)
		}
		if rh.Type == dnsmessage.TypeOPT {
			opts++
			r.edns = true
			r.ednsSize = int(rh.Class)
			version = rh.TTL >> 16 & 0xff
		}
		if err := p.SkipAdditional(); err != nil {
			return nil, fmt.Errorf("parse additionals: %w", err)
		}
	}

	switch {
	case opts > 1:
		r.hdr.RCode = dnsmessage.RCodeFormatError
		return r, nil
	case h.OpCode != 0: // QUERY
		r.hdr.RCode = dnsmessage.RCodeNotImplemented
		s.log(ctx, Query{Name: normalise(q.Name), Type: typeString(q.Type)},
			Verdict{Reason: "opcode " + strconv.Itoa(int(h.OpCode)) + " not implemented"}, nil)
		return r, nil
	case opts == 1 && version != 0:
		r.hdr.RCode = rcodeBadVers & 0xf
		r.extRCode = rcodeBadVers
		return r, nil
	}
	r.hdr.RCode, r.addrs = s.answer(ctx, q)
	return r, nil
}

// answer decides the RCODE and addresses for a well-formed question and logs
// the query.
func (s *Server) answer(ctx context.Context, q dnsmessage.Question) (dnsmessage.RCode, []netip.Addr) {
	query := Query{Name: normalise(q.Name), Type: typeString(q.Type)}
	if q.Class != dnsmessage.ClassINET {
		s.log(ctx, query, Verdict{Reason: "class " + strconv.Itoa(int(q.Class)) + " not served"}, nil)
		return dnsmessage.RCodeRefused, nil
	}
	if !validName(query.Name) {
		s.log(ctx, query, Verdict{Reason: "invalid name"}, nil)
		return dnsmessage.RCodeRefused, nil
	}
	if q.Type != dnsmessage.TypeA && q.Type != dnsmessage.TypeAAAA {
		s.log(ctx, query, Verdict{Reason: "type " + query.Type + " not served"}, nil)
		return dnsmessage.RCodeRefused, nil
	}
	v := Verdict{Reason: "no policy"}
	if s.cfg.Allow != nil {
		v = s.cfg.Allow(query.Name)
	}
	if !v.Allowed {
		s.log(ctx, query, v, nil)
		return dnsmessage.RCodeRefused, nil
	}
	if q.Type == dnsmessage.TypeAAAA {
		// Sandboxes are IPv4-only: the name exists but has no AAAA data.
		s.log(ctx, query, v, &Answer{})
		return dnsmessage.RCodeSuccess, nil
	}

	a := s.lookup(ctx, query.Name)
	s.log(ctx, query, v, a)
	switch {
	case a.Err == nil:
		return dnsmessage.RCodeSuccess, a.Addrs
	case errors.Is(a.Err, ErrNoAllowedAddress):
		return dnsmessage.RCodeSuccess, nil
	case isNotFound(a.Err):
		return dnsmessage.RCodeNameError, nil
	default:
		return dnsmessage.RCodeServerFailure, nil
	}
}

// lookup resolves name with Config.Lookup and keeps at most maxAnswers IPv4
// addresses.
func (s *Server) lookup(ctx context.Context, name string) *Answer {
	if s.cfg.Lookup == nil {
		return &Answer{Err: errors.New("no resolver configured")}
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := s.cfg.Lookup(ctx, name)
	if err != nil {
		return &Answer{Err: err}
	}
	a := &Answer{}
	for _, addr := range addrs {
		addr = addr.Unmap()
		if !addr.Is4() {
			continue
		}
		a.Addrs = append(a.Addrs, addr)
		if len(a.Addrs) == maxAnswers {
			break
		}
	}
	return a
}

func (s *Server) log(ctx context.Context, q Query, v Verdict, a *Answer) {
	if s.cfg.Log != nil {
		if c, ok := ctx.Value(clientKey{}).(client); ok {
			q.Client, q.Transport = c.addr, c.transport
		}
		s.cfg.Log(q, v, a)
	}
}

// isNotFound reports whether a Lookup error means the name does not exist.
func isNotFound(err error) bool {
	if dnsErr, ok := errors.AsType[*net.DNSError](err); ok && dnsErr.IsNotFound {
		return true
	}
	return errdefs.IsNotFound(err)
}

// udpLimit is the largest response the client accepts over UDP.
func (r *reply) udpLimit() int {
	if !r.edns {
		return minUDPSize
	}
	return min(max(r.ednsSize, minUDPSize), maxUDPSize)
}

// pack encodes the response. When limit is positive and the full response
// exceeds it, the answers are left out and TC is set, so that the client
// retries over TCP.
func (r *reply) pack(limit int) ([]byte, error) {
	msg, err := r.build(true)
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(msg) > limit {
		r.hdr.Truncated = true
		return r.build(false)
	}
	return msg, nil
}

func (r *reply) build(withAnswers bool) ([]byte, error) {
	b := dnsmessage.NewBuilder(make([]byte, 0, minUDPSize), r.hdr)
	b.EnableCompression()
	if r.q != nil {
		if err := b.StartQuestions(); err != nil {
			return nil, fmt.Errorf("build response: %w", err)
		}
		if err := b.Question(*r.q); err != nil {
			return nil, fmt.Errorf("build response: %w", err)
		}
	}
	if withAnswers && len(r.addrs) > 0 {
		if err := b.StartAnswers(); err != nil {
			return nil, fmt.Errorf("build response: %w", err)
		}
		for _, addr := range r.addrs {
			rh := dnsmessage.ResourceHeader{Name: r.q.Name, Class: dnsmessage.ClassINET, TTL: r.ttl}
			if err := b.AResource(rh, dnsmessage.AResource{A: addr.As4()}); err != nil {
				return nil, fmt.Errorf("build response: %w", err)
			}
		}
	}
	if r.edns {
		if err := b.StartAdditionals(); err != nil {
			return nil, fmt.Errorf("build response: %w", err)
		}
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(maxUDPSize, r.extRCode, false); err != nil {
			return nil, fmt.Errorf("build response: %w", err)
		}
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			return nil, fmt.Errorf("build response: %w", err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil, fmt.Errorf("build response: %w", err)
	}
	return msg, nil
}

// normalise returns a wire name in lowercase (ASCII only) without the
// trailing dot.
func normalise(n dnsmessage.Name) string {
	b := []byte(n.String())
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return strings.TrimSuffix(string(b), ".")
}

// validName reports whether name (normalised) is at most 253 bytes of labels
// of 1 to 63 characters from [a-z0-9-_].
func validName(name string) bool {
	if name == "" || len(name) > maxNameLen {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > maxLabelLen {
			return false
		}
		for i := range len(label) {
			c := label[i]
			if ('a' > c || c > 'z') && ('0' > c || c > '9') && c != '-' && c != '_' {
				return false
			}
		}
	}
	return true
}

// typeString names a query type: "A", "AAAA", ..., or "TYPE<n>".
func typeString(t dnsmessage.Type) string {
	if s, ok := strings.CutPrefix(t.String(), "Type"); ok {
		return s
	}
	return "TYPE" + strconv.Itoa(int(t))
}
