// Package clienttest is an in-memory fake of the Corral daemon and of a
// sandbox's agent, for tests of code built on package client and of the CLI.
// It is not a simulator: its commands are canned.
//
// Commands understood by the fake agent's Start:
//
//	echo ARGS...   prints ARGS joined by spaces and a newline, exits 0
//	cat            copies stdin (SendInput) to stdout until CloseStdin or
//	               a chunk that ends with ^D (a terminal's EOF)
//	fail           prints "boom" on stderr, exits 3
//	oom            is "killed by the OOM killer" (memory limit 64 MiB)
//	timeout        is "killed by its timeout"
//	big N          writes N bytes of 'x' to stdout in 64 KiB chunks
//	pty            writes "tty" to the terminal, exits 0
//	anything else  fails to start with not_found
package clienttest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/corral-sandbox/corral/api/gen/filesystem"
	"github.com/corral-sandbox/corral/api/gen/filesystem/filesystemconnect"
	pb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/gen/process/processconnect"
	"github.com/corral-sandbox/corral/api/rest"
)

// Daemon is a fake daemon. Its fields may be read under Mu while requests
// run.
type Daemon struct {
	Mu sync.Mutex
	// Sandboxes by ID; guarded by Mu.
	Sandboxes map[string]*rest.Sandbox
	// Images by name; guarded by Mu.
	Images map[string]*rest.Image
	// ImportedBytes is the size of the last image import body; guarded by Mu.
	ImportedBytes int64
	// Files holds uploaded bodies by "ID:path" (raw POST /files and
	// format=tar uploads alike); guarded by Mu.
	Files map[string][]byte
	// Signals records "pid:signal" of SendSignal calls; guarded by Mu.
	Signals []string
	// Resizes records "COLSxROWS" of Update calls; guarded by Mu.
	Resizes []string
	// Requests records "METHOD path" of control-plane calls; guarded by Mu.
	Requests []string
	// Token, when set, is required as "Bearer Token".
	Token string
	// Dirs lists paths that Stat reports as directories; other paths in
	// Files are files; guarded by Mu.
	Dirs map[string]bool

	nextID  int                    // guarded by Mu
	inputs  map[uint32]chan []byte // guarded by Mu; nil chunk = EOF
	nextPID uint32                 // guarded by Mu
}

// New returns an empty fake daemon with one image, "busybox".
func New() *Daemon {
	return &Daemon{
		Sandboxes: map[string]*rest.Sandbox{},
		Images:    map[string]*rest.Image{"busybox": {Name: "busybox", Builtin: true, Default: true, Layers: 1}},
		Files:     map[string][]byte{},
		Dirs:      map[string]bool{"/": true, "/tmp": true},
		inputs:    map[uint32]chan []byte{},
		nextPID:   100,
	}
}

