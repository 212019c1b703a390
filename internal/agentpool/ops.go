package agentpool

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errhttp"

	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/gen/process/processconnect"
	"github.com/corral-sandbox/corral/internal/agentclient"
)

// maxReadFile bounds ReadFile.
const maxReadFile = 16 << 20

// Init sets the default environment, user and working directory of the
// commands of the agent at addr (POST /init), within Config.Timeout.
func (p *Pool) Init(ctx context.Context, addr string, env []string, user, workdir string) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	body, err := json.Marshal(map[string]any{"env": env, "user": user, "workdir": workdir})
	if err != nil {
		return err
	}
	resp, err := p.do(ctx, addr, http.MethodPost, "/init", "application/json", body)
	if err != nil {
		return fmt.Errorf("agent init: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("agent init: %w", statusError(resp))
	}
	return nil
}

// ReadFile returns the regular file at path in the box of the agent at
// addr, read as root, within Config.Timeout: errdefs.ErrNotFound when
// there is none, errdefs.ErrOutOfRange when it is larger than 16 MiB.
func (p *Pool) ReadFile(ctx context.Context, addr, path string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.do(ctx, addr, http.MethodGet, filesPath(path), "", nil)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read %s: %w", path, statusError(resp))
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReadFile+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > maxReadFile {
		return nil, fmt.Errorf("read %s: larger than %d bytes: %w", path, maxReadFile, errdefs.ErrOutOfRange)
	}
	return b, nil
}

// WriteFile writes data to the file at path in the box of the agent at
// addr, as root (the agent makes the missing directories), within
// Config.Timeout.
func (p *Pool) WriteFile(ctx context.Context, addr, path string, data []byte) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	resp, err := p.do(ctx, addr, http.MethodPost, filesPath(path), "application/octet-stream", data)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("write %s: %w", path, statusError(resp))
	}
	return nil
}

// Warm runs "true" through the agent at addr over HTTP/1.1 (the transport
// the SDK's and the CLI's requests take) and leaves the connection open,
// so that the first request after a warm pool hands the box out neither
// dials nor waits for the agent to page in its exec path. The request is
// marked agentclient.WarmUpHeader, so the agent's idle clock does not
// start.
func (p *Pool) Warm(ctx context.Context, addr string) error {
	pc := processconnect.NewProcessClient(&http.Client{Transport: p.Transport(addr)}, baseURL)
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "true"}})
	req.Header().Set(agentclient.WarmUpHeader, "1")
	stream, err := pc.Start(ctx, req)
	if err != nil {
		return err
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil && end.GetExitCode() != 0 {
			return fmt.Errorf("true exited %d", end.GetExitCode())
		}
	}
	return stream.Err()
}

// Running returns how many commands the agent at addr runs (its process
// list), within Config.Timeout.
func (p *Pool) Running(ctx context.Context, addr string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	pc := processconnect.NewProcessClient(&http.Client{Transport: p.Transport(addr)}, baseURL)
	resp, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		return 0, fmt.Errorf("list the agent's processes: %w", err)
	}
	return len(resp.Msg.GetProcesses()), nil
}

// Processes returns the commands the agent at addr runs and, with ended,
// those that ended recently (with how they ended).
func (p *Pool) Processes(ctx context.Context, addr string, ended bool) ([]*processpb.ProcessInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	pc := processconnect.NewProcessClient(&http.Client{Transport: p.Transport(addr)}, baseURL)
	resp, err := pc.List(ctx, connect.NewRequest(&processpb.ListRequest{IncludeEnded: &ended}))
	if err != nil {
		return nil, fmt.Errorf("list the agent's processes: %w", err)
	}
	return resp.Msg.GetProcesses(), nil
}

// do sends one HTTP/1.1 request to the agent at addr through the pool.
func (p *Pool) do(ctx context.Context, addr, method, path, ctype string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, baseURL+path, r)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return p.Transport(addr).RoundTrip(req)
}

// filesPath is the agent's /files URL path and query for path, as root.
func filesPath(path string) string {
	return "/files?username=root&path=" + url.QueryEscape(path)
}

// statusError describes an agent's answer that is not a success, with the
// error class of its status.
func statusError(resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return fmt.Errorf("%s: %s: %w", resp.Status, strings.TrimSpace(string(msg)), errhttp.ToNative(resp.StatusCode))
}

