// Package e2bapi serves E2B's control plane (the REST API its SDKs call to
// create, list, connect to, pause and kill sandboxes) on top of the
// sandbox Manager, so that the official E2B SDKs drive Corral unchanged.
// The data plane (envd's protocol) is the agent's own, proxied by
// internal/httpapi. Field names, status codes and the error body
// {"code": int, "message": string} are E2B's; the routes are documented in
// api/openapi.yaml and the mapping onto Corral in docs/e2b.md.
package e2bapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/httpapi"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// EnvdVersion is the envd version the API reports for every sandbox. The
// SDKs gate features on it, and the agent has every one gated up to this
// version: 0.3.0 stdin off, 0.4.0 the template's default user, 0.5.2
// closeStdin, 0.5.7 octet-stream and gzip-encoded uploads, 0.6.2 file
// metadata (user.e2b.* xattrs), 0.6.3 entry info in watch events, 0.6.4
// allowNetworkMounts on watches (the agent refuses no mount; its inotify
// watch sees a network file system's changes made through the box only).
// docs/e2b.md lists where the agent still differs from envd.
const EnvdVersion = "0.6.4"

// ClientID is the deprecated clientID E2B's schema still requires.
const ClientID = "corral"

// DefaultTimeout is a new sandbox's lifetime when the request names none
// (E2B's default).
const DefaultTimeout = 15 * time.Second

// connectDefaultTimeout is what connect (v2) extends the lifetime to when
// the request names no timeout (E2B's default).
const connectDefaultTimeout = 300 * time.Second

// maxRefresh bounds a refresh's duration (E2B's bound).
const maxRefresh = time.Hour

// readyInterval is the pause between two runs of a template's ready
// command.
const readyInterval = 100 * time.Millisecond

// startTag names the managed command a template's start command runs as.
const startTag = "start"

// removeTimeout bounds removing a sandbox whose create failed late.
const removeTimeout = 30 * time.Second

// maxBody bounds a request body.
const maxBody = 1 << 20

// Manager is what the API needs from the sandbox Manager
// (*sandbox.Manager). Errors are classified with errdefs.
type Manager interface {
	Create(ctx context.Context, req sandbox.CreateRequest) (sandbox.Record, error)
	Get(ctx context.Context, idOrName string) (sandbox.Record, error)
	List(ctx context.Context) ([]sandbox.Record, error)
	Delete(ctx context.Context, idOrName string, force bool) error
	Pause(ctx context.Context, idOrName string) (sandbox.Record, error)
	Suspend(ctx context.Context, idOrName string, req sandbox.SuspendRequest) (sandbox.Record, error)
	Resume(ctx context.Context, idOrName string) (sandbox.Record, error)
	SetDeadline(ctx context.Context, idOrName string, t time.Time) (sandbox.Record, error)
	Fork(ctx context.Context, idOrName string, req sandbox.ForkRequest) ([]sandbox.Record, error)
	Snapshot(ctx context.Context, idOrName, name string) (sandbox.Image, error)
	SetNetwork(ctx context.Context, idOrName string, set netpolicy.Settings) (sandbox.Record, error)
}

// Images is what the API needs from the image store (*image.Store):
// snapshots are images with a saved disk.
type Images interface {
	List(ctx context.Context) ([]sandbox.Image, error)
	Remove(ctx context.Context, name string) error
}

// Config wires an API.
type Config struct {
	Manager Manager
	// Images lists and removes snapshots; nil answers 501 there.
	Images Images
	// Secrets serves /secrets; nil answers 501 there.
	Secrets SecretStore
	// Volumes serves /volumes; nil answers 501 there.
	Volumes Volumes
	// VolumeDir returns the host directory of volume name's files, which
	// /volumecontent serves; nil answers 501 there.
	VolumeDir func(name string) (string, error)
	// Domain is reported as each sandbox's domain; empty reports none
	// (the SDK then needs E2B_SANDBOX_URL).
	Domain string
	// Removed is called with the ID of each sandbox a kill removed (the
	// daemon drops its exposed ports); nil does nothing.
	Removed func(ctx context.Context, id string)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Stats serves the sandbox metrics routes; nil answers 501.
	Stats Stats
	// Audit serves the sandbox logs routes from the audit trail; nil
	// answers 501.
	Audit AuditTrail
	// Builder, TemplateImages and TemplateDir (where templates' records
	// and uploaded files are kept) serve template builds; without any of
	// them those routes answer 501.
	Builder        Builder
	TemplateImages TemplateImages
	TemplateDir    string
	// Context is the daemon's lifetime: template builds, which outlive
	// their request, stop with it. Nil means they run to their end.
	Context context.Context
	// Commands runs the start and ready commands of templates in their
	// new sandboxes; nil refuses templates that have them.
	Commands Commands
	// ReadyTimeout bounds how long a create waits for its template's
	// ready command to exit 0; zero means two minutes.
	ReadyTimeout time.Duration
}

// Commands runs commands in a box through its agent at addr (the
// daemon's agent pool), with the agent's default user and working
// directory (the template's).
type Commands interface {
	// Start starts cmd through /bin/sh -c as a managed command named
	// tag and returns once it started; it keeps running.
	Start(ctx context.Context, addr, tag, cmd string) (uint32, error)
	// Run runs cmd through /bin/sh -c until it ends, or ctx does, and
	// returns its exit code.
	Run(ctx context.Context, addr, cmd string) (int, error)
}

