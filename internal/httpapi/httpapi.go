// Package httpapi serves Corral's HTTP API: the control-plane REST routes
// (sandboxes, their network policy, egress log and exposed ports, their
// lifecycle: snapshots, forks, pause, suspend, resume, keep-alive; warm
// pools, secrets, images, builds, version, info, disk use; documented in api/openapi.yaml; pulls, loads,
// bootstraps and builds answer with an application/x-ndjson stream of
// rest.Event, the egress log with one of rest.NetworkEvent) and the data
// plane, which reverse-proxies the agent protocol of each sandbox. It is the
// only place where error classes become HTTP status codes.
package httpapi

import (
	"cmp"
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api"
	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/agentpool"
	"github.com/corral-sandbox/corral/internal/build"
	"github.com/corral-sandbox/corral/internal/dashboard"
	"github.com/corral-sandbox/corral/internal/image"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// maxJSONBody bounds buffered JSON request bodies.
const maxJSONBody = 1 << 20

// SandboxIDHeader selects the sandbox of an E2B-style data-plane request.
const SandboxIDHeader = "E2b-Sandbox-Id"

// Images is what the API needs from the image store (*image.Store). Image
// names are references ("py-agent", "debian:bookworm",
// "127.0.0.1:5000/team/py:1") checked with image.ValidateName. Every method
// returns errdefs.ErrNotFound for an unknown image and
// errdefs.ErrInvalidArgument for bad input.
type Images interface {
	List(ctx context.Context) ([]sandbox.Image, error)
	Inspect(ctx context.Context, name string) (image.Info, error)
	// ImportTar makes image name from a tar (optionally gzip-compressed) of
	// a root file system.
	ImportTar(ctx context.Context, name string, r io.Reader) (sandbox.Image, error)
	// Remove untags name and collects the layers nothing else references;
	// running sandboxes keep theirs.
	Remove(ctx context.Context, name string) error
	Tag(ctx context.Context, src, dst string) (sandbox.Image, error)
	Prune(ctx context.Context, o image.PruneOptions) (image.PruneReport, error)
	// Pull, Load and Bootstrap report as they go to progress (or logw) and
	// stop when ctx ends.
	Pull(ctx context.Context, ref string, o image.PullOptions, progress image.ProgressFunc) (sandbox.Image, error)
	// Load reads a docker-save or OCI archive (maybe gzip) or an OCI layout
	// directory at file.
	Load(ctx context.Context, file string, o image.LoadOptions, progress image.ProgressFunc) (sandbox.Image, error)
	Bootstrap(ctx context.Context, ref string, o image.BootstrapOptions, logw io.Writer) (sandbox.Image, error)
}

// Manager is what the API needs from the sandbox Manager
// (*sandbox.Manager, which the daemon passes). Errors are classified with
// errdefs.
type Manager interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Record, error)
	Get(ctx context.Context, idOrName string) (sandbox.Record, error)
	// Check is Get after asking the runtime whether init still runs.
	Check(ctx context.Context, idOrName string) (sandbox.Record, error)
	List(ctx context.Context) ([]sandbox.Record, error)
	Usage(ctx context.Context, idOrName string) (sandbox.Usage, error)
	Delete(ctx context.Context, idOrName string, force bool) error
	Pause(ctx context.Context, idOrName string) (sandbox.Record, error)
	Resume(ctx context.Context, idOrName string) (sandbox.Record, error)
	// EnsureRunning resumes a paused or suspended sandbox (auto-resume)
	// and records activity.
	EnsureRunning(ctx context.Context, idOrName string) (sandbox.Record, error)
	// Touch records activity on the sandbox (it resets its idle timer).
	Touch(idOrName string)
	// ResumeAgent resumes the agent of a running sandbox when it is
	// stopped, and reports whether it was.
	ResumeAgent(ctx context.Context, idOrName string) (bool, error)
	Suspend(ctx context.Context, idOrName string, req sandbox.SuspendRequest) (sandbox.Record, error)
	KeepAlive(ctx context.Context, idOrName string, d time.Duration) (sandbox.Record, error)
	Fork(ctx context.Context, idOrName string, req sandbox.ForkRequest) ([]sandbox.Record, error)
	Snapshot(ctx context.Context, idOrName, name string) (sandbox.Image, error)
	SetNetwork(ctx context.Context, idOrName string, set netpolicy.Settings) (sandbox.Record, error)
	Pools() []sandbox.PoolStatus
	SetPool(ctx context.Context, spec sandbox.PoolSpec) (sandbox.PoolStatus, error)
	DefaultImage() string
	// OpenChanges opens a consistent view of a sandbox's changes against
	// its image or the image or snapshot from (GET .../diff).
	OpenChanges(ctx context.Context, idOrName, from string) (*sandbox.Changes, error)
}

