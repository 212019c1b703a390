// Package mcpserver is Corral's Model Context Protocol server: tools and
// resources that let any MCP client (an LLM agent, an IDE, a chat app)
// create sandboxes, run commands and background processes in them, move
// files, snapshot and fork them and read their egress log.
//
// The server is a client of the daemon through the public Go SDK (package
// client), like every other client: "corral mcp" serves it on stdio and
// reaches the daemon over its socket or TCP, and the daemon serves the same
// server on /mcp (streamable HTTP, behind its token) with a client that
// reaches its own API in-process (InProcess). So the MCP tools have the
// REST API's validation, error classes and limits, and nothing here
// touches the sandbox manager directly.
//
// The protocol is the official Go SDK's (github.com/modelcontextprotocol/
// go-sdk); this package only declares the tools and resources.
package mcpserver

import (
	"context"
	"log/slog"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/internal/version"
)

// Output bounds of exec (per stream) and read_file, in KiB.
const (
	DefaultOutputKiB = 64
	MaxOutputKiB     = 1024
	DefaultReadKiB   = 256
	MaxReadKiB       = 4096
)

// Exec timeouts, in seconds.
const (
	DefaultExecTimeout = 120
	MaxExecTimeout     = 3600
)

// DefaultLogEvents is how many egress-log events network_log returns when
// the call does not say.
const DefaultLogEvents = 100

// instructions is what the server tells the model about itself at
// initialization.
const instructions = `Corral runs sandboxes: isolated Linux boxes (containers with their own file system, process tree, limits and egress policy) on the user's machine.

Typical use: create_sandbox (note the returned id), then exec to run commands and read_file/write_file/list_files to move files, start_process for servers and other long jobs, and remove_sandbox when done. A sandbox has no network unless it was created with network mode "allowlist" or "full"; network_log shows what it tried to reach. snapshot_sandbox saves a sandbox's files as an image that create_sandbox can start from; fork_sandbox copies a running sandbox. Every tool that takes "sandbox" accepts its id or its name.`

// Options tune the server.
type Options struct {
	// Logger receives the SDK's own log (default: discard).
	Logger *slog.Logger
	// NoSubscriptions turns resource subscriptions off: a subscription
	// holds a stream open and follows a process, which the stateless
	// HTTP endpoint does not keep.
	NoSubscriptions bool
}

// server holds what the tool handlers share.
type server struct {
	c   *client.Client
	srv *mcp.Server

	mu      sync.Mutex
	watches map[string]*logWatch // by resource URI
}

// New returns the MCP server whose tools and resources drive the daemon
// that c talks to.
func New(c *client.Client, opts Options) *mcp.Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &server{c: c, watches: map[string]*logWatch{}}
	so := &mcp.ServerOptions{Instructions: instructions, Logger: opts.Logger}
	if !opts.NoSubscriptions {
		so.SubscribeHandler, so.UnsubscribeHandler = s.subscribe, s.unsubscribe
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "corral", Title: "Corral sandboxes", Version: version.Version}, so)
	s.srv = srv
	s.addSandboxTools(srv)
	s.addExecTools(srv)
	s.addProcessTools(srv)
	s.addDiffTools(srv)
	s.addFileTools(srv)
	s.addResources(srv)
	return srv
}

// HTTPHandler serves the server over MCP's streamable HTTP transport,
// stateless: every POST is a whole exchange and no session is kept, so a
// restarted daemon or a second replica answers the next request as well
// as the first, and the daemon keeps no per-client state to expire (nor
// long-lived streams that would hold up its shutdown). The price: a
// legacy client's cancellation of a call (a separate request) reaches no
// session, so an exec it cancels runs on to its timeout.
// Authentication is the caller's (the daemon mounts it behind its token).
func HTTPHandler(c *client.Client, opts Options) http.Handler {
	opts.NoSubscriptions = true
	srv := New(c, opts)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true,
		Logger:    opts.Logger,
		// A client that closes its request cancels the call (protocol
		// 2026-07-28 and later; older clients' cancellations go to a
		// session the stateless handler does not keep).
		PropagateRequestCancellation: true,
		// The check refuses a loopback request whose Host is not
		// loopback, against DNS rebinding. Every TCP request to the
		// daemon carries its token, which a rebound page cannot, so
		// the check would only refuse reverse proxies.
		DisableLocalhostProtection: true,
	})
}

// RunStdio serves the server on the process's stdin and stdout until the
// client closes stdin or ctx ends.
func RunStdio(ctx context.Context, c *client.Client, opts Options) error {
	return New(c, opts).Run(ctx, &mcp.StdioTransport{})
}

// ptr returns a pointer to v, for the optional hints of ToolAnnotations.
func ptr[T any](v T) *T { return &v }
