package network

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/network/dnsproxy"
	"github.com/corral-sandbox/corral/internal/secrets"
)

// Config is the daemon-wide network configuration.
type Config struct {
	// StateDir holds one directory per box with network access: its
	// egress log and its CA (key included: it never enters the box).
	StateDir string
	// Resolver resolves names for the proxy and the boxes' DNS (a
	// *net.Resolver); nil uses the host's resolver.
	Resolver Resolver
	// Guard blocks addresses no box may reach (a *netpolicy.Guard; nil
	// uses one with the host's addresses).
	Guard interface{ Check(netip.Addr) error }
	// Dial connects upstream; nil uses a net.Dialer (tests and benchmarks
	// replace it).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// RootCAs verify upstream servers when the proxy intercepts TLS to
	// substitute secrets; nil uses the host's roots.
	RootCAs *x509.CertPool
	// Secrets holds secret values.
	Secrets *secrets.Store
	// Limits are the defaults for boxes that set none.
	Limits netpolicy.Limits
	// DialTimeout bounds an upstream connect (default 10s).
	DialTimeout time.Duration
	// Activity, when set, is called with the box's ID on every egress
	// event (the idle timer counts network use as activity).
	Activity func(id string)
	// Events, when set, is given every egress event as it is logged (the
	// audit trail); it must not block.
	Events func(Event)
}

// Resolver resolves names, as a *net.Resolver does. Its errors end up in
// the boxes' egress logs, so they should name the servers really asked.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Service runs the egress proxy and DNS server of every box with network
// access.
type Service struct {
	cfg Config

	mu    sync.Mutex
	boxes map[string]*boxNet

	counters counters
}

// New makes a Service.
func New(cfg Config) (*Service, error) {
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.Guard == nil {
		cfg.Guard = &netpolicy.Guard{HostAddrs: netpolicy.HostAddrs}
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 10 * time.Second
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout}
		cfg.Dial = d.DialContext
	}
	if cfg.Limits.ConnectionsPerMinute == 0 {
		cfg.Limits.ConnectionsPerMinute = DefaultConnectionsPerMinute
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, boxes: map[string]*boxNet{}}, nil
}

// boxNet is one box's network: its listeners, policy and log.
type boxNet struct {
	s      *Service
	id     string
	pid    int // the box's PID 1 on the host, for attribution; 0: none
	ls     *listeners
	diag   *sockDiag
	log    *eventLog
	ca     *secrets.CA
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	policy   atomic.Pointer[netpolicy.Policy]
	settings atomic.Pointer[netpolicy.Settings]
	bucket   *bucket
	used     atomic.Int64 // bytes through the proxy, each counted once
	flushed  atomic.Int64 // the count last written to the state directory
	flushMu  sync.Mutex   // held while the count is written
	in, out  atomic.Int64 // bytes received and sent since Attach (stats)
	conns    sync.Map     // net.Conn -> struct{}: open connections, closed on Detach
}

func (s *Service) dir(id string) string { return filepath.Join(s.cfg.StateDir, id) }

// Prepare makes what a box needs before it starts: its CA when it has
// secrets (returned as PEM for its trust store; nil otherwise).
func (s *Service) Prepare(id string, set netpolicy.Settings) (caPEM []byte, err error) {
	if len(set.Secrets) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(s.dir(id), 0o700); err != nil {
		return nil, err
	}
	ca, err := s.loadOrMakeCA(id)
	if err != nil {
		return nil, err
	}
	return ca.CertPEM(), nil
}

func (s *Service) loadOrMakeCA(id string) (*secrets.CA, error) {
	p := filepath.Join(s.dir(id), "ca.pem")
	if ca, err := secrets.LoadCA(p); err == nil {
		return ca, nil
	} else if !errors.Is(err, os.ErrNotExist) && !errdefs.IsNotFound(err) {
		return nil, err
	}
	ca, err := secrets.NewCA(id)
	if err != nil {
		return nil, err
	}
	if err := ca.Save(p); err != nil {
		return nil, err
	}
	return ca, nil
}