// Builder builds images from specs (*build.Builder). A failed step is a
// *build.StepError.
type Builder interface {
	Build(ctx context.Context, o build.Options) (sandbox.Image, error)
}

// DefaultMaxUploadBytes bounds uploaded archives and build contexts.
const DefaultMaxUploadBytes = 32 << 30

// Config wires a Server.
type Config struct {
	Manager Manager
	Images  Images
	// Builder serves POST /v1/build; nil answers 501.
	Builder Builder
	// Version is returned by GET /v1/version.
	Version rest.Version
	// Agents carries the data plane's requests to the sandboxes' agents
	// (the daemon's *agentpool.Pool); nil means a pool of its own.
	Agents AgentPool
	// UploadDir holds uploaded archives and build contexts while they are
	// used (removed after); empty means os.TempDir().
	UploadDir string
	// MaxUploadBytes bounds one upload (an archive to load, the file
	// contents of a build context); 0 means DefaultMaxUploadBytes.
	MaxUploadBytes int64
	// Network serves the egress log (*network.Service); nil answers 501.
	Network NetworkLog
	// Secrets serves /v1/secrets (*secrets.Store); nil answers 501.
	Secrets SecretStore
	// Volumes serves /v1/volumes; nil answers 501.
	Volumes VolumeService
	// Tunnels records exposed ports; nil (tunnels not configured)
	// answers 501.
	Tunnels *tunnel.Registry
	// TunnelBase is the base URL of the tunnel listener and TunnelDomain
	// its optional domain, for the URLs of exposed ports (tunnel.URL).
	TunnelBase   string
	TunnelDomain string
	// System serves GET /v1/info and GET /v1/system/df (*daemon.Daemon);
	// nil answers 501.
	System System
	// E2B adds the routes of E2B's control plane (*e2bapi.API) to the
	// mux, behind the same authentication; nil leaves them out.
	E2B RouteSet
	// E2BDomain, when set, serves E2B's domain mode: a request whose
	// Host is "{port}-{id}.{E2BDomain}" (E2BDomain may carry a ":port",
	// ignored here) goes to the agent of sandbox id for port 49983, else
	// to that port in the box (Ports), with E2B's authentication
	// (byHost).
	E2BDomain string
	// Ports carries domain-mode requests to ports in boxes; nil answers
	// 501 there.
	Ports *tunnel.Forwarder
	// Limits bound each client's requests; zero: none.
	Limits Limits
	// Now is the clock of the limits; nil means time.Now.
	Now func() time.Time
	// AgentTimeouts bound the waits on agents of proxied requests.
	AgentTimeouts AgentTimeouts
	// MCP, when set, makes the handler of /mcp (the MCP server,
	// streamable HTTP), behind the same authentication as every route.
	// It is given the API's own routes, without authentication or rate
	// limit, for the server's in-process client: the /mcp request has
	// passed both already.
	MCP func(api http.Handler) http.Handler
	// Stats serves GET /v1/sandboxes/{id}/stats and GET /v1/stats
	// (*stats.Sampler); nil answers 501.
	Stats Stats
	// Metrics serves GET /metrics (Prometheus); nil answers 501.
	Metrics http.Handler
	// Observe is told how long each exec took to start, until the agent's
	// first answer (the daemon's metrics); nil: nobody.
	Observe func(op string, d time.Duration, err error)
	// Audit is the audit trail: the data plane records its execs and
	// file operations in it, GET /v1/events and GET
	// /v1/sandboxes/{id}/trajectory read it; nil (recording off)
	// answers 501.
	Audit AuditLog
	// OutputLog serves GET /v1/sandboxes/{id}/processes/{pid}/log; nil
	// ([output_log] off) answers 501.
	OutputLog OutputLog
}

// RouteSet is a set of handlers by ServeMux pattern.
type RouteSet interface {
	Routes() map[string]http.HandlerFunc
}

// System reports on the daemon, its host and its disk use.
type System interface {
	Info(ctx context.Context) (rest.Info, error)
	DiskUsage(ctx context.Context) (rest.DiskUsage, error)
}

