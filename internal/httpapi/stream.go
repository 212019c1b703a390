package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/build"
	"github.com/corral-sandbox/corral/internal/image"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// progressInterval is the least time between two "pulling" events of one
// layer; status changes are always sent.
const progressInterval = 100 * time.Millisecond

// eventStream writes rest.Events as application/x-ndjson, one flushed line
// each. The response starts with the first event, so that an operation
// that fails before reporting anything answers with a plain HTTP error.
// Its methods may be called from several goroutines.
type eventStream struct {
	w  http.ResponseWriter
	rc *http.ResponseController

	mu sync.Mutex
	// started is set once the header is written; guarded by mu.
	started bool
	// broken is set when a write failed (the client went away); guarded by mu.
	broken bool
	// layers holds the last progress sent per layer; guarded by mu.
	layers map[string]sentProgress
}

type sentProgress struct {
	status string
	at     time.Time
}

func newEventStream(w http.ResponseWriter) *eventStream {
	return &eventStream{w: w, rc: http.NewResponseController(w), layers: map[string]sentProgress{}}
}

// send writes one event.
func (s *eventStream) send(ev rest.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sendLocked(ev)
}

func (s *eventStream) sendLocked(ev rest.Event) {
	if s.broken {
		return
	}
	if !s.started {
		s.started = true
		s.w.Header().Set("Content-Type", "application/x-ndjson")
		s.w.Header().Set("X-Content-Type-Options", "nosniff")
		s.w.Header().Set("Cache-Control", "no-cache")
		s.w.WriteHeader(http.StatusOK)
	}
	b, err := json.Marshal(ev)
	if err == nil {
		_, err = s.w.Write(append(b, '\n'))
	}
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		s.broken = true // the request's ctx ends the operation
	}
}

// progress sends a pull or load progress report, at most one "pulling"
// report per layer per progressInterval.
func (s *eventStream) progress(p image.Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	last, ok := s.layers[p.Layer]
	if ok && p.Status == "pulling" && last.status == p.Status && now.Sub(last.at) < progressInterval {
		return
	}
	s.layers[p.Layer] = sentProgress{status: p.Status, at: now}
	s.sendLocked(rest.Event{Type: "progress", Progress: toProgress(p)})
}

// logWriter returns a writer whose writes become "log" events.
func (s *eventStream) logWriter(stream string) *logWriter {
	return &logWriter{s: s, stream: stream}
}

type logWriter struct {
	s      *eventStream
	stream string
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.s.send(rest.Event{Type: "log", Stream: w.stream, Data: string(p)})
	return len(p), nil
}

// finish ends the stream with an "image" or an "error" event; when nothing
// was sent yet, an error is a plain HTTP error response instead.
func (s *eventStream) finish(ctx context.Context, img rest.Image, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err == nil {
		s.sendLocked(rest.Event{Type: "image", Image: &img})
		return
	}
	if !s.started {
		s.started = true
		writeError(ctx, s.w, err)
		return
	}
	status, code := Classify(err)
	if status >= 500 && ctx.Err() == nil {
		log.G(ctx).Error("request failed", "error", err)
	}
	ev := rest.Event{Type: "error", Error: &rest.ErrorBody{Code: code, Message: err.Error()}}
	var se *build.StepError
	if errors.As(err, &se) && se.ExitCode >= 0 {
		code := se.ExitCode
		ev.ExitCode = &code
	}
	s.sendLocked(ev)
}

// buildEvent forwards an event of a build. The builder's own "image" event
// is dropped: finish sends the image.
func (s *eventStream) buildEvent(ev build.Event) {
	switch ev.Type {
	case "image":
		return
	case "progress":
		if ev.Progress != nil {
			s.progress(*ev.Progress)
			return
		}
	}
	s.send(rest.Event{
		Type: ev.Type, Step: ev.Step, Steps: ev.Steps, Name: ev.Name, Cached: ev.Cached,
		Stream: ev.Stream, Data: ev.Data, Layer: ev.Layer,
	})
}

func toProgress(p image.Progress) *rest.Progress {
	return &rest.Progress{Layer: p.Layer, Index: p.Index, Count: p.Count, Status: p.Status, Current: p.Current, Total: p.Total}
}

// streamResult ends the stream with the operation's image or error.
func (s *Server) streamResult(ctx context.Context, st *eventStream, img sandbox.Image, err error) {
	if err != nil {
		st.finish(ctx, rest.Image{}, err)
		return
	}
	st.finish(ctx, s.toImage(ctx, img), nil)
}