// Attach wires the box's network namespace netns (a path to open and
// join) and starts serving its egress under set. pid, when not 0, is the
// host pid of the box's PID 1, among whose descendants the egress log
// finds the process behind each connection; 0 attributes none. Attaching
// an attached box only updates its settings.
func (s *Service) Attach(ctx context.Context, id, netns string, pid int, set netpolicy.Settings) error {
	pol, err := netpolicy.NewPolicy(set.Mode, set.Allow)
	if err != nil {
		return fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.boxes[id]; ok {
		b.policy.Store(pol)
		b.settings.Store(&set)
		b.bucket.setRate(b.limits().ConnectionsPerMinute)
		return nil
	}
	if netns == "" {
		return fmt.Errorf("attach %s: no network namespace given: %w", id, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(s.dir(id), 0o700); err != nil {
		return err
	}
	used, err := s.readUsage(id)
	if err != nil {
		return err
	}
	b := &boxNet{s: s, id: id, pid: pid}
	b.used.Store(used)
	b.flushed.Store(used)
	b.policy.Store(pol)
	b.settings.Store(&set)
	b.bucket = newBucket(b.limits().ConnectionsPerMinute)
	if len(set.Secrets) > 0 {
		if b.ca, err = s.loadOrMakeCA(id); err != nil {
			return err
		}
	}
	if b.log, err = openLog(filepath.Join(s.dir(id), "egress.log")); err != nil {
		return fmt.Errorf("egress log: %w", err)
	}
	box := BoxAddr(id)
	if b.diag, err = newSockDiag(netns); err != nil {
		b.log.close()
		return err
	}
	if b.ls, err = wire(netns, box); err != nil {
		b.diag.Close()
		b.log.close()
		return err
	}
	b.ctx, b.cancel = context.WithCancel(context.WithoutCancel(ctx))
	dns := dnsproxy.New(dnsproxy.Config{
		Allow:  b.allowDNS,
		Lookup: b.lookupDNS,
		Log:    b.logDNS,
	})
	b.wg.Add(3)
	go func() { defer b.wg.Done(); b.serve() }()
	go func() { defer b.wg.Done(); dns.ServeUDP(b.ls.dnsUDP) }()
	go func() { defer b.wg.Done(); dns.ServeTCP(b.ls.dnsTCP) }()
	s.boxes[id] = b
	log.G(ctx).Debug("network attached", "sandbox", id, "mode", set.Mode, "addr", box)
	return nil
}

func (b *boxNet) limits() netpolicy.Limits {
	l := b.settings.Load().Limits
	if l.ConnectionsPerMinute == 0 {
		l.ConnectionsPerMinute = b.s.cfg.Limits.ConnectionsPerMinute
	}
	if l.EgressBytes == 0 {
		l.EgressBytes = b.s.cfg.Limits.EgressBytes
	}
	return l
}

// Attached reports whether the box's network is served.
func (s *Service) Attached(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.boxes[id]
	return ok
}

// Detach stops serving the box: its listeners and open connections close.
// With purge, its state (log, CA) is removed too (the box is gone).
func (s *Service) Detach(id string, purge bool) error {
	s.mu.Lock()
	b := s.boxes[id]
	delete(s.boxes, id)
	s.mu.Unlock()
	if b != nil {
		b.cancel()
		b.ls.Close()
		b.conns.Range(func(k, _ any) bool { k.(net.Conn).Close(); return true })
		b.wg.Wait()
		if !purge {
			b.flushUsage()
		}
		b.diag.Close()
		b.log.close()
	}
	if purge {
		return os.RemoveAll(s.dir(id))
	}
	return nil
}

// Close detaches every box, keeping their state.
func (s *Service) Close() error {
	s.mu.Lock()
	ids := make([]string, 0, len(s.boxes))
	for id := range s.boxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	for _, id := range ids {
		s.Detach(id, false)
	}
	return nil
}

// Events calls fn for every recorded event of the box, oldest first.
func (s *Service) Events(id string, fn func(Event) error) error {
	return readEvents(filepath.Join(s.dir(id), "egress.log"), fn)
}

// Follow returns new events of an attached box as they happen.
func (s *Service) Follow(id string) (<-chan Event, func(), error) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil {
		return nil, nil, fmt.Errorf("sandbox %s has no network attached: %w", id, errdefs.ErrFailedPrecondition)
	}
	ch, stop := b.log.follow()
	return ch, stop, nil
}

// bucket is a token bucket refilled at rate per minute, holding at most
// rate tokens.
type bucket struct {
	mu     sync.Mutex
	rate   float64
	tokens float64
	last   time.Time
}

func newBucket(perMinute int) *bucket {
	return &bucket{rate: float64(perMinute), tokens: float64(perMinute), last: time.Now()}
}

func (b *bucket) setRate(perMinute int) {
	b.mu.Lock()
	b.rate = float64(perMinute)
	b.tokens = min(b.tokens, b.rate)
	b.mu.Unlock()
}

func (b *bucket) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(b.rate, b.tokens+now.Sub(b.last).Minutes()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// resolve returns the addresses of host the box may reach: resolved by the
// daemon, filtered by the guard. reason says why the guard dropped the
// others (every distinct reason, joined by "; ").
func (b *boxNet) resolve(ctx context.Context, host string) (ok []netip.Addr, reason string, err error) {
	var all []netip.Addr
	if ip, isIP := netpolicy.ParseIPLiteral(host); isIP {
		all = []netip.Addr{ip}
	} else {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		all, err = b.s.cfg.Resolver.LookupNetIP(ctx, "ip4", host)
		if err != nil {
			return nil, "", err
		}
	}
	var blocked []string
	for _, a := range all {
		a = a.Unmap()
		if gerr := b.s.cfg.Guard.Check(a); gerr != nil {
			if why := gerr.Error(); !slices.Contains(blocked, why) {
				blocked = append(blocked, why)
			}
			continue
		}
		ok = append(ok, a)
	}
	return ok, strings.Join(blocked, "; "), nil
}
