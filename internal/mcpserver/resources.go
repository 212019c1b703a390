package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/client"
)

// Resource URIs.
const (
	SandboxesURI         = "corral://sandboxes"
	sandboxPrefix        = SandboxesURI + "/"
	SandboxTemplate      = "corral://sandboxes/{id}"
	NetworkLogTemplate   = "corral://sandboxes/{id}/network-log"
	networkLogSuffix     = "/network-log"
	ProcessLogTemplate   = "corral://sandboxes/{id}/processes/{pid}/log"
	resourceLogEvents    = 1000
	mimeJSON, mimeNDJSON = "application/json", "application/x-ndjson"
)

func (s *server) addResources(srv *mcp.Server) {
	srv.AddResource(&mcp.Resource{
		URI:         SandboxesURI,
		Name:        "sandboxes",
		Title:       "Sandboxes",
		Description: "Every sandbox of the daemon (JSON, as list_sandboxes returns it).",
		MIMEType:    mimeJSON,
	}, s.readSandboxes)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: SandboxTemplate,
		Name:        "sandbox",
		Title:       "A sandbox",
		Description: "One sandbox with its resource use (JSON, as inspect_sandbox returns it); {id} is its id or name.",
		MIMEType:    mimeJSON,
	}, s.readSandbox)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: NetworkLogTemplate,
		Name:        "network-log",
		Title:       "A sandbox's egress log",
		Description: fmt.Sprintf("The last %d events of a sandbox's egress log, one JSON object per line, oldest first.", resourceLogEvents),
		MIMEType:    mimeNDJSON,
	}, s.readNetworkLog)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: ProcessLogTemplate,
		Name:        "process-log",
		Title:       "A background process's output",
		Description: fmt.Sprintf("The output a sandbox kept of a background process (from start_process), {pid} its pid: JSON as process_logs returns it (stdout, stderr, running, exit_code), each stream up to %d KiB. Subscribe to it (resources/subscribe) to be told (notifications/resources/updated) when the process writes more or ends.", DefaultOutputKiB),
		MIMEType:    mimeJSON,
	}, s.readProcessLog)
}

// processLogURI parses corral://sandboxes/{id}/processes/{pid}/log.
func processLogURI(uri string) (string, uint32, error) {
	rest, ok := strings.CutPrefix(uri, sandboxPrefix)
	if ok {
		rest, ok = strings.CutSuffix(rest, "/log")
	}
	if ok {
		id, pid, found := strings.Cut(rest, "/processes/")
		n, err := strconv.ParseUint(pid, 10, 32)
		if uid, uerr := url.PathUnescape(id); found && err == nil && n > 0 && uerr == nil && uid != "" && !strings.Contains(uid, "/") {
			return uid, uint32(n), nil
		}
	}
	return "", 0, fmt.Errorf("resource %q: want %s with a sandbox id or name and a pid: %w", uri, ProcessLogTemplate, errdefs.ErrInvalidArgument)
}

func (s *server) readProcessLog(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	id, pid, err := processLogURI(req.Params.URI)
	if err != nil {
		return nil, err
	}
	out, err := s.readLogs(ctx, id, client.ProcessSelector{PID: pid}, logsInput{})
	if errdefs.IsNotFound(err) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, err
	}
	return jsonResource(req.Params.URI, out)
}

// logWatch follows one process's output for the clients subscribed to
// its log resource.
type logWatch struct {
	refs   int
	cancel context.CancelFunc
}

// subscribe starts telling the subscribers of a process's log resource
// when it changes: a follow of the process's live output, which sends
// notifications/resources/updated after new output (coalesced while one
// is being sent) and at the process's end, when the follow stops. Only
// process logs can be subscribed to.
func (s *server) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	uri := req.Params.URI
	id, pid, err := processLogURI(uri)
	if err != nil {
		return fmt.Errorf("%w (only process logs, %s, can be subscribed to)", err, ProcessLogTemplate)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[uri]; w != nil {
		w.refs++
		return nil
	}
	// The follow outlives the subscribe request: it ends at the last
	// unsubscribe or with the process.
	ctx, cancel := context.WithCancel(context.Background())
	w := &logWatch{refs: 1, cancel: cancel}
	s.watches[uri] = w
	changed := make(chan struct{}, 1)
	poke := writerFunc(func(b []byte) (int, error) {
		select {
		case changed <- struct{}{}:
		default:
		}
		return len(b), nil
	})
	notify := func() {
		_ = s.srv.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: uri})
	}
	go func() {
		for {
			select {
			case <-changed:
				notify()
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		_, err := s.c.Sandbox(id).Attach(ctx, client.ProcessSelector{PID: pid}, client.AttachOptions{Stdout: poke, Stderr: poke})
		if ctx.Err() == nil {
			if err == nil {
				notify() // the process ended
			}
			s.mu.Lock()
			if s.watches[uri] == w {
				delete(s.watches, uri)
			}
			s.mu.Unlock()
			cancel()
		}
	}()
	return nil
}

func (s *server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.watches[req.Params.URI]; w != nil {
		if w.refs--; w.refs == 0 {
			w.cancel()
			delete(s.watches, req.Params.URI)
		}
	}
	return nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func (s *server) readSandboxes(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	l, err := s.c.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	if l == nil {
		l = []client.SandboxInfo{}
	}
	return jsonResource(req.Params.URI, sandboxList{Sandboxes: l})
}

func (s *server) readSandbox(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	id, err := resourceID(req.Params.URI, "")
	if err != nil {
		return nil, err
	}
	sb, err := s.c.GetSandbox(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, err
	}
	return jsonResource(req.Params.URI, sb)
}

func (s *server) readNetworkLog(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	id, err := resourceID(req.Params.URI, networkLogSuffix)
	if err != nil {
		return nil, err
	}
	evs, _, err := s.lastEvents(ctx, id, resourceLogEvents, func(client.NetworkEvent) bool { return true })
	if errdefs.IsNotFound(err) {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, ev := range evs {
		if err := enc.Encode(ev); err != nil {
			return nil, err
		}
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: mimeNDJSON, Text: b.String()}}}, nil
}

// resourceID returns the sandbox ID or name in uri, which is
// corral://sandboxes/{id} followed by suffix.
func resourceID(uri, suffix string) (string, error) {
	rest, ok := strings.CutPrefix(uri, sandboxPrefix)
	if ok {
		rest, ok = strings.CutSuffix(rest, suffix)
	}
	if ok {
		if id, err := url.PathUnescape(rest); err == nil && id != "" && !strings.Contains(id, "/") {
			return id, nil
		}
	}
	return "", fmt.Errorf("resource %q: want %s%s with a sandbox id or name: %w", uri, SandboxTemplate, suffix, errdefs.ErrInvalidArgument)
}

func jsonResource(uri string, v any) (*mcp.ReadResourceResult, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mimeJSON, Text: string(b)}}}, nil
}
