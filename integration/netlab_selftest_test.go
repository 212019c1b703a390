//go:build integration

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/net/dns/dnsmessage"
)

// TestNetLab checks the lab from the host (DNS over UDP and TCP, HTTP and
// HTTPS on both servers, metadata, UDP and TCP echo) and that its cleanup
// leaves nothing behind.
func TestNetLab(t *testing.T) {
	var link string
	t.Run("lab", func(t *testing.T) {
		l := startNetLab(t)
		link = l.Link
		if _, err := os.Stat("/sys/class/net/" + l.Link); err != nil {
			t.Fatalf("host end of the veth: %v", err)
		}
		t.Run("dns", func(t *testing.T) { testLabDNS(t, l) })
		t.Run("resolver", func(t *testing.T) { testLabResolver(t, l) })
		t.Run("http", func(t *testing.T) { testLabHTTP(t, l) })
		t.Run("metadata", func(t *testing.T) { testLabMetadata(t, l) })
		t.Run("echo", func(t *testing.T) { testLabEcho(t, l) })
		t.Run("reset", func(t *testing.T) {
			l.Reset()
			if q, r, u, c := l.DNSQueries(), l.Requests("allowed.test"), l.UDPPackets(), l.TCPEchoConns(); len(q)+len(r)+u+c != 0 {
				t.Errorf("after Reset: queries %q, requests %v, UDP packets %d, TCP conns %d; want none", q, r, u, c)
			}
		})
		t.Run("leftover-detection", func(t *testing.T) {
			// Treat the running lab as closed: the check must see it.
			found := strings.Join(labLeftovers(nil, map[uint64]bool{l.nsIno: true}), "\n")
			for _, want := range []string{"network link " + l.Link, "route ", "in lab netns"} {
				if !strings.Contains(found, want) {
					t.Errorf("labLeftovers with the lab running = %q; want it to report %q", found, want)
				}
			}
		})
	})
	requireNoLabLeftovers(t)
	if link == "" {
		t.Fatal("the lab did not start")
	}
	if _, err := os.Stat("/sys/class/net/" + link); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stat /sys/class/net/%s after cleanup: %v; want not exist", link, err)
	}
}

func testLabDNS(t *testing.T, l *netLab) {
	l.Reset()
	tests := []struct {
		name  string
		qtype uint16
		rcode dnsmessage.RCode
		want  []netip.Addr
	}{
		{"allowed.test", 1, dnsmessage.RCodeSuccess, []netip.Addr{labAllowed}},
		{"Deep.Sub.ALLOWED.test.", 1, dnsmessage.RCodeSuccess, []netip.Addr{labAllowed}},
		{"forbidden.test", 1, dnsmessage.RCodeSuccess, []netip.Addr{labForbidden}},
		{"rebind.test", 1, dnsmessage.RCodeSuccess, []netip.Addr{labMetadata}},
		{"loopback.test", 1, dnsmessage.RCodeSuccess, []netip.Addr{labLoopback}},
		{"allowed.test", 28, dnsmessage.RCodeSuccess, nil}, // AAAA
		{"notallowed.test", 1, dnsmessage.RCodeNameError, nil},
		{"forbidden.test.example", 1, dnsmessage.RCodeNameError, nil},
		{"nope.test", 28, dnsmessage.RCodeNameError, nil},
	}
	c, err := net.Dial("udp", l.DNS.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wantLog []string
	for i, tc := range tests {
		id := uint16(0x4c00 + i)
		if _, err := c.Write(dnsQuery(id, tc.qtype, tc.name)); err != nil {
			t.Fatal(err)
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second)) // against a hang, not a timing check
		buf := make([]byte, 1500)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("query %s type %d: %v", tc.name, tc.qtype, err)
		}
		h, got, err := parseDNSAnswer(buf[:n])
		if err != nil {
			t.Fatalf("query %s type %d: parse answer: %v", tc.name, tc.qtype, err)
		}
		if h.ID != id || !h.Response || !h.Authoritative || h.RCode != tc.rcode || !slices.Equal(got, tc.want) {
			t.Errorf("query %s type %d = id %#x, response %v, aa %v, %v, %v; want id %#x, response, aa, %v, %v",
				tc.name, tc.qtype, h.ID, h.Response, h.Authoritative, h.RCode, got, id, tc.rcode, tc.want)
		}
		wantLog = append(wantLog, strings.TrimSuffix(strings.ToLower(tc.name), "."))
	}
	if diff := cmp.Diff(wantLog, l.DNSQueries()); diff != "" {
		t.Errorf("DNSQueries() mismatch (-want +got):\n%s", diff)
	}
}

