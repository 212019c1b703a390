// Package agentclient is the host-side client of the in-box agent
// (internal/agent): typed Connect clients for process.Process and
// filesystem.Filesystem, a plain HTTP client for /files, /health and
// /metrics, and the dialer the daemon uses to reverse-proxy to an agent.
//
// Addresses (see Dial) are "unix-abstract://<netns file>#<name>" (container
// tiers: an abstract unix socket inside the box's network namespace),
// "unix:///path/agent.sock", "tcp://host:port" or "http://host:port"
// (tests). All traffic is HTTP/2 with prior knowledge (h2c), so
// bidirectional streams such as StreamInput work.
package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/gen/filesystem/filesystemconnect"
	"github.com/corral-sandbox/corral/api/gen/process/processconnect"
)

// WarmUpHeader marks a request that only warms a pool's box up (the
// daemon's first exec in it): like GET /health, it does not start the idle
// clock of the box's agent, so the agent stays until the box is handed out
// and used. The agent reads it as warmUpHeader.
const WarmUpHeader = "Corral-Warm-Up"

// StoppingHeader is set on the 503 an agent under corral-init answers
// while it exits after being idle: it did nothing with the request, and
// the next connection starts a new agent, so the request can be sent
// again. The agent has its own copy of the name (it imports nothing of
// the daemon's); a test keeps the two equal.
const StoppingHeader = "Corral-Agent-Stopping"

// OOMKillsHeader is set by the agent on the answer of process.Process
// Start and Connect: the box's OOM kill counter when the command started.
// When the stream then breaks (the agent died) and the counter has grown,
// the OOM killer took the agent, which the daemon tells the client. The
// agent has its own copy of the name; a test keeps the two equal.
const OOMKillsHeader = "Corral-Oom-Kills"

// RestartsHeader is set by an agent under corral-init on every answer
// once an earlier agent of its box failed (a crash, a signal, a non-zero
// exit): how many did, as corral-init counts them since the box started.
// FailureHeader says how the last one ended ("killed by signal 9"). The
// daemon's agent pool reports a count it has not seen (the agent restart
// metric and event). The agent has its own copies of the names; a test
// keeps them equal.
const (
	RestartsHeader = "Corral-Agent-Restarts"
	FailureHeader  = "Corral-Agent-Last-Failure"
)

// unixBaseURL is the URL base used for unix-socket agents; the host part is
// ignored by the dialer.
const unixBaseURL = "http://agent"

// Client talks to one agent.
type Client struct {
	// Process and Filesystem are the agent's Connect services.
	Process    processconnect.ProcessClient
	Filesystem filesystemconnect.FilesystemClient
	// HTTP and BaseURL serve the REST endpoints: BaseURL+"/files?path=...".
	HTTP    *http.Client
	BaseURL string

	transport *http.Transport
}

type options struct {
	connectOpts []connect.ClientOption
}

// Opt configures New.
type Opt func(*options)

// WithConnectOptions passes options (interceptors, codecs...) to the
// generated Connect clients.
func WithConnectOptions(o ...connect.ClientOption) Opt {
	return func(opts *options) { opts.connectOpts = append(opts.connectOpts, o...) }
}

// Transport returns an h2c round tripper that reaches the agent at addr
// through Dial, and the base URL to put in requests (its host is only
// meaningful for http://). The daemon uses it to reverse-proxy data-plane
// calls to an agent.
func Transport(addr string) (*http.Transport, string, error) {
	base, err := baseURL(addr)
	if err != nil {
		return nil, "", err
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	t := &http.Transport{
		Protocols:           &protos,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		// A PING keeps long-idle streams (background commands) honest.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
	}
	if !strings.HasPrefix(addr, "http://") { // http:// dials the request's host
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return Dial(ctx, addr)
		}
	}
	return t, base, nil
}

// baseURL checks addr and returns the URL base of requests to it.
func baseURL(addr string) (string, error) {
	if _, _, err := parse(addr); err != nil {
		return "", err
	}
	if strings.HasPrefix(addr, "http://") {
		return strings.TrimSuffix(addr, "/"), nil
	}
	return unixBaseURL, nil
}

// New returns a client for the agent at addr. It does not connect: call
// WaitReady to wait for a freshly started agent.
func New(addr string, opts ...Opt) (*Client, error) {
	var o options
	for _, fn := range opts {
		fn(&o)
	}
	t, base, err := Transport(addr)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: t}
	return &Client{
		Process:    processconnect.NewProcessClient(hc, base, o.connectOpts...),
		Filesystem: filesystemconnect.NewFilesystemClient(hc, base, o.connectOpts...),
		HTTP:       hc,
		BaseURL:    base,
		transport:  t,
	}, nil
}

// Close drops idle connections.
func (c *Client) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}

// WaitReady polls GET /health until the agent answers 204 or ctx ends. The
// first retries come after ~100µs and double up to 20ms: this is on the
// sandbox create path, where the agent is usually up within a millisecond.
func (c *Client) WaitReady(ctx context.Context) error {
	delay := 100 * time.Microsecond
	var last error
	for {
		err := c.health(ctx)
		if err == nil {
			return nil
		}
		last = err
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wait for agent: %w (last error: %w)", errdefs.ErrUnavailable, errors.Join(ctx.Err(), last))
		case <-t.C:
		}
		delay = min(delay*2, 20*time.Millisecond)
	}
}

func (c *Client) health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s", resp.Status)
	}
	return nil
}

// OutputOffsetHeader is set by the agent on the answer of a Connect with
// replay and no tail: the offset of the first byte replayed, which is
// larger than the from_offset asked when the agent dropped those bytes.
// The agent has its own copy of the name; a test keeps the two equal.
const OutputOffsetHeader = "Corral-Output-Offset"
