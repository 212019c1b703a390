package network

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/network/dnsproxy"
	"github.com/corral-sandbox/corral/internal/network/sniff"
	"github.com/corral-sandbox/corral/internal/secrets"
)

const (
	// Error is the verdict of an allowed connection that could not be made.
	Error = "error"
	// sniffMax bounds the first bytes read to learn a destination name.
	sniffMax = 64 << 10
	// sniffWait is how long the proxy waits for a client's first bytes
	// (a server-speaks-first protocol sends none); sniffWaitByIP when the
	// address alone is allowed, so such protocols are not held up long.
	sniffWait     = 5 * time.Second
	sniffWaitByIP = 300 * time.Millisecond
)

func (b *boxNet) serve() {
	for {
		c, err := b.ls.proxy.Accept()
		if err != nil {
			if b.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		b.conns.Store(c, struct{}{})
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer b.conns.Delete(c)
			defer c.Close()
			b.handle(c)
		}()
	}
}

// conn is one proxied client connection and its current upstream.
type conn struct {
	b      *boxNet
	client net.Conn // counted
	ev     *Event
	start  time.Time
}

func (b *boxNet) newEvent(kind string, base *Event) *Event {
	ev := &Event{Time: time.Now().UTC(), Sandbox: b.id, Kind: kind}
	if base != nil {
		ev.Exec, ev.Process = base.Exec, base.Process
	}
	return ev
}

func (b *boxNet) record(ev *Event, verdict, reason string) {
	ev.Verdict, ev.Reason = verdict, reason
	if verdict == Allow {
		ev.DurationMS = time.Since(ev.Time).Milliseconds()
	}
	b.log.add(*ev)
	if f := b.s.cfg.Events; f != nil {
		f(*ev)
	}
	b.s.counters.verdict(verdict)
	if f := b.s.cfg.Activity; f != nil {
		f(b.id)
	}
}

func (b *boxNet) handle(raw net.Conn) {
	ev := b.newEvent("tcp", nil)
	dst, err := originalDst(raw)
	if err != nil {
		b.record(ev, Deny, err.Error())
		return
	}
	if ta, ok := raw.RemoteAddr().(*net.TCPAddr); ok && b.pid > 0 {
		ev.Exec, ev.Process = attribute(b.diag, b.pid, netip.AddrPortFrom(ta.AddrPort().Addr().Unmap(), ta.AddrPort().Port()), dst)
	}
	ev.Addr, ev.Port = dst.Addr().String(), dst.Port()
	if !b.bucket.take() {
		b.record(ev, Deny, fmt.Sprintf("connection rate limit of %d per minute exceeded", b.limits().ConnectionsPerMinute))
		return
	}
	if reason := b.overBudget(); reason != "" {
		b.record(ev, Deny, reason)
		return
	}
	c := &countedConn{Conn: raw, b: b, ev: ev}
	if dst.Addr() == Gateway || dst.Addr().IsLoopback() {
		b.explicit(c, ev)
		return
	}
	b.transparent(c, dst, ev)
}

func (b *boxNet) overBudget() string {
	if l := b.limits().EgressBytes; l > 0 && b.used.Load() >= l {
		return fmt.Sprintf("egress budget of %d bytes used up", l)
	}
	return ""
}

// decide applies the box's policy to a destination: a name when the box
// gave one, else the address.
func (b *boxNet) decide(name string, ip netip.Addr, port uint16) (bool, string) {
	pol := b.policy.Load()
	if name != "" {
		if lit, ok := netpolicy.ParseIPLiteral(name); ok {
			name, ip = "", lit
		}
	}
	if name != "" {
		return pol.AllowName(name, port)
	}
	if !ip.IsValid() {
		return false, "no destination"
	}
	return pol.AllowAddr(ip, port)
}