func testLabResolver(t *testing.T, l *netLab) {
	for _, network := range []string{"udp", "tcp"} {
		t.Run(network, func(t *testing.T) {
			l.Reset()
			r := labResolver(l, network)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			got, err := r.LookupNetIP(ctx, "ip", "api.allowed.test")
			if err != nil || !slices.Equal(got, []netip.Addr{labAllowed}) {
				t.Errorf("LookupNetIP(api.allowed.test) = %v, %v; want [%s]", got, err, labAllowed)
			}
			_, err = r.LookupNetIP(ctx, "ip4", "missing.test")
			var dnsErr *net.DNSError
			if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
				t.Errorf("LookupNetIP(missing.test) error = %v; want a not-found DNS error", err)
			}
			if q := l.DNSQueries(); !slices.Contains(q, "api.allowed.test") || !slices.Contains(q, "missing.test") {
				t.Errorf("DNSQueries() = %q; want api.allowed.test and missing.test", q)
			}
		})
	}
}

func testLabHTTP(t *testing.T, l *netLab) {
	l.Reset()
	client := labHTTPClient(t, l, nil)
	tests := []struct {
		url, server, wantHost, wantSNI string
		tls                            bool
	}{
		{"http://allowed.test/a", "allowed.test", "allowed.test", "", false},
		{"https://www.allowed.test/b", "allowed.test", "www.allowed.test", "www.allowed.test", true},
		{"http://forbidden.test/c", "forbidden.test", "forbidden.test", "", false},
		{"https://forbidden.test/d", "forbidden.test", "forbidden.test", "forbidden.test", true},
	}
	for _, tc := range tests {
		body, err := labGet(client, tc.url, "")
		if want := "hello from " + tc.server; err != nil || body != want {
			t.Errorf("GET %s = %q, %v; want %q", tc.url, body, err, want)
		}
		reqs := l.Requests(tc.wantHost)
		if len(reqs) == 0 {
			t.Fatalf("Requests(%q) is empty after GET %s", tc.wantHost, tc.url)
		}
		got := reqs[len(reqs)-1]
		want := labRequest{Host: tc.wantHost, Method: "GET", Path: tc.url[strings.LastIndex(tc.url, "/"):], TLS: tc.tls, SNI: tc.wantSNI}
		if got.Host != want.Host || got.Method != want.Method || got.Path != want.Path || got.TLS != want.TLS || got.SNI != want.SNI ||
			!strings.HasPrefix(got.Remote, labHostAddr.String()+":") || got.Header.Get("User-Agent") == "" {
			t.Errorf("request recorded for GET %s = %+v; want %+v from %s", tc.url, got, want, labHostAddr)
		}
	}
	if n, m := len(l.Requests("allowed.test")), len(l.Requests(labForbidden.String())); n != 2 || m != 2 {
		t.Errorf("requests to allowed, forbidden = %d, %d; want 2, 2", n, m)
	}
	if r := l.Requests("elsewhere.test"); r != nil {
		t.Errorf("Requests(elsewhere.test) = %v; want nil", r)
	}

	// A server answers with its own name, whatever the Host header says,
	// and records the request under its own address.
	l.Reset()
	body, err := labGet(client, "http://"+labForbidden.String()+"/", "allowed.test")
	if err != nil || body != "hello from forbidden.test" {
		t.Errorf("GET forbidden server with Host allowed.test = %q, %v; want hello from forbidden.test", body, err)
	}
	if r := l.Requests("forbidden.test"); len(r) != 1 || r[0].Host != "allowed.test" || len(l.Requests("allowed.test")) != 0 {
		t.Errorf("Requests(forbidden.test) = %+v, Requests(allowed.test) = %+v; want one with Host allowed.test, none", r, l.Requests("allowed.test"))
	}

	// Each server presents its own certificate: the forbidden one is not
	// valid for allowed.test.
	l.Reset()
	wrong := labHTTPClient(t, l, func(context.Context, string, string) (net.Conn, error) {
		return net.Dial("tcp", netip.AddrPortFrom(labForbidden, 443).String())
	})
	_, err = labGet(wrong, "https://allowed.test/", "")
	var verr *tls.CertificateVerificationError
	if !errors.As(err, &verr) {
		t.Errorf("GET https://allowed.test/ at the forbidden server: error %v; want a certificate verification error", err)
	}
	if r := l.Requests("forbidden.test"); len(r) != 0 {
		t.Errorf("Requests(forbidden.test) after a failed handshake = %+v; want none", r)
	}
}