// Server is the HTTP API.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	proxy *agentProxy
	// rate refuses requests past cfg.Limits (nil: no limit); refusals
	// logs the 4xx answers.
	rate     *rateLimiter
	refusals *refusalLog
	ui       http.Handler // the dashboard's files
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Manager == nil || cfg.Images == nil {
		return nil, fmt.Errorf("httpapi: manager and images are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Agents == nil {
		cfg.Agents = agentpool.New(agentpool.Config{})
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = DefaultMaxUploadBytes
	}
	if cfg.Limits.RequestsPerSecond < 0 || math.IsNaN(cfg.Limits.RequestsPerSecond) || cfg.Limits.Burst < 0 {
		return nil, fmt.Errorf("httpapi: limits must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux(), rate: newRateLimiter(cfg.Limits, cfg.Now), refusals: newRefusalLog(cfg.Now)}
	s.ui = dashboard.Handler()
	s.proxy = newAgentProxy(cfg.Manager, cfg.Agents, cfg.AgentTimeouts)
	s.proxy.observe = cfg.Observe
	s.proxy.audit = cfg.Audit
	for pattern, h := range s.routes() {
		s.mux.HandleFunc(pattern, h)
	}
	if cfg.MCP != nil {
		s.mux.Handle(MCPPath, cfg.MCP(s.mux))
	}
	return s, nil
}

// MCPPath is the route of the MCP server (Config.MCP): every method, as
// MCP's streamable HTTP transport uses POST, GET and DELETE.
const MCPPath = "/mcp"

// Routes returns the registered route patterns, for documentation checks.
func (s *Server) Routes() []string {
	var out []string
	for p := range s.routes() {
		out = append(out, p)
	}
	if s.cfg.MCP != nil {
		out = append(out, MCPPath)
	}
	return out
}

func (s *Server) routes() map[string]http.HandlerFunc {
	r := s.ownRoutes()
	if s.cfg.E2B != nil {
		for p, h := range s.cfg.E2B.Routes() {
			r[p] = h
		}
	}
	return r
}

func (s *Server) ownRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /health":                            s.health,
		"GET /openapi.yaml":                      s.openapi,
		"GET /v1/version":                        s.version,
		"GET /v1/info":                           s.info,
		"GET /v1/system/df":                      s.diskUsage,
		"GET /metrics":                           s.metrics,
		"GET /v1/stats":                          s.allStats,
		"GET /v1/sandboxes/{id}/stats":           s.sandboxStats,
		"POST /v1/sandboxes":                     s.createSandbox,
		"GET /v1/sandboxes":                      s.listSandboxes,
		"GET /v1/sandboxes/{id}":                 s.getSandbox,
		"DELETE /v1/sandboxes/{id}":              s.deleteSandbox,
		"PUT /v1/sandboxes/{id}/network":         s.setNetwork,
		"GET /v1/sandboxes/{id}/network/log":     s.networkLog,
		"POST /v1/sandboxes/{id}/ports":          s.exposePort,
		"GET /v1/sandboxes/{id}/ports":           s.listPorts,
		"DELETE /v1/sandboxes/{id}/ports/{port}": s.unexposePort,
		"POST /v1/sandboxes/{id}/snapshot":       s.snapshotSandbox,
		"POST /v1/sandboxes/{id}/fork":           s.forkSandbox,
		"POST /v1/sandboxes/{id}/pause":          s.pauseSandbox,
		"POST /v1/sandboxes/{id}/resume":         s.resumeSandbox,
		"POST /v1/sandboxes/{id}/suspend":        s.suspendSandbox,
		"POST /v1/sandboxes/{id}/keepalive":      s.keepAlive,
		"GET /v1/sandboxes/{id}/diff":            s.diffSandbox,
		"GET /v1/events":                         s.events,
		"GET /v1/sandboxes/{id}/trajectory":      s.trajectory,
		"GET /v1/snapshots":                      s.listSnapshots,
		"DELETE /v1/snapshots/{name...}":         s.removeSnapshot,
		"GET /v1/pools":                          s.listPools,
		"PUT /v1/pools":                          s.setPool,
		"DELETE /v1/pools/{key}":                 s.removePool,
		"GET /v1/secrets":                        s.listSecrets,
		"PUT /v1/secrets/{name}":                 s.setSecret,
		"DELETE /v1/secrets/{name}":              s.deleteSecret,
		"POST /v1/volumes":                       s.createVolume,
		"GET /v1/volumes":                        s.listVolumes,
		"GET /v1/volumes/{name}":                 s.getVolume,
		"DELETE /v1/volumes/{name}":              s.removeVolume,
		"GET /v1/images":                         s.listImages,
		"GET /v1/images/{name...}":               s.inspectImage,
		"DELETE /v1/images/{name...}":            s.removeImage,
		"POST /v1/images/import":                 s.importImage,
		"POST /v1/images/pull":                   s.pullImage,
		"POST /v1/images/load":                   s.loadImage,
		"POST /v1/images/bootstrap":              s.bootstrapImage,
		"POST /v1/images/tag":                    s.tagImage,
		"POST /v1/images/prune":                  s.pruneImages,
		"POST /v1/build":                         s.build,
		"GET /ui/{path...}":                      s.dashboard,
		"/v1/sandboxes/{id}/agent/{rest...}":     s.agentByPath,
		"/process.Process/{method}":              s.agentByHeader,
		"/filesystem.Filesystem/{method}":        s.agentByHeader,
		"/files":                                 s.agentByHeader,

		"GET /v1/sandboxes/{id}/processes/{pid}/log": s.processLog,
	}
}

