package e2bapi

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/audit"
)

// AuditTrail is what the logs routes need of the audit trail
// (*audit.Store): a sandbox's log is its trail.
type AuditTrail interface {
	Query(f audit.Filter, fn func(rest.AuditEvent) error) error
	// Has reports whether a trail of sandbox id is kept (a removed
	// sandbox's is, for a while).
	Has(id string) bool
}

// Bounds of a logs page (E2B's default and maximum).
const (
	defaultLogLimit = 1000
	maxLogLimit     = 1000
)

// logEntry is E2B's SandboxLogEntry.
type logEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// logLine is E2B's SandboxLog (the v1 route's plain lines).
type logLine struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// levels orders E2B's log levels.
var levels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

// logQuery is a parsed logs request.
type logQuery struct {
	start    time.Time // zero: from the first
	backward bool
	level    int
	search   string
	limit    int
}

// parseLogQuery reads a logs request: v1 takes start (ms) and limit; v2
// cursor (ms), direction, level, search and limit.
func parseLogQuery(r *http.Request, v2 bool) (logQuery, error) {
	q := r.URL.Query()
	lq := logQuery{limit: defaultLogLimit}
	startKey := "start"
	if v2 {
		startKey = "cursor"
	}
	if s := q.Get(startKey); s != "" {
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			return lq, fmt.Errorf("%s %q must be a time in milliseconds since the epoch: %w", startKey, s, errdefs.ErrInvalidArgument)
		}
		lq.start = time.UnixMilli(ms)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxLogLimit {
			return lq, fmt.Errorf("limit %q must be between 0 and %d: %w", s, maxLogLimit, errdefs.ErrInvalidArgument)
		}
		lq.limit = n
	}
	if !v2 {
		return lq, nil
	}
	switch d := q.Get("direction"); d {
	case "", "forward":
	case "backward":
		lq.backward = true
	default:
		return lq, fmt.Errorf("direction %q must be forward or backward: %w", d, errdefs.ErrInvalidArgument)
	}
	if l := q.Get("level"); l != "" {
		n, ok := levels[l]
		if !ok {
			return lq, fmt.Errorf("level %q must be debug, info, warn or error: %w", l, errdefs.ErrInvalidArgument)
		}
		lq.level = n
	}
	lq.search = q.Get("search")
	return lq, nil
}

// errEnough ends a query once a forward page is full.
var errEnough = errors.New("enough")