func testLabMetadata(t *testing.T, l *netLab) {
	l.Reset()
	body, err := labGet(&http.Client{Timeout: 30 * time.Second}, "http://169.254.169.254/latest/meta-data/", "")
	if err != nil || body != labMetaBody {
		t.Errorf("GET metadata = %q, %v; want %q", body, err, labMetaBody)
	}
	if r := l.Requests("rebind.test"); len(r) != 1 || r[0].Path != "/latest/meta-data/" || r[0].Host != "169.254.169.254" {
		t.Errorf("Requests(rebind.test) = %+v; want the metadata request", r)
	}
}

func testLabEcho(t *testing.T, l *netLab) {
	l.Reset()
	for _, network := range []string{"udp", "tcp"} {
		port := uint16(9999)
		if network == "tcp" {
			port = 7
		}
		c, err := net.Dial(network, netip.AddrPortFrom(l.Allowed, port).String())
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second)) // against a hang, not a timing check
		msg := "ping over " + network
		if _, err := io.WriteString(c, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
			t.Errorf("%s echo = %q, %v; want %q", network, buf, err, msg)
		}
		c.Close()
	}
	if u, c := l.UDPPackets(), l.TCPEchoConns(); u != 1 || c != 1 {
		t.Errorf("UDPPackets(), TCPEchoConns() = %d, %d; want 1, 1", u, c)
	}
}

// labResolver resolves through the lab's DNS over network (udp or tcp).
func labResolver(l *netLab, network string) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, l.DNS.String())
		},
	}
}

// labHTTPClient trusts the lab's CA and resolves through the lab's DNS, or
// dials with dial when it is not nil.
func labHTTPClient(t *testing.T, l *netLab, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Client {
	t.Helper()
	pem, err := os.ReadFile(l.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", l.CAFile)
	}
	if dial == nil {
		dial = (&net.Dialer{Resolver: labResolver(l, "udp")}).DialContext
	}
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:       dial,
			TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}
}

// labGet returns the body of GET url, sent with the Host header host when
// it is not empty.
func labGet(c *http.Client, url, host string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = errors.New(resp.Status)
	}
	return string(b), err
}

// dnsQuery builds a query by hand: a header asking for recursion, then one
// question of class IN.
func dnsQuery(id, qtype uint16, name string) []byte {
	b := binary.BigEndian.AppendUint16(nil, id)
	b = append(b, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0) // RD; QDCOUNT 1
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, qtype)
	return binary.BigEndian.AppendUint16(b, 1)
}

// parseDNSAnswer returns the header and the A records of a DNS answer.
func parseDNSAnswer(msg []byte) (dnsmessage.Header, []netip.Addr, error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return h, nil, err
	}
	if err := p.SkipAllQuestions(); err != nil {
		return h, nil, err
	}
	var addrs []netip.Addr
	for {
		rh, err := p.AnswerHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			return h, addrs, nil
		}
		if err != nil {
			return h, nil, err
		}
		if rh.Type != dnsmessage.TypeA {
			if err := p.SkipAnswer(); err != nil {
				return h, nil, err
			}
			continue
		}
		a, err := p.AResource()
		if err != nil {
			return h, nil, err
		}
		addrs = append(addrs, netip.AddrFrom4(a.A))
	}
}

// FuzzLabDNSReply checks that the lab's DNS never panics and that every
// reply it makes parses and matches the query's ID.
func FuzzLabDNSReply(f *testing.F) {
	f.Add(dnsQuery(1, 1, "allowed.test"))
	f.Add(dnsQuery(2, 28, "x.allowed.test"))
	f.Add(dnsQuery(3, 1, "nope.test"))
	f.Add(dnsQuery(4, 255, "rebind.test"))
	f.Add([]byte{0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0})                // a response
	f.Add([]byte{0, 1, 0x01, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1}) // two questions, one given
	f.Add([]byte{0, 1, 0x01, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, msg []byte) {
		reply, name, ok := labDNSReply(msg)
		if reply == nil {
			return
		}
		h, _, err := parseDNSAnswer(reply)
		if err != nil {
			t.Fatalf("labDNSReply(%x) = %x, which does not parse: %v", msg, reply, err)
		}
		if !h.Response || h.ID != binary.BigEndian.Uint16(msg) {
			t.Fatalf("labDNSReply(%x) header = %+v; want a response with the query's ID", msg, h)
		}
		if ok && name != strings.ToLower(name) {
			t.Fatalf("labDNSReply(%x) name = %q; want lowercase", msg, name)
		}
	})
}