// dial connects to name (resolved by the daemon, never by the box) or ip
// on port, only at an address the guard allows: the address checked is the
// address dialled. It returns the connection, or the verdict and reason.
func (b *boxNet) dial(name string, ip netip.Addr, port uint16, ev *Event) (net.Conn, string, string) {
	var addrs []netip.Addr
	if name != "" {
		if lit, ok := netpolicy.ParseIPLiteral(name); ok {
			name, ip = "", lit
		}
	}
	if name != "" {
		got, reason, err := b.resolve(b.ctx, name)
		if err != nil {
			return nil, Error, fmt.Sprintf("resolve %s: %v", name, err)
		}
		if len(got) == 0 {
			return nil, Deny, fmt.Sprintf("%s resolves to %v (%s)", name, dnsproxy.ErrNoAllowedAddress, reason)
		}
		addrs = got
	} else {
		if err := b.s.cfg.Guard.Check(ip.Unmap()); err != nil {
			return nil, Deny, err.Error()
		}
		addrs = []netip.Addr{ip.Unmap()}
	}
	var last error
	for _, a := range addrs {
		ev.Addr = a.String()
		ctx, cancel := context.WithTimeout(b.ctx, b.s.cfg.DialTimeout)
		up, err := b.s.cfg.Dial(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		cancel()
		if err == nil {
			b.conns.Store(up, struct{}{})
			return &countedConn{Conn: up, b: b, ev: ev, upstream: true}, "", ""
		}
		last = err
	}
	return nil, Error, fmt.Sprintf("connect: %v", last)
}

func (b *boxNet) release(up net.Conn) {
	if cc, ok := up.(*countedConn); ok {
		b.conns.Delete(cc.Conn)
	}
	up.Close()
}

// transparent serves a connection the box made to dst.
func (b *boxNet) transparent(c net.Conn, dst netip.AddrPort, ev *Event) {
	wait := sniffWait
	if ok, _ := b.decide("", dst.Addr(), dst.Port()); ok {
		wait = sniffWaitByIP
	}
	res, prefix, timedOut, err := sniffFirst(c, wait)
	if err != nil {
		why := fmt.Sprintf("unreadable first bytes: %v", err)
		b.record(ev, Deny, why)
		if res.Kind == sniff.HTTP {
			deny(c, http.StatusBadRequest, why)
		}
		return
	}
	if timedOut {
		res = sniff.Result{Kind: sniff.Unknown}
	}
	client := sniff.Replay(c, prefix)
	switch res.Kind {
	case sniff.HTTP:
		b.httpLoop(client, bufio.NewReader(client), nil, "", dst.Port(), ev)
	case sniff.TLS:
		b.tunnel(client, res.Name, dst.Addr(), dst.Port(), ev)
	default:
		b.tunnel(client, "", dst.Addr(), dst.Port(), ev)
	}
}

// sniffFirst reads a connection's first bytes for at most wait. A client
// that sends nothing in time is no error: timedOut says so and prefix holds
// what arrived.
func sniffFirst(c net.Conn, wait time.Duration) (res sniff.Result, prefix []byte, timedOut bool, err error) {
	c.SetReadDeadline(time.Now().Add(wait))
	res, prefix, err = sniff.Sniff(c, sniffMax)
	c.SetReadDeadline(time.Time{})
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return res, prefix, true, nil
	}
	return res, prefix, false, err
}

// tunnel decides and forwards a connection whose content is opaque (TLS
// or an unknown protocol), intercepting TLS when a secret may go to name.
func (b *boxNet) tunnel(client net.Conn, name string, ip netip.Addr, port uint16, ev *Event) {
	ev.Host = name
	ok, reason := b.decide(name, ip, port)
	if !ok {
		b.record(ev, Deny, reason)
		return
	}
	up, verdict, why := b.dial(name, ip, port, ev)
	if up == nil {
		b.record(ev, verdict, why)
		return
	}
	defer b.release(up)
	if name != "" && b.ca != nil && secrets.Wants(b.bindings(), name) {
		b.intercept(client, up, name, port, ev)
		return
	}
	pipe(client, up)
	b.record(ev, Allow, reason)
}

// pipe copies both ways until either side ends.
func pipe(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	cp := func(dst, src net.Conn) {
		defer wg.Done()
		io.Copy(dst, src)
		// Half-close where possible so the other direction can finish.
		if cw, ok := unwrap(dst).(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		} else {
			dst.Close()
		}
	}
	go cp(a, b)
	go cp(b, a)
	wg.Wait()
}