// entries reads the page of sandbox id's log that lq asks for: forward,
// the oldest entries at or after start; backward, the newest at or before
// it (now when absent), newest first.
func (a *API) entries(r *http.Request, lq logQuery) ([]logEntry, error) {
	id := r.PathValue("id")
	if a.cfg.Audit == nil {
		return nil, fmt.Errorf("sandbox logs: the daemon keeps no audit trail ([audit] is off): %w", errdefs.ErrNotImplemented)
	}
	if rec, err := a.cfg.Manager.Get(r.Context(), id); err == nil {
		id = rec.ID
	} else if !errdefs.IsNotFound(err) || !a.cfg.Audit.Has(id) {
		return nil, err
	}
	out := []logEntry{}
	if lq.limit == 0 {
		return out, nil
	}
	f := audit.Filter{Sandbox: id}
	if !lq.backward {
		f.Since = lq.start
	}
	err := a.cfg.Audit.Query(f, func(ev rest.AuditEvent) error {
		if lq.backward && !lq.start.IsZero() && ev.Time.After(lq.start) {
			return nil
		}
		e := entryOf(ev)
		if levels[e.Level] < lq.level || lq.search != "" && !strings.Contains(e.Message, lq.search) {
			return nil
		}
		out = append(out, e)
		switch {
		case !lq.backward && len(out) == lq.limit:
			return errEnough
		case lq.backward && len(out) > lq.limit:
			out = out[1:] // the oldest goes: the page is the newest
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return nil, err
	}
	if lq.backward {
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	}
	return out, nil
}

// logsV1 serves the deprecated GET /sandboxes/{id}/logs: the entries and
// the same as plain lines.
func (a *API) logsV1(w http.ResponseWriter, r *http.Request) {
	lq, err := parseLogQuery(r, false)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	es, err := a.entries(r, lq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	lines := make([]logLine, len(es))
	for i, e := range es {
		lines[i] = logLine{Timestamp: e.Timestamp, Line: e.Message}
	}
	writeJSON(w, http.StatusOK, struct {
		Logs       []logLine  `json:"logs"`
		LogEntries []logEntry `json:"logEntries"`
	}{lines, es})
}

// logsV2 serves GET /v2/sandboxes/{id}/logs.
func (a *API) logsV2(w http.ResponseWriter, r *http.Request) {
	lq, err := parseLogQuery(r, true)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	es, err := a.entries(r, lq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Logs []logEntry `json:"logs"`
	}{es})
}

// entryOf is an audit event as a log entry: a line that says what
// happened, its level (error for a failed command or file operation, a
// refused connection and an alert at its limit; warn for other alerts
// and lost events), and the event's details as fields. Command output is
// not in the trail, so not in the log (the agent keeps it: corral logs).
func entryOf(ev rest.AuditEvent) logEntry {
	e := logEntry{Timestamp: ev.Time, Level: "info", Fields: map[string]string{"type": ev.Type, "seq": strconv.FormatUint(ev.Seq, 10)}}
	set := func(k, v string) {
		if v != "" {
			e.Fields[k] = v
		}
	}
	set("client", ev.Client)
	switch {
	case ev.Lifecycle != nil:
		l := ev.Lifecycle
		e.Message = "sandbox " + l.Change
		if l.From != "" || l.To != "" {
			e.Message += ": " + l.From + " -> " + l.To
		}
		if l.Reason != "" {
			e.Message += " (" + l.Reason + ")"
		}
		set("change", l.Change)
		set("from", l.From)
		set("to", l.To)
		set("reason", l.Reason)
	case ev.Exec != nil:
		x := ev.Exec
		cmd := strings.Join(append([]string{x.Cmd}, x.Args...), " ")
		set("exec", x.ID)
		set("cmd", cmd)
		set("user", x.User)
		set("cwd", x.Cwd)
		if x.Pid != 0 {
			set("pid", strconv.FormatUint(uint64(x.Pid), 10))
		}
		if ev.Type == rest.AuditExec {
			e.Message = "process started: " + cmd
			break
		}
		e.Message = "process ended: " + cmd
		if x.Status != "" {
			e.Message += ": " + x.Status
		}
		if x.ExitCode != nil {
			set("exitCode", strconv.Itoa(*x.ExitCode))
		}
		if x.Error != "" || x.OOM || x.TimedOut || x.ExitCode != nil && *x.ExitCode != 0 {
			e.Level = "error"
		}
		if x.Error != "" {
			e.Message += ": " + x.Error
		}
	case ev.File != nil:
		fd := ev.File
		e.Message = "file " + fd.Op + " " + fd.Path
		if fd.To != "" {
			e.Message += " -> " + fd.To
		}
		set("op", fd.Op)
		set("path", fd.Path)
		set("user", fd.User)
		set("status", strconv.Itoa(fd.Status))
		if fd.Status >= 400 {
			e.Level = "error"
		}
	case ev.Network != nil:
		n := ev.Network
		dest := n.Host
		if dest == "" {
			dest = n.Addr
		}
		e.Message = fmt.Sprintf("network %s %s %s", n.Kind, n.Verdict, dest)
		if n.Port != 0 {
			e.Message += ":" + strconv.Itoa(int(n.Port))
		}
		if n.Reason != "" {
			e.Message += " (" + n.Reason + ")"
		}
		set("verdict", n.Verdict)
		set("host", n.Host)
		set("addr", n.Addr)
		if n.Verdict != "allow" {
			e.Level = "warn"
		}
	case ev.Alert != nil:
		e.Message = ev.Alert.Message
		e.Level = "warn"
		if ev.Alert.Level == "critical" {
			e.Level = "error"
		}
		set("kind", ev.Alert.Kind)
	default:
		e.Message = ev.Type
		if ev.Type == rest.AuditDropped {
			e.Message = fmt.Sprintf("%d earlier log entries were dropped", ev.Dropped)
			e.Level = "warn"
		}
	}
	return e
}