// API serves E2B's control plane.
type API struct {
	cfg Config
	// secretMu makes a secret's create (409 when it exists) and update
	// (404 when it does not) one step.
	secretMu sync.Mutex
	// recordMu serializes changes to template records.
	recordMu sync.Mutex
	tmpl     templates
}

// New returns an API for cfg.
func New(cfg Config) (*API, error) {
	if cfg.Manager == nil {
		return nil, fmt.Errorf("e2bapi: manager is required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 2 * time.Minute
	}
	if cfg.TemplateDir != "" {
		// Build contexts a killed daemon left behind.
		old, _ := filepath.Glob(filepath.Join(cfg.TemplateDir, ".context-*"))
		for _, p := range old {
			if err := os.RemoveAll(p); err != nil {
				return nil, fmt.Errorf("e2bapi: clean template build contexts: %w", err)
			}
		}
	}
	return &API{cfg: cfg}, nil
}

// Routes returns the handlers by ServeMux pattern (httpapi.RouteSet).
func (a *API) Routes() map[string]http.HandlerFunc {
	r := map[string]http.HandlerFunc{
		"POST /sandboxes":                 a.create,
		"POST /v2/sandboxes":              a.create,
		"GET /sandboxes":                  a.listV1,
		"GET /v2/sandboxes":               a.listV2,
		"GET /sandboxes/{id}":             a.get,
		"DELETE /sandboxes/{id}":          a.kill,
		"POST /sandboxes/{id}/timeout":    a.setTimeout,
		"POST /sandboxes/{id}/refreshes":  a.refresh,
		"POST /sandboxes/{id}/connect":    a.connectV1,
		"POST /v2/sandboxes/{id}/connect": a.connectV2,
		"POST /sandboxes/{id}/pause":      a.pause,
		"POST /sandboxes/{id}/resume":     a.resume,
		"GET /sandboxes/{id}/metrics":     a.metrics,
		"GET /sandboxes/metrics":          a.metricsMany,
		"GET /sandboxes/{id}/logs":        a.logsV1,
		"GET /v2/sandboxes/{id}/logs":     a.logsV2,
		"POST /sandboxes/{id}/fork":       a.fork,
		"POST /sandboxes/{id}/snapshots":  a.createSnapshot,
		"PUT /sandboxes/{id}/network":     a.updateNetwork,
		"GET /snapshots":                  a.listSnapshots,
		"DELETE /templates/{id}":          a.deleteTemplate,
		"GET /secrets":                    a.listSecrets,
		"POST /secrets":                   a.createSecret,
		"GET /secrets/{id}":               a.getSecret,
		"POST /secrets/{id}":              a.updateSecret,
		"DELETE /secrets/{id}":            a.deleteSecret,
		"POST /volumes":                   a.createVolume,
		"GET /volumes":                    a.listVolumes,
		"GET /volumes/{id}":               a.getVolume,
		"DELETE /volumes/{id}":            a.deleteVolume,
	}
	a.templateRoutes(r)
	a.volumeContentRoutes(r)
	return r
}

// notYet answers 501 for a route of E2B's API that Corral does not serve
// yet, naming it, rather than 404, which the SDKs read as "no such
// sandbox".
func (a *API) notYet(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		a.fail(w, r, fmt.Errorf("%s: not supported by Corral's E2B API yet (see docs/e2b.md): %w", what, errdefs.ErrNotImplemented))
	}
}

// errorBody is E2B's error body.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// fail writes err as E2B's error body with its status: httpapi.Classify's,
// except that a failed precondition is E2B's 409 (a sandbox in the wrong
// state), which the SDKs test for.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := httpapi.Classify(err)
	if status == http.StatusPreconditionFailed {
		status = http.StatusConflict
	}
	if status >= 500 && status != http.StatusNotImplemented {
		log.G(r.Context()).Error("e2b request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, status, errorBody{Code: status, Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

// decode reads an optional JSON body into v: an empty body leaves v as
// it is. Unknown fields are ignored, as E2B's API adds fields the SDKs
// send before servers know them.
func decode(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, maxBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return fmt.Errorf("request body is larger than %d bytes: %w", maxBody, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// seconds turns a field in seconds into a duration, checking its range.
func seconds(field string, s int64, limit time.Duration) (time.Duration, error) {
	if s < 0 || s > int64(limit/time.Second) {
		return 0, fmt.Errorf("%s %d must be between 0 and %d seconds: %w", field, s, int64(limit/time.Second), errdefs.ErrInvalidArgument)
	}
	return time.Duration(s) * time.Second, nil
}

// state is a Corral state as E2B's: running or paused (suspended and
// moving between the two count as paused); others keep Corral's name.
func state(s sandbox.RecordState) string {
	switch s {
	case sandbox.StateRunning, sandbox.StateCreating:
		return "running"
	case sandbox.StatePaused, sandbox.StateSuspended, sandbox.StateSuspending, sandbox.StateResuming:
		return "paused"
	}
	return string(s)
}

// mib is n bytes in MiB, rounded up.
func mib(n int64) int64 { return (n + 1<<20 - 1) >> 20 }

// cpuCount is cpus as E2B's whole count, at least 1.
func cpuCount(cpus float64) int { return max(1, int(math.Ceil(cpus))) }