// Handler returns the API without authentication (for the unix socket,
// whose file mode is the access control).
func (s *Server) Handler() http.Handler { return s.front(s.byHost(daemonAuth{any: true}, s.mux)) }

// TokenHandler returns the API for TCP, where every request needs
// the daemon's token (RequireToken).
func (s *Server) TokenHandler(token string) http.Handler {
	return s.front(s.byHost(daemonAuth{token: token}, RequireToken(token, s.mux)))
}

// front runs every request of a listener: the rate limit (before
// authentication, so that a flood of wrong tokens is limited too), then h;
// it logs each request at debug level and the 4xx answers of the daemon
// (refusalLog).
func (s *Server) front(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		c := clientOf(r)
		if wait, err := s.limit(r, c); err != nil {
			rw.Header().Set("Retry-After", retryAfter(wait))
			writeError(r.Context(), rw, err)
		} else {
			h.ServeHTTP(rw, r)
		}
		log.G(r.Context()).Debug("http request", "method", r.Method, "path", r.URL.Path,
			"status", rw.status, "duration", time.Since(start))
		// An agent's own answers passed through are the box's business
		// (a client looking for files it may not find), not the daemon's.
		if rw.status >= 400 && rw.status < 500 && (!rw.proxied || rw.errMsg != "") {
			s.refusals.log(r.Context(), c, r, rw.status, cmp.Or(rw.errMsg, http.StatusText(rw.status)))
		}
	})
}

// limit applies the rate limit to r, except to the daemon's health check.
func (s *Server) limit(r *http.Request, c client) (time.Duration, error) {
	if r.URL.Path == "/health" && r.Header.Get(SandboxIDHeader) == "" {
		return 0, nil
	}
	return s.rate.allow(c)
}

// APIKeyHeader carries the daemon's token as E2B's SDKs send their API key.
const APIKeyHeader = "X-API-KEY"

// AccessTokenHeader carries a sandbox's access token on E2B data-plane
// requests (sandbox.Record.AccessToken, E2B's envdAccessToken).
const AccessTokenHeader = "X-Access-Token"

// sandboxAuthKey marks a request let in without the daemon's token: an
// E2B data-plane request, which the sandbox's access token must
// authenticate (agentByHeader checks it).
type sandboxAuthKey struct{}

// RequireToken wraps h so that every request needs the daemon's token,
// as "Authorization: Bearer <token>" or "X-API-KEY: <token>" (E2B's SDKs),
// compared in constant time; others get a 401 JSON error. Two kinds of
// request pass without it, as on E2B's data plane: an agent request that
// names its sandbox by the E2b-Sandbox-Id header, which must then carry
// that sandbox's access token instead (X-Access-Token), and a signed file
// URL (GET or POST /files with a signature made with that token, see
// e2bsign.go). A PUT signed with SignUpload passes too.
func RequireToken(token string, h http.Handler) http.Handler {
	bearer, key := []byte("Bearer "+token), []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && (subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), bearer) == 1 ||
			subtle.ConstantTimeCompare([]byte(r.Header.Get(APIKeyHeader)), key) == 1) {
			h.ServeHTTP(w, r)
			return
		}
		if dashboard.Public(r) { // static files without data; the page's API calls send the token
			h.ServeHTTP(w, r)
			return
		}
		if token != "" && uploadSigned(r, token, time.Now()) { // a template file upload (e2bsign.go)
			h.ServeHTTP(w, r)
			return
		}
		if token != "" && (r.Header.Get(SandboxIDHeader) != "" && isAgentPath(r.URL.Path) || signed(r)) {
			h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxAuthKey{}, true)))
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
		writeError(r.Context(), w, fmt.Errorf("missing or wrong token: send Authorization: Bearer <token> or %s: <token>: %w", APIKeyHeader, errdefs.ErrUnauthenticated))
	})
}

