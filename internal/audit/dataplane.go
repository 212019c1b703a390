package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/rest"
)

// The data plane's audit (package httpapi's proxy calls it): an exec is
// recorded from its request (command, arguments, cwd, user, the names of
// the environment variables, never their values) and its answer stream
// (pid, output sizes, exit); a file operation from its request (op, path)
// and answer (status, bytes). The request is parsed only once the agent
// answered, the stream's messages are looked at through their first bytes
// only, and the Store writes in its own goroutine: recording adds no wait
// to the request.

// connectEndStream marks the Connect end-of-stream envelope.
const connectEndStream = 0x02

// MaxMsgPrefix is how much of each message of an exec's answer stream is
// kept to be parsed: all of a start or end event, the headers of a data
// event.
const MaxMsgPrefix = 1024

// Exec follows one exec through the data plane.
type Exec struct {
	add    func(rest.AuditEvent)
	id     string // sandbox
	req    *http.Request
	body   []byte // the request's body, when it was kept (replayable)
	json   bool   // the Connect JSON codec (else proto)
	execID string

	// Detach, when set, is offered the exec when the client left before
	// it ended (Store.Detached): when it takes it, the exec_end is
	// recorded later, with the outcome.
	Detach func(box string, d rest.ExecDetail, add func(rest.AuditEvent)) bool

	mu      sync.Mutex
	detail  *rest.ExecDetail
	started bool // the exec event was added
	ended   bool // the exec_end event was added
}

var execSeq atomic.Uint64

// NewExec starts following the exec r (to sandbox id) carries; add
// records its events.
func NewExec(add func(rest.AuditEvent), id string, r *http.Request) *Exec {
	e := &Exec{add: add, id: id, req: r, json: strings.Contains(r.Header.Get("Content-Type"), "json"),
		execID: strconv.FormatUint(execSeq.Add(1), 36) + "-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 36)}
	if r.GetBody != nil {
		if b, err := r.GetBody(); err == nil {
			e.body, _ = io.ReadAll(b)
		}
	}
	e.detail = &rest.ExecDetail{ID: e.execID, Start: time.Now().UTC()}
	return e
}

// parseRequest fills the command from the request body (a Connect
// envelope around a StartRequest). Env values are dropped here.
func (e *Exec) parseRequest() {
	d := e.detail
	d.User = userFromBasic(e.req.Header.Get("Authorization"))
	msg := e.body
	if len(msg) >= 5 {
		n := binary.BigEndian.Uint32(msg[1:5])
		if int(n) <= len(msg)-5 {
			msg = msg[5 : 5+n]
		}
	}
	var sr processpb.StartRequest
	var err error
	if e.json {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(msg, &sr)
	} else {
		err = proto.Unmarshal(msg, &sr)
	}
	if err != nil || sr.GetProcess() == nil {
		d.Cmd = "?"
		return
	}
	p := sr.GetProcess()
	d.Cmd, d.Args, d.Cwd, d.Tag = p.GetCmd(), p.GetArgs(), p.GetCwd(), sr.GetTag()
	if u := p.GetUser(); u != "" {
		d.User = u
	}
	for k := range p.GetEnvs() {
		d.Env = append(d.Env, k)
	}
	slices.Sort(d.Env)
}

// Message is given each envelope of the answer stream: its flags, the
// first bytes of its message and the message's size.
func (e *Exec) Message(flags byte, pre []byte, size uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return
	}
	if flags&connectEndStream != 0 {
		// The Connect trailer: an error when the call failed.
		var end struct {
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(pre, &end) == nil && end.Error != nil && e.detail.Error == "" {
			e.detail.Error = end.Error.Message
		}
		return
	}
	if stream, n, ok := dataSize(pre, size, e.json); ok {
		switch stream {
		case 1:
			e.detail.StdoutBytes += n
		case 2:
			e.detail.StderrBytes += n
		default:
			e.detail.PtyBytes += n
		}
		return
	}
	if int(size) > len(pre) {
		return // a keepalive or start/end event cut short: nothing to learn
	}
	var sr processpb.StartResponse
	var err error
	if e.json {
		err = protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(pre, &sr)
	} else {
		err = proto.Unmarshal(pre, &sr)
	}
	if err != nil {
		return
	}
	ev := sr.GetEvent()
	switch {
	case ev.GetStart() != nil:
		e.detail.Pid = ev.GetStart().GetPid()
		e.startLocked()
	case ev.GetEnd() != nil:
		end := ev.GetEnd()
		code := int(end.GetExitCode())
		e.detail.ExitCode = &code
		e.detail.Status, e.detail.Error = end.GetStatus(), end.GetError()
		e.detail.OOM, e.detail.TimedOut = end.GetOomKilled(), end.GetTimedOut()
		e.detail.CPUTimeUS, e.detail.PeakMemoryBytes = end.GetCpuTimeUs(), end.GetPeakMemoryBytes()
		e.detail.Signal = signalOf(end.GetStatus())
		e.endLocked(false)
	}
}

// SetOOMKilled records that the OOM killer ended the command when the
// daemon, not the agent, reports its end: a gvisor box, which the OOM
// killer ends whole, sends no end event.
func (e *Exec) SetOOMKilled() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.detail.OOM = true
}