// Start starts cmd (through /bin/sh -c) as a command of the agent at addr
// named tag, with the agent's default user and working directory, and
// returns its PID once it started. The command keeps running after: it is
// the managed process `corral exec -d --tag TAG` makes.
func (p *Pool) Start(ctx context.Context, addr, tag, cmd string) (uint32, error) {
	pc := processconnect.NewProcessClient(&http.Client{Transport: p.Transport(addr)}, baseURL)
	stdin := false
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}, Stdin: &stdin}
	if tag != "" {
		req.Tag = &tag
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := pc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", tag, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if st := stream.Msg().GetEvent().GetStart(); st != nil {
			return st.GetPid(), nil
		}
	}
	err = stream.Err()
	if err == nil {
		err = fmt.Errorf("the stream ended before the start event: %w", errdefs.ErrUnavailable)
	}
	return 0, fmt.Errorf("start %s: %w", tag, err)
}

// Run runs cmd (through /bin/sh -c) in the box of the agent at addr, with
// the agent's default user and working directory, until it ends or ctx
// does, and returns its exit code; its output is dropped.
func (p *Pool) Run(ctx context.Context, addr, cmd string) (int, error) {
	pc := processconnect.NewProcessClient(&http.Client{Transport: p.Transport(addr)}, baseURL)
	stdin := false
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", cmd}}, Stdin: &stdin}
	if d, ok := ctx.Deadline(); ok {
		ms := uint64(max(time.Until(d).Milliseconds(), 1))
		req.Process.TimeoutMs = &ms
	}
	stream, err := pc.Start(ctx, connect.NewRequest(req))
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	for stream.Receive() {
		if end := stream.Msg().GetEvent().GetEnd(); end != nil {
			return int(end.GetExitCode()), nil
		}
	}
	err = stream.Err()
	if err == nil {
		err = fmt.Errorf("the stream ended before the end event: %w", errdefs.ErrUnavailable)
	}
	return 0, err
}

// Output replays the output the agent at addr keeps of command pid from
// byte offset from on (ConnectRequest.from_offset), calling fn with each
// chunk (stderr or stdout, a terminal's output counting as stdout) and its
// offset (past the bytes of a gap the agent did not keep), and returns the offset of the first byte replayed (larger than from when
// the agent dropped those bytes), within Config.Timeout.
func (p *Pool) Output(ctx context.Context, addr string, pid uint32, from uint64, fn func(off uint64, stderr bool, data []byte) error) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	pc := processconnect.NewProcessClient(&http.Client{Transport: p.Transport(addr)}, baseURL)
	stream, err := pc.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{
		Process:    &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: pid}},
		Replay:     ptr(true),
		Follow:     ptr(false),
		FromOffset: &from,
	}))
	if err != nil {
		return 0, fmt.Errorf("replay the output of pid %d: %w", pid, err)
	}
	defer stream.Close()
	first, off := from, from
	for i := 0; stream.Receive(); i++ {
		if i == 0 {
			// The header is known once the first message arrived.
			h := stream.ResponseHeader().Get(agentclient.OutputOffsetHeader)
			n, err := strconv.ParseUint(h, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("replay the output of pid %d: agent's %s %q: %w", pid, agentclient.OutputOffsetHeader, h, errdefs.ErrUnavailable)
			}
			first, off = n, n
		}
		ev := stream.Msg().GetEvent()
		if g := ev.GetGap(); g != nil {
			off += g.GetDroppedBytes() // the agent kept the start and the end
			continue
		}
		d := ev.GetData()
		if d == nil {
			continue
		}
		var err error
		var b []byte
		switch o := d.GetOutput().(type) {
		case *processpb.ProcessEvent_DataEvent_Stdout:
			b, err = o.Stdout, fn(off, false, o.Stdout)
		case *processpb.ProcessEvent_DataEvent_Pty:
			b, err = o.Pty, fn(off, false, o.Pty)
		case *processpb.ProcessEvent_DataEvent_Stderr:
			b, err = o.Stderr, fn(off, true, o.Stderr)
		}
		if err != nil {
			return 0, err
		}
		off += uint64(len(b))
	}
	if err := stream.Err(); err != nil {
		return 0, fmt.Errorf("replay the output of pid %d: %w", pid, err)
	}
	return first, nil
}

func ptr[T any](v T) *T { return &v }
