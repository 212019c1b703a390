// Package httpapi serves Corral's HTTP API: the control-plane REST routes
// (sandboxes, images, version; documented in api/openapi.yaml) and the data
// plane, which reverse-proxies the agent protocol of each sandbox. It is the
// only place where error classes become HTTP status codes.
package httpapi

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api"
	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// maxJSONBody bounds buffered JSON request bodies.
const maxJSONBody = 1 << 20

// SandboxIDHeader selects the sandbox of an E2B-style data-plane request.
const SandboxIDHeader = "E2b-Sandbox-Id"

// Images is what the API needs from the image store.
type Images interface {
	List(ctx context.Context) ([]sandbox.Image, error)
	// Import makes image name from a tar (optionally gzip-compressed) of a
	// root file system.
	Import(ctx context.Context, name string, r io.Reader) (sandbox.Image, error)
	// Remove deletes image name; errdefs.ErrNotFound when missing.
	Remove(ctx context.Context, name string) error
}

// Config wires a Server.
type Config struct {
	Manager *sandbox.Manager
	Images  Images
	// Version is returned by GET /v1/version.
	Version rest.Version
	// Dial connects to an agent address; nil means DialAgent.
	Dial DialFunc
}

// Server is the HTTP API.
type Server struct {
	cfg   Config
	mux   *http.ServeMux
	proxy *agentProxy
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Manager == nil || cfg.Images == nil {
		return nil, fmt.Errorf("httpapi: manager and images are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Dial == nil {
		cfg.Dial = DialAgent
	}
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	s.proxy = newAgentProxy(cfg.Manager, cfg.Dial)
	for pattern, h := range s.routes() {
		s.mux.HandleFunc(pattern, h)
	}
	return s, nil
}

// Routes returns the registered route patterns, for documentation checks.
func (s *Server) Routes() []string {
	var out []string
	for p := range s.routes() {
		out = append(out, p)
	}
	return out
}

func (s *Server) routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /health":                        s.health,
		"GET /openapi.yaml":                  s.openapi,
		"GET /v1/version":                    s.version,
		"POST /v1/sandboxes":                 s.createSandbox,
		"GET /v1/sandboxes":                  s.listSandboxes,
		"GET /v1/sandboxes/{id}":             s.getSandbox,
		"DELETE /v1/sandboxes/{id}":          s.deleteSandbox,
		"GET /v1/images":                     s.listImages,
		"POST /v1/images/{name}":             s.importImage,
		"DELETE /v1/images/{name}":           s.removeImage,
		"/v1/sandboxes/{id}/agent/{rest...}": s.agentByPath,
		"/process.Process/{method}":          s.agentByHeader,
		"/filesystem.Filesystem/{method}":    s.agentByHeader,
		"/files":                             s.agentByHeader,
	}
}

// Handler returns the API without authentication (for the unix socket,
// whose file mode is the access control).
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		s.mux.ServeHTTP(rw, r)
		log.G(r.Context()).Debug("http request", "method", r.Method, "path", r.URL.Path,
			"status", rw.status, "duration", time.Since(start))
	})
}