// dashboard serves the web dashboard's files (internal/dashboard).
func (s *Server) dashboard(w http.ResponseWriter, r *http.Request) { s.ui.ServeHTTP(w, r) }

// isAgentPath reports whether path is one the agent serves at its own
// paths (routed by SandboxIDHeader).
func isAgentPath(path string) bool {
	return path == "/health" || path == "/files" ||
		strings.HasPrefix(path, "/process.Process/") || strings.HasPrefix(path, "/filesystem.Filesystem/")
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(SandboxIDHeader) != "" {
		s.agentByHeader(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(api.OpenAPI)
}

func (s *Server) version(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Version)
}

func (s *Server) info(w http.ResponseWriter, r *http.Request) {
	if s.cfg.System == nil {
		writeError(r.Context(), w, fmt.Errorf("this daemon does not report info: %w", errdefs.ErrNotImplemented))
		return
	}
	info, err := s.cfg.System.Info(r.Context())
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Server) diskUsage(w http.ResponseWriter, r *http.Request) {
	if s.cfg.System == nil {
		writeError(r.Context(), w, fmt.Errorf("this daemon does not report disk use: %w", errdefs.ErrNotImplemented))
		return
	}
	du, err := s.cfg.System.DiskUsage(r.Context())
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	writeJSON(w, http.StatusOK, du)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req rest.CreateSandboxRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	timeout, err := secondsOf("timeout_seconds", req.TimeoutSeconds)
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	idle, err := secondsOf("idle_timeout_seconds", req.IdleTimeoutSeconds)
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	rec, err := s.cfg.Manager.Create(r.Context(), sandbox.CreateRequest{
		Network:     toSettings(req.Network, req.Secrets),
		Image:       req.Image,
		Snapshot:    req.Snapshot,
		Name:        req.Name,
		Resources:   sandbox.Resources(req.Resources),
		Env:         req.Env,
		Workdir:     req.Workdir,
		User:        req.User,
		Labels:      req.Labels,
		Timeout:     timeout,
		Runtime:     req.Runtime,
		Tier:        req.Tier,
		IdleTimeout: idle,
		IdleAction:  sandbox.IdleAction(req.IdleAction),
		NoPool:      req.NoPool,
		Volumes:     toVolumeMounts(req.Volumes),
	})
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	w.Header().Set("Location", "/v1/sandboxes/"+rec.ID)
	writeJSON(w, http.StatusCreated, toSandbox(rec))
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	recs, err := s.cfg.Manager.List(r.Context())
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	out := rest.SandboxList{Sandboxes: make([]rest.Sandbox, 0, len(recs))}
	for _, rec := range recs {
		out.Sandboxes = append(out.Sandboxes, toSandbox(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	rec, err := s.cfg.Manager.Check(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	sb := toSandbox(rec)
	if rec.State == sandbox.StateRunning || rec.State == sandbox.StatePaused {
		// Usage is best effort: a runtime that cannot read it leaves it out.
		if u, err := s.cfg.Manager.Usage(r.Context(), rec.ID); err == nil {
			sb.Usage = &rest.Usage{
				CPUNanos: u.CPUNanos, MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes,
				MemoryLimitBytes: u.MemoryLimitBytes, Pids: u.Pids, PidsLimit: u.PidsLimit, OOMKills: u.OOMKills,
				DiskBytes: u.DiskBytes, DiskLimitBytes: u.DiskLimitBytes,
			}
		} else {
			log.G(r.Context()).Debug("read usage", "sandbox", rec.ID, "error", err)
		}
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	force, err := boolQuery(r, "force")
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	id := r.PathValue("id")
	if rec, err := s.cfg.Manager.Get(r.Context(), id); err == nil {
		id = rec.ID // names do not key exposures
	}
	if err := s.cfg.Manager.Delete(r.Context(), id, force); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if s.cfg.Tunnels != nil {
		// The sandbox is gone either way; the daemon's next start drops
		// what is left (tunnel.Registry.Keep).
		if err := s.cfg.Tunnels.RemoveSandbox(id); err != nil {
			log.G(r.Context()).Warn("remove the exposed ports of a removed sandbox", "sandbox", id, "error", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) agentByPath(w http.ResponseWriter, r *http.Request) {
	s.proxy.serve(w, r, r.PathValue("id"), "/"+r.PathValue("rest"))
}

func (s *Server) agentByHeader(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(SandboxIDHeader)
	if id == "" && signed(r) {
		s.agentBySignature(w, r)
		return
	}
	if id == "" {
		writeError(r.Context(), w, fmt.Errorf("%s header is required for %s: %w", SandboxIDHeader, r.URL.Path, errdefs.ErrInvalidArgument))
		return
	}
	if r.Context().Value(sandboxAuthKey{}) != nil {
		s.agentBySandboxToken(w, r, id)
		return
	}
	s.proxy.serve(w, r, id, r.URL.Path)
}

// agentBySandboxToken serves an E2B data-plane request, which names its
// sandbox by exact ID and authenticates with the sandbox's access token,
// as E2B's edge does: a sandbox that is gone or not running answers 502
// (the SDK's isRunning() then says false), and a paused sandbox stays
// paused until the control plane's connect resumes it.
func (s *Server) agentBySandboxToken(w http.ResponseWriter, r *http.Request, id string) {
	rec, err := s.cfg.Manager.Get(r.Context(), id)
	if err != nil && !errdefs.IsNotFound(err) {
		writeError(r.Context(), w, err)
		return
	}
	if err != nil || rec.ID != id {
		writeE2BError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s not found", id))
		return
	}
	got := r.Header.Get(AccessTokenHeader)
	if got == "" && signed(r) {
		if err := checkSignature(r, rec.AccessToken, time.Now()); err != nil {
			writeE2BError(w, http.StatusUnauthorized, fmt.Sprintf("%v for sandbox %s", err, id))
			return
		}
	} else if rec.AccessToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(rec.AccessToken)) != 1 {
		writeE2BError(w, http.StatusUnauthorized, fmt.Sprintf("missing or wrong %s for sandbox %s", AccessTokenHeader, id))
		return
	}
	s.forwardE2B(w, r, rec)
}

// writeE2BError writes E2B's error body, {"code": status, "message": msg}.
func writeE2BError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

func toSandbox(rec sandbox.Record) rest.Sandbox {
	sb := rest.Sandbox{
		ID: rec.ID, Name: rec.Name, Image: rec.Image, Runtime: rec.Runtime, Tier: rec.TierOf(), State: string(rec.State),
		Resources: rest.Resources(rec.Resources), Env: rec.Env, Workdir: rec.Workdir, User: rec.User,
		Labels: rec.Labels, Created: rec.Created, AgentPath: "/v1/sandboxes/" + rec.ID + "/agent",
	}
	if !rec.Deadline.IsZero() {
		d := rec.Deadline
		sb.Deadline = &d
	}
	sb.Network, sb.Secrets = fromSettings(rec.Network)
	sb.TimeoutSeconds = int64(rec.Timeout / time.Second)
	sb.IdleTimeoutSeconds = int64(rec.IdleTimeout / time.Second)
	sb.IdleAction = string(rec.IdleAction)
	sb.Origin = rec.Origin
	sb.Volumes = fromVolumeMounts(rec.Volumes)
	sb.AllowPrivilegeEscalation = rec.Spec != nil && rec.Spec.AllowPrivilegeEscalation
	if su := rec.Suspended; su != nil {
		sb.Suspended = &rest.Suspension{Time: su.Time, Memory: su.Memory, MemoryBytes: su.MemoryBytes}
	}
	if ex := rec.Exited; ex != nil {
		sb.Exited = &rest.Exited{Time: ex.Time, Reason: ex.Reason}
	}
	if pl := rec.ProcessesLost; pl != nil {
		sb.ProcessesLost = &rest.ProcessesLost{Time: pl.Time, Reason: pl.Reason}
	}
	sb.Error = rec.Error
	if rec.Spec != nil && rec.Spec.UserNS != nil {
		sb.UserNS = &rest.UserNS{HostID: rec.Spec.UserNS.HostID, Size: rec.Spec.UserNS.Size}
	}
	return sb
}

func boolQuery(r *http.Request, key string) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query %s=%q is not a boolean: %w", key, v, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

// statusWriter records the status for the request log and passes Flush
// through, so that proxied streams are not buffered.
type statusWriter struct {
	http.ResponseWriter
	status int
	// errMsg is the message of the error writeError answered with.
	errMsg string
	// proxied is set once the request is passed to an agent.
	proxied bool
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