// startLocked adds the exec event; the caller holds mu.
func (e *Exec) startLocked() {
	if e.started {
		return
	}
	e.started = true
	e.parseRequest()
	d := *e.detail
	e.add(rest.AuditEvent{Time: d.Start, Sandbox: e.id, Type: rest.AuditExec, Exec: &d})
}

// endLocked adds the exec_end event; the caller holds mu.
func (e *Exec) endLocked(detached bool) {
	e.startLocked()
	e.ended = true
	d := *e.detail
	now := time.Now().UTC()
	d.End, d.Detached = &now, detached
	e.add(rest.AuditEvent{Time: now, Sandbox: e.id, Type: rest.AuditExecEnd, Exec: &d})
}

// Finish ends the record once the proxy is done with the request: a
// stream that ended without the command's end event was left by the
// client (or broke, then the error says so); status is the answer's. A
// command the client left is offered to Detach, which records its end
// when it comes.
func (e *Exec) Finish(status int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return
	}
	if status >= 400 && e.detail.Error == "" {
		e.detail.Error = "answered " + strconv.Itoa(status) + " " + http.StatusText(status)
	}
	detached := e.detail.Error == ""
	if detached && e.started && e.Detach != nil {
		d := *e.detail
		add := e.add
		id := e.id
		if e.Detach(id, d, func(ev rest.AuditEvent) { ev.Sandbox = id; add(ev) }) {
			e.ended = true
			return
		}
	}
	e.endLocked(detached)
}

// signalOf returns the signal of an end status ("signal: killed" ->
// "killed"), or "".
func signalOf(status string) string {
	sig, _ := strings.CutPrefix(status, "signal: ")
	if sig == status {
		return ""
	}
	return sig
}

// dataSize reports the output stream (1 stdout, 2 stderr, 3 pty) and the
// number of bytes of a data event, from the first bytes of its message.
func dataSize(pre []byte, size uint32, isJSON bool) (int, int64, bool) {
	if isJSON {
		// {"event":{"data":{"stdout":"<base64>"}}}
		i := bytes.Index(pre, []byte(`"data"`))
		if i < 0 {
			return 0, 0, false
		}
		for k, name := range []string{`"stdout"`, `"stderr"`, `"pty"`} {
			j := bytes.Index(pre[i:], []byte(name))
			if j < 0 {
				continue
			}
			q := bytes.IndexByte(pre[i+j+len(name):], '"')
			if q < 0 {
				return k + 1, 0, true
			}
			start := i + j + len(name) + q + 1
			// The value runs to the closing quote and braces: "}}}.
			b64 := int64(size) - int64(start) - 4
			return k + 1, max(0, b64*3/4), true
		}
		return 0, 0, false
	}
	// StartResponse.event (1) > ProcessEvent.data (2) > one of the
	// output fields (1, 2, 3).
	b := pre
	for _, want := range []protowire.Number{1, 2, 0} {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType || (want != 0 && num != want) || (want == 0 && (num < 1 || num > 3)) {
			return 0, 0, false
		}
		b = b[n:]
		l, m := protowire.ConsumeVarint(b)
		if m < 0 {
			return 0, 0, false
		}
		b = b[m:]
		if want == 0 {
			return int(num), int64(l), true
		}
	}
	return 0, 0, false
}