// RequireToken wraps h so that every request needs "Authorization: Bearer
// <token>", compared in constant time; others get a 401 JSON error.
func RequireToken(token string, h http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := []byte(r.Header.Get("Authorization"))
		if token == "" || subtle.ConstantTimeCompare(got, want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
			writeError(r.Context(), w, fmt.Errorf("missing or wrong bearer token: %w", errdefs.ErrUnauthenticated))
			return
		}
		h.ServeHTTP(w, r)
	})
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

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req rest.CreateSandboxRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if req.TimeoutSeconds < 0 || req.TimeoutSeconds > int64(sandbox.MaxTimeout/time.Second) {
		writeError(r.Context(), w, fmt.Errorf("timeout_seconds %d must be between 0 and %d: %w",
			req.TimeoutSeconds, int64(sandbox.MaxTimeout/time.Second), errdefs.ErrInvalidArgument))
		return
	}
	rec, err := s.cfg.Manager.Create(r.Context(), sandbox.CreateRequest{
		Image:     req.Image,
		Name:      req.Name,
		Resources: sandbox.Resources(req.Resources),
		Env:       req.Env,
		Workdir:   req.Workdir,
		User:      req.User,
		Labels:    req.Labels,
		Timeout:   time.Duration(req.TimeoutSeconds) * time.Second,
		Runtime:   req.Runtime,
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
	rec, err := s.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	sb := toSandbox(rec)
	if rec.State == sandbox.StateRunning {
		// Usage is best effort: a runtime that cannot read it leaves it out.
		if u, err := s.cfg.Manager.Usage(r.Context(), rec.ID); err == nil {
			sb.Usage = &rest.Usage{
				CPUNanos: u.CPUNanos, MemoryBytes: u.MemoryBytes, MemoryPeakBytes: u.MemoryPeakBytes,
				MemoryLimitBytes: u.MemoryLimitBytes, Pids: u.Pids, PidsLimit: u.PidsLimit, OOMKills: u.OOMKills,
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
	if err := s.cfg.Manager.Delete(r.Context(), r.PathValue("id"), force); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) listImages(w http.ResponseWriter, r *http.Request) {
	imgs, err := s.cfg.Images.List(r.Context())
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	out := rest.ImageList{Images: make([]rest.Image, 0, len(imgs))}
	for _, i := range imgs {
		out.Images = append(out.Images, s.toImage(i))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) importImage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := identifiers.Validate("image name", name); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	img, err := s.cfg.Images.Import(r.Context(), name, r.Body)
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.toImage(img))
}

func (s *Server) removeImage(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := identifiers.Validate("image name", name); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if ids := s.cfg.Manager.ImageInUse(name); len(ids) > 0 {
		writeError(r.Context(), w, fmt.Errorf("image %s is used by sandboxes %s: %w",
			name, strings.Join(ids, ", "), errdefs.ErrFailedPrecondition))
		return
	}
	if err := s.cfg.Images.Remove(r.Context(), name); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) agentByPath(w http.ResponseWriter, r *http.Request) {
	s.proxy.serve(w, r, r.PathValue("id"), "/"+r.PathValue("rest"))
}

func (s *Server) agentByHeader(w http.ResponseWriter, r *http.Request) {
	id := r.Header.Get(SandboxIDHeader)
	if id == "" {
		writeError(r.Context(), w, fmt.Errorf("%s header is required for %s: %w", SandboxIDHeader, r.URL.Path, errdefs.ErrInvalidArgument))
		return
	}
	s.proxy.serve(w, r, id, r.URL.Path)
}

func (s *Server) toImage(i sandbox.Image) rest.Image {
	return rest.Image{
		Name: i.Name, Created: i.Created, Size: i.Size, Layers: i.Layers,
		Builtin: i.Builtin, Default: i.Name == s.cfg.Manager.DefaultImage(),
	}
}

func toSandbox(rec sandbox.Record) rest.Sandbox {
	sb := rest.Sandbox{
		ID: rec.ID, Name: rec.Name, Image: rec.Image, Runtime: rec.Runtime, State: string(rec.State),
		Resources: rest.Resources(rec.Resources), Env: rec.Env, Workdir: rec.Workdir, User: rec.User,
		Labels: rec.Labels, Created: rec.Created, AgentPath: "/v1/sandboxes/" + rec.ID + "/agent",
	}
	if !rec.Deadline.IsZero() {
		d := rec.Deadline
		sb.Deadline = &d
	}
	return sb
}

// decodeJSON reads at most maxJSONBody bytes of one JSON value into v,
// rejecting unknown fields and trailing data.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("request body is larger than %d bytes: %w", maxJSONBody, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("decode request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("request body has data after the JSON value: %w", errdefs.ErrInvalidArgument)
	}
	return nil
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