func unwrap(c net.Conn) net.Conn {
	for {
		switch v := c.(type) {
		case *countedConn:
			c = v.Conn
		default:
			return c
		}
	}
}

// explicit serves the HTTP proxy the box reaches at Gateway (any port):
// CONNECT tunnels and absolute-form HTTP requests.
func (b *boxNet) explicit(c net.Conn, ev *Event) {
	br := bufio.NewReader(c)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	req, err := http.ReadRequest(br)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		ev.Kind = "http"
		b.record(ev, Deny, fmt.Sprintf("not an HTTP proxy request: %v", err))
		return
	}
	if req.Method != http.MethodConnect {
		ev.Kind = "http"
		b.httpLoop(c, br, req, "", 80, ev)
		return
	}
	ev.Kind = "connect"
	host, port, err := sniff.ParseHostHeader(req.RequestURI)
	if err == nil && port == 0 {
		port = 443
	}
	ev.Host, ev.Port, ev.Addr = host, port, ""
	if err != nil {
		b.record(ev, Deny, err.Error())
		deny(c, http.StatusBadRequest, err.Error())
		return
	}
	ok, reason := b.decide(host, netip.Addr{}, port)
	if !ok {
		b.record(ev, Deny, reason)
		deny(c, http.StatusForbidden, reason)
		return
	}
	up, verdict, why := b.dial(host, netip.Addr{}, port, ev)
	if up == nil {
		b.record(ev, verdict, why)
		deny(c, statusFor(verdict), why)
		return
	}
	defer b.release(up)
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	// What the client sends through the tunnel must name the same host.
	tc := &bufConn{Conn: c, r: br}
	res, prefix, _, err := sniffFirst(tc, sniffWait)
	if err != nil {
		b.record(ev, Deny, fmt.Sprintf("unreadable first bytes: %v", err))
		return
	}
	client := sniff.Replay(tc, prefix)
	switch res.Kind {
	case sniff.TLS:
		if res.Name != "" && !strings.EqualFold(res.Name, host) {
			b.record(ev, Deny, fmt.Sprintf("TLS server name %q differs from the CONNECT host %q", res.Name, host))
			return
		}
		if b.ca != nil && secrets.Wants(b.bindings(), host) {
			b.intercept(client, up, host, port, ev)
			return
		}
	case sniff.HTTP:
		if res.Name != "" && !strings.EqualFold(res.Name, host) {
			b.record(ev, Deny, fmt.Sprintf("HTTP Host %q differs from the CONNECT host %q", res.Name, host))
			return
		}
		b.httpLoop(client, bufio.NewReader(client), nil, host, port, ev, up)
		return
	}
	pipe(client, up)
	b.record(ev, Allow, reason)
}

// deny answers an HTTP client that its request was refused, with the reason.
// Callers record the decision first: a client that exits on the answer
// must find it in the trail before its command's end.
func deny(w io.Writer, code int, reason string) {
	body := "corral: egress denied: " + reason + "\n"
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Corral-Denied: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), strings.ReplaceAll(reason, "\n", " "), len(body), body)
}

func statusFor(verdict string) int {
	if verdict == Deny {
		return http.StatusForbidden
	}
	return http.StatusBadGateway
}

// bufConn reads through r (which may hold bytes already read from Conn).
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (b *boxNet) bindings() []secrets.Binding {
	set := b.settings.Load()
	out := make([]secrets.Binding, 0, len(set.Secrets))
	for _, s := range set.Secrets {
		out = append(out, secrets.Binding{Name: s.Name, Placeholder: s.Placeholder, Hosts: s.Hosts})
	}
	return out
}