// userFromBasic returns the user of "Authorization: Basic base64(user:)",
// as E2B's SDKs send it, or "".
func userFromBasic(a string) string {
	enc, ok := strings.CutPrefix(a, "Basic ")
	if !ok {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return ""
	}
	u, _, _ := strings.Cut(string(b), ":")
	return u
}

// FileOp returns the audit op of a data-plane path, or "" when the path
// is no file operation.
func FileOp(method, path string) string {
	if path == "/files" {
		if method == http.MethodGet {
			return "read"
		}
		return "write"
	}
	m, ok := strings.CutPrefix(path, "/filesystem.Filesystem/")
	if !ok || m == "GetWatcherEvents" || m == "RemoveWatcher" {
		return "" // a watcher's ID, no path
	}
	// MakeDir -> make_dir.
	var b strings.Builder
	for i, r := range m {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FileEvent returns the event of file operation op (FileOp), request r
// to sandbox id with its body (when kept) of which in bytes were sent,
// answered with status and out bytes.
func FileEvent(id, op string, r *http.Request, body []byte, status int, in, out int64) rest.AuditEvent {
	d := &rest.FileDetail{Op: op, Status: status}
	if op == "read" || op == "write" {
		q := r.URL.Query()
		d.Path, d.User = q.Get("path"), q.Get("username")
		if op == "read" && status < 300 {
			d.Bytes = out
		}
		if op == "write" {
			d.Bytes = max(in, r.ContentLength, int64(len(body)))
		}
		if q.Get("format") == "tar" {
			d.Op += "_tar" // a tar stream of a directory (corral cp)
		}
	} else {
		d.Path, d.To = requestPaths(body, strings.Contains(r.Header.Get("Content-Type"), "json"))
	}
	if d.User == "" {
		d.User = userFromBasic(r.Header.Get("Authorization"))
	}
	return rest.AuditEvent{Sandbox: id, Type: rest.AuditFile, File: d}
}

// requestPaths returns the path (or a move's source and destination) of
// a filesystem.Filesystem request: fields 1 and 2 of the message, or
// "path", "source" and "destination" in JSON.
func requestPaths(body []byte, isJSON bool) (string, string) {
	if len(body) >= 5 && (body[0] == 0 || body[0] == 1) && int(binary.BigEndian.Uint32(body[1:5])) == len(body)-5 {
		body = body[5:] // a streaming call's envelope (WatchDir)
	}
	if isJSON {
		var v struct {
			Path        string `json:"path"`
			Source      string `json:"source"`
			Destination string `json:"destination"`
		}
		if json.Unmarshal(body, &v) != nil {
			return "", ""
		}
		if v.Source != "" {
			return v.Source, v.Destination
		}
		return v.Path, ""
	}
	var f [3]string
	for len(body) > 0 {
		num, typ, n := protowire.ConsumeTag(body)
		if n < 0 {
			break
		}
		body = body[n:]
		if typ == protowire.BytesType && (num == 1 || num == 2) {
			v, m := protowire.ConsumeBytes(body)
			if m < 0 {
				break
			}
			f[num] = string(v)
			body = body[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, body)
		if m < 0 {
			break
		}
		body = body[m:]
	}
	return f[1], f[2]
}