// Handler returns the daemon's HTTP handler.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /v1/version", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, rest.Version{Version: "fake", GoVersion: "go", Runtimes: []string{"crun"}, Cgroup: "v2"})
	})
	mux.HandleFunc("POST /v1/sandboxes", d.create)
	mux.HandleFunc("GET /v1/sandboxes", func(w http.ResponseWriter, _ *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		l := rest.SandboxList{Sandboxes: []rest.Sandbox{}}
		for _, sb := range d.Sandboxes {
			c := *sb
			c.Usage = nil
			l.Sandboxes = append(l.Sandboxes, c)
		}
		slices.SortFunc(l.Sandboxes, func(a, b rest.Sandbox) int { return strings.Compare(a.ID, b.ID) })
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("GET /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		sb := d.lookup(r.PathValue("id"))
		if sb == nil {
			writeError(w, http.StatusNotFound, "not_found", "sandbox "+r.PathValue("id")+" not found")
			return
		}
		writeJSON(w, http.StatusOK, sb)
	})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		sb := d.lookup(r.PathValue("id"))
		if sb == nil {
			writeError(w, http.StatusNotFound, "not_found", "sandbox "+r.PathValue("id")+" not found")
			return
		}
		d.Mu.Lock()
		delete(d.Sandboxes, sb.ID)
		d.Mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /v1/images", func(w http.ResponseWriter, _ *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		l := rest.ImageList{Images: []rest.Image{}}
		for _, img := range d.Images {
			l.Images = append(l.Images, *img)
		}
		slices.SortFunc(l.Images, func(a, b rest.Image) int { return strings.Compare(a.Name, b.Name) })
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("POST /v1/images/{name}", func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_argument", err.Error())
			return
		}
		img := &rest.Image{Name: r.PathValue("name"), Size: n, Layers: 1, Created: time.Unix(0, 0).UTC()}
		d.Mu.Lock()
		d.Images[img.Name] = img
		d.ImportedBytes = n
		d.Mu.Unlock()
		writeJSON(w, http.StatusCreated, img)
	})
	mux.HandleFunc("DELETE /v1/images/{name}", func(w http.ResponseWriter, r *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		if _, ok := d.Images[r.PathValue("name")]; !ok {
			writeError(w, http.StatusNotFound, "not_found", "image "+r.PathValue("name")+" not found")
			return
		}
		delete(d.Images, r.PathValue("name"))
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("/v1/sandboxes/{id}/agent/", func(w http.ResponseWriter, r *http.Request) {
		sb := d.lookup(r.PathValue("id"))
		if sb == nil {
			writeError(w, http.StatusNotFound, "not_found", "sandbox "+r.PathValue("id")+" not found")
			return
		}
		http.StripPrefix("/v1/sandboxes/"+r.PathValue("id")+"/agent", d.agent(sb.ID)).ServeHTTP(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d.Token != "" && r.Header.Get("Authorization") != "Bearer "+d.Token {
			writeError(w, http.StatusUnauthorized, "unauthorized", "bad token")
			return
		}
		if !strings.Contains(r.URL.Path, "/agent/") {
			d.Mu.Lock()
			d.Requests = append(d.Requests, r.Method+" "+r.URL.Path)
			d.Mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	})
}

// Server starts an httptest server for the daemon; the caller closes it.
func (d *Daemon) Server() *httptest.Server { return httptest.NewServer(d.Handler()) }

func (d *Daemon) lookup(id string) *rest.Sandbox {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if sb, ok := d.Sandboxes[id]; ok {
		return sb
	}
	for _, sb := range d.Sandboxes {
		if sb.Name != "" && sb.Name == id {
			return sb
		}
	}
	return nil
}

func (d *Daemon) create(w http.ResponseWriter, r *http.Request) {
	var req rest.CreateSandboxRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "decode body: "+err.Error())
		return
	}
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if req.Image == "" {
		req.Image = "busybox"
	}
	if _, ok := d.Images[req.Image]; !ok {
		writeError(w, http.StatusNotFound, "not_found", "image "+req.Image+" not found")
		return
	}
	for _, sb := range d.Sandboxes {
		if req.Name != "" && sb.Name == req.Name {
			writeError(w, http.StatusConflict, "already_exists", "name "+req.Name+" is in use")
			return
		}
	}
	d.nextID++
	id := fmt.Sprintf("sb%04d", d.nextID)
	sb := &rest.Sandbox{
		ID: id, Name: req.Name, Image: req.Image, Runtime: "crun", State: "running",
		Resources: req.Resources, Env: req.Env, Workdir: req.Workdir, User: req.User, Labels: req.Labels,
		Created: time.Unix(0, 0).UTC(), Usage: &rest.Usage{Pids: 1}, AgentPath: "/v1/sandboxes/" + id + "/agent",
	}
	if req.Runtime != "" {
		sb.Runtime = req.Runtime
	}
	d.Sandboxes[id] = sb
	writeJSON(w, http.StatusCreated, sb)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, rest.Error{Error: rest.ErrorBody{Code: code, Message: msg}})
}