// intercept terminates the box's TLS with a certificate from the box's CA,
// opens TLS to the real server (verified against the host's roots) and
// serves HTTP between them, substituting secrets.
func (b *boxNet) intercept(client, up net.Conn, host string, port uint16, ev *Event) {
	ctx, cancel := context.WithTimeout(b.ctx, 15*time.Second)
	defer cancel()
	ts := tls.Server(client, b.ca.TLSConfig())
	if err := ts.HandshakeContext(ctx); err != nil {
		b.record(ev, Deny, fmt.Sprintf("TLS from the box: %v", err))
		return
	}
	if sn := ts.ConnectionState().ServerName; sn != "" && !strings.EqualFold(sn, host) {
		b.record(ev, Deny, fmt.Sprintf("TLS server name %q differs from %q", sn, host))
		return
	}
	tu := tls.Client(up, &tls.Config{ServerName: host, RootCAs: b.s.cfg.RootCAs, NextProtos: []string{"http/1.1"}})
	if err := tu.HandshakeContext(ctx); err != nil {
		b.record(ev, Error, fmt.Sprintf("TLS to %s: %v", host, err))
		return
	}
	b.httpLoop(ts, bufio.NewReader(ts), nil, host, port, ev, tu)
}

// httpLoop proxies HTTP/1.x requests read from br (first, when set, is
// one already read). Every request's host is decided; with pinned set
// (TLS, CONNECT) it must be that host. An upstream given in ups serves
// requests for pinned. Secrets are substituted in the headers of requests
// to their hosts.
func (b *boxNet) httpLoop(client net.Conn, br *bufio.Reader, first *http.Request, pinned string, defPort uint16, ev *Event, ups ...net.Conn) {
	var (
		up      net.Conn
		upbr    *bufio.Reader
		curHost string
		curPort uint16
		reason  string
		used    []string
	)
	finish := func(verdict, why string) {
		if up != nil {
			ev.Secrets = used
			b.record(ev, verdict, why)
			if len(ups) == 0 || up != ups[0] {
				b.release(up)
			}
			up = nil
		}
	}
	defer func() {
		if up != nil {
			finish(Allow, reason)
		}
	}()
	if len(ups) > 0 {
		up, upbr, curHost, curPort = ups[0], bufio.NewReader(ups[0]), pinned, defPort
		ev.Host, ev.Port = pinned, defPort
		_, reason = b.decide(pinned, netip.Addr{}, defPort)
	}
	for {
		req := first
		first = nil
		if req == nil {
			var err error
			if req, err = http.ReadRequest(br); err != nil {
				return
			}
		}
		host, port, err := sniff.ParseHostHeader(req.Host)
		if err != nil {
			deny(client, http.StatusBadRequest, err.Error())
			return
		}
		if port == 0 {
			port = defPort
			if req.URL.IsAbs() && req.URL.Scheme == "http" {
				port = 80
			}
		}
		if pinned != "" && !strings.EqualFold(host, pinned) {
			why := fmt.Sprintf("HTTP Host %q differs from the connection's host %q", host, pinned)
			e := b.newEvent(ev.Kind, ev)
			e.Host, e.Port = host, port
			b.record(e, Deny, why)
			deny(client, http.StatusMisdirectedRequest, why)
			return
		}
		if up == nil || host != curHost || port != curPort {
			finish(Allow, reason)
			if up == nil && len(ups) == 0 && ev.Verdict != "" {
				ev = b.newEvent(ev.Kind, ev)
			}
			ev.Host, ev.Port = host, port
			ok, why := b.decide(host, netip.Addr{}, port)
			if !ok {
				b.record(ev, Deny, why)
				deny(client, http.StatusForbidden, why)
				return
			}
			if reason := b.overBudget(); reason != "" {
				b.record(ev, Deny, reason)
				deny(client, http.StatusForbidden, reason)
				return
			}
			conn, verdict, why2 := b.dial(host, netip.Addr{}, port, ev)
			if conn == nil {
				b.record(ev, verdict, why2)
				deny(client, statusFor(verdict), why2)
				return
			}
			up, upbr, curHost, curPort, reason, used = conn, bufio.NewReader(conn), host, port, why, nil
		}
		// Only the proxy's own headers are dropped; secrets go in.
		req.Header.Del("Proxy-Connection")
		req.Header.Del("Proxy-Authorization")
		if b.s.cfg.Secrets != nil {
			u, refused, err := secrets.ReplaceHeaders(req.Header, host, b.bindings(), b.s.cfg.Secrets.Get)
			if err != nil {
				deny(client, http.StatusBadGateway, "secret: "+err.Error())
				return
			}
			used = appendNew(used, u...)
			if len(refused) > 0 {
				e := b.newEvent(ev.Kind, ev)
				e.Host, e.Port = host, port
				b.record(e, Deny, fmt.Sprintf("secret %s not sent to %s (not one of its hosts)", strings.Join(refused, ", "), host))
			}
		}
		if err := req.Write(up); err != nil {
			return
		}
		resp, err := http.ReadResponse(upbr, req)
		if err != nil {
			deny(client, http.StatusBadGateway, "upstream: "+err.Error())
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Write(client)
			pipe(&bufConn{Conn: client, r: br}, &bufConn{Conn: up, r: upbr})
			return
		}
		err = resp.Write(client)
		resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

func appendNew(s []string, more ...string) []string {
	for _, m := range more {
		found := false
		for _, x := range s {
			found = found || x == m
		}
		if !found {
			s = append(s, m)
		}
	}
	return s
}

// countedConn counts bytes into the box's budget and the event.
type countedConn struct {
	net.Conn
	b        *boxNet
	ev       *Event
	upstream bool
}

func (c *countedConn) Read(p []byte) (int, error) {
	if r := c.b.overBudget(); r != "" {
		return 0, errors.New(r)
	}
	n, err := c.Conn.Read(p)
	c.add(n, !c.upstream)
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.add(n, c.upstream)
	return n, err
}

// add counts n bytes: out is towards the internet. Each byte is counted
// once, on the upstream side (what was sent to and received from the
// internet); the box's side of the connection only checks the budget, as
// the same bytes cross it too.
func (c *countedConn) add(n int, out bool) {
	if n <= 0 || !c.upstream {
		return
	}
	c.b.addUsed(int64(n))
	if out {
		c.ev.BytesOut += int64(n)
	} else {
		c.ev.BytesIn += int64(n)
	}
	c.b.countTraffic(int64(n), out)
}

// DNS hooks.

// allowDNS decides whether the box may resolve name: when some rule allows
// the name on some port (a query has no port; each connection's port is
// judged when it is made).
func (b *boxNet) allowDNS(name string) dnsproxy.Verdict {
	if !b.bucket.take() {
		return dnsproxy.Verdict{Reason: fmt.Sprintf("connection rate limit of %d per minute exceeded", b.limits().ConnectionsPerMinute)}
	}
	ok, reason := b.policy.Load().AllowNameOnAnyPort(name)
	return dnsproxy.Verdict{Allowed: ok, Reason: reason}
}

// lookupDNS resolves an allowed name for the box: the addresses the guard
// lets it reach, or an error wrapping dnsproxy.ErrNoAllowedAddress that
// says why when the guard blocked every one.
func (b *boxNet) lookupDNS(ctx context.Context, name string) ([]netip.Addr, error) {
	addrs, reason, err := b.resolve(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 && reason != "" {
		return nil, fmt.Errorf("%s resolves to %w (%s)", name, dnsproxy.ErrNoAllowedAddress, reason)
	}
	return addrs, nil
}

func (b *boxNet) logDNS(q dnsproxy.Query, v dnsproxy.Verdict, a *dnsproxy.Answer) {
	ev := b.newEvent("dns", nil)
	ev.Exec, ev.Process = attributeDNS(b.diag, b.pid, q.Transport, q.Client)
	ev.Host, ev.Port = q.Name, 53
	verdict := Deny
	if v.Allowed {
		verdict = Allow
		switch {
		case a != nil && errors.Is(a.Err, dnsproxy.ErrNoAllowedAddress):
			// The policy allowed the name, the guard every address it
			// has: the box got an empty answer.
			verdict, v.Reason = Deny, fmt.Sprintf("allowed by %s, but %v", v.Reason, a.Err)
		case a != nil && a.Err != nil:
			verdict, v.Reason = Error, a.Err.Error()
		}
		if a != nil && len(a.Addrs) > 0 {
			ev.Addr = a.Addrs[0].String()
		}
	}
	if q.Type != "A" && q.Type != "" {
		v.Reason = strings.TrimSpace(q.Type + " query; " + v.Reason)
	}
	b.record(ev, verdict, v.Reason)
}
