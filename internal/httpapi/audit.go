package httpapi

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/audit"
)

// detachedLog is an AuditLog that records the end of a detached exec
// when it comes (*audit.Store).
type detachedLog interface {
	Detached(box string, d rest.ExecDetail, add func(rest.AuditEvent)) bool
}

// AuditLog is the daemon's audit trail (*audit.Store): the data plane
// adds the execs and file operations it forwards; GET /v1/events and
// GET /v1/sandboxes/{id}/trajectory read it.
type AuditLog interface {
	Add(ev rest.AuditEvent)
	Query(f audit.Filter, fn func(rest.AuditEvent) error) error
	Follow(ctx context.Context, f audit.Filter, buffer int) *audit.Follower
	Has(id string) bool
}

type execRecordKey struct{}

// auditWriter counts the answer's bytes and keeps its status.
type auditWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (w *auditWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += int64(n)
	return n, err
}

func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// countedBody counts the bytes read of a request's body.
// The transport may read it in a goroutine of its own.
type countedBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