// agent returns the fake agent of one sandbox.
func (d *Daemon) agent(id string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(processconnect.NewProcessHandler(&procSvc{d: d}))
	mux.Handle(filesystemconnect.NewFilesystemHandler(&fsSvc{d: d, id: id}))
	mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		d.Mu.Lock()
		b, ok := d.Files[id+":"+r.URL.Query().Get("path")]
		d.Mu.Unlock()
		if !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code":404,"message":"path not found"}`)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("POST /files", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		d.Mu.Lock()
		d.Files[id+":"+r.URL.Query().Get("path")] = b
		d.Mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

type procSvc struct {
	processconnect.UnimplementedProcessHandler
	d *Daemon
}

func (p *procSvc) Start(ctx context.Context, req *connect.Request[pb.StartRequest], st *connect.ServerStream[pb.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	d := p.d
	d.Mu.Lock()
	d.nextPID++
	pid := d.nextPID
	in := make(chan []byte, 16)
	d.inputs[pid] = in
	d.Mu.Unlock()
	defer func() {
		d.Mu.Lock()
		delete(d.inputs, pid)
		d.Mu.Unlock()
	}()
	send := func(ev *pb.ProcessEvent) error { return st.Send(&pb.StartResponse{Event: ev}) }
	out := func(b []byte) error {
		return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stdout{Stdout: b}}}})
	}
	end := func(e *pb.ProcessEvent_EndEvent) error {
		return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: e}})
	}
	exit := func(code int32) error {
		return end(&pb.ProcessEvent_EndEvent{ExitCode: code, Exited: true, Status: "exit status " + strconv.Itoa(int(code))})
	}
	switch cfg.GetCmd() {
	case "echo", "cat", "fail", "oom", "timeout", "big", "pty":
	default:
		return connect.NewError(connect.CodeNotFound, fmt.Errorf("exec: %q: executable file not found in $PATH", cfg.GetCmd()))
	}
	if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}); err != nil {
		return err
	}
	switch cfg.GetCmd() {
	case "echo":
		if err := out([]byte(strings.Join(cfg.GetArgs(), " ") + "\n")); err != nil {
			return err
		}
		return exit(0)
	case "cat":
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case b := <-in:
				if b == nil {
					return exit(0)
				}
				if err := out(b); err != nil {
					return err
				}
				if bytes.HasSuffix(b, []byte{4}) {
					return exit(0)
				}
			}
		}
	case "fail":
		if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Stderr{Stderr: []byte("boom\n")}}}}); err != nil {
			return err
		}
		return exit(3)
	case "oom":
		msg := "killed: out of memory (memory limit 64 MiB)"
		return end(&pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: &msg, OomKilled: true})
	case "timeout":
		msg := "killed: timeout expired"
		return end(&pb.ProcessEvent_EndEvent{ExitCode: -1, Status: "signal: killed", Error: &msg, TimedOut: true})
	case "big":
		var n int64
		if len(cfg.GetArgs()) > 0 {
			n, _ = strconv.ParseInt(cfg.GetArgs()[0], 10, 64)
		}
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for n > 0 {
			c := chunk[:min(n, int64(len(chunk)))]
			if err := out(c); err != nil {
				return err
			}
			n -= int64(len(c))
		}
		return exit(0)
	case "pty":
		if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: &pb.ProcessEvent_DataEvent{Output: &pb.ProcessEvent_DataEvent_Pty{Pty: []byte("tty")}}}}); err != nil {
			return err
		}
		return exit(0)
	}
	return nil
}

func (p *procSvc) input(sel *pb.ProcessSelector) (chan []byte, error) {
	p.d.Mu.Lock()
	defer p.d.Mu.Unlock()
	ch, ok := p.d.inputs[sel.GetPid()]
	if !ok {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", sel.GetPid()))
	}
	return ch, nil
}

func (p *procSvc) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	ch, err := p.input(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	b := req.Msg.GetInput().GetStdin()
	if b == nil {
		b = req.Msg.GetInput().GetPty()
	}
	select {
	case ch <- append([]byte{}, b...):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (p *procSvc) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	ch, err := p.input(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	select {
	case ch <- nil:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

func (p *procSvc) SendSignal(_ context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p.d.Mu.Lock()
	p.d.Signals = append(p.d.Signals, fmt.Sprintf("%d:%d", req.Msg.GetProcess().GetPid(), req.Msg.GetSignal()))
	p.d.Mu.Unlock()
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (p *procSvc) Update(_ context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	sz := req.Msg.GetPty().GetSize()
	p.d.Mu.Lock()
	p.d.Resizes = append(p.d.Resizes, fmt.Sprintf("%dx%d", sz.GetCols(), sz.GetRows()))
	p.d.Mu.Unlock()
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

func (p *procSvc) List(context.Context, *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	tag := "web"
	return connect.NewResponse(&pb.ListResponse{Processes: []*pb.ProcessInfo{
		{Pid: 7, Tag: &tag, Config: &pb.ProcessConfig{Cmd: "python3", Args: []string{"-m", "http.server"}}},
	}}), nil
}

type fsSvc struct {
	filesystemconnect.UnimplementedFilesystemHandler
	d  *Daemon
	id string
}

func (f *fsSvc) Stat(_ context.Context, req *connect.Request[fspb.StatRequest]) (*connect.Response[fspb.StatResponse], error) {
	p := req.Msg.GetPath()
	f.d.Mu.Lock()
	defer f.d.Mu.Unlock()
	e := &fspb.EntryInfo{Path: p, Name: p[strings.LastIndex(p, "/")+1:]}
	switch b, ok := f.d.Files[f.id+":"+p]; {
	case f.d.Dirs[p]:
		e.Type, e.Mode = fspb.FileType_FILE_TYPE_DIRECTORY, 0o755
	case ok:
		e.Type, e.Size, e.Mode = fspb.FileType_FILE_TYPE_FILE, int64(len(b)), 0o644
	default:
		return nil, connect.NewError(connect.CodeNotFound, errors.New("no such file or directory: "+p))
	}
	return connect.NewResponse(&fspb.StatResponse{Entry: e}), nil
}
