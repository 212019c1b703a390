//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpCall calls a tool that must succeed and decodes its structured
// result into out (when not nil); it returns the result's text.
func mcpCall(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("%s(%v) = tool error %q", name, args, text.String())
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
	return text.String()
}

// driveMCP creates a box through the MCP session, runs commands and moves
// files in it, and removes it, as a model would. With cancels, it also
// checks that cancelling an exec call kills its command.
func driveMCP(t *testing.T, d *daemon, cs *mcp.ClientSession, cancels bool) {
	t.Helper()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) < 10 {
		t.Fatalf("ListTools = %d tools, %v", len(tools.Tools), err)
	}
	var sb struct{ ID, State string }
	mcpCall(t, cs, "create_sandbox", map[string]any{"image": "busybox", "memory": "128m", "labels": map[string]any{"via": "mcp"}}, &sb)
	if sb.ID == "" || sb.State != "running" {
		t.Fatalf("create_sandbox = %+v; want a running sandbox", sb)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			_, _, _ = d.corral("rm", "-f", sb.ID)
		}
	})
	if out := d.must("inspect", "--format", "{{.Labels.via}} {{.Resources.MemoryBytes}}", sb.ID); out != "mcp 134217728\n" {
		t.Errorf("the box's labels and memory, by the CLI: %q; want mcp 134217728", out)
	}

	var res struct {
		ExitCode    int    `json:"exit_code"`
		Stdout      string `json:"stdout"`
		Stderr      string `json:"stderr"`
		StdoutBytes int64  `json:"stdout_bytes"`
		Note        string `json:"note"`
	}
	mcpCall(t, cs, "exec", map[string]any{"sandbox": sb.ID, "command": "echo out; echo err >&2; exit 3"}, &res)
	if res.ExitCode != 3 || res.Stdout != "out\n" || res.Stderr != "err\n" {
		t.Errorf("exec of a failing shell line = %+v; want exit 3, out, err", res)
	}
	res.Note = ""
	mcpCall(t, cs, "exec", map[string]any{"sandbox": sb.ID, "args": []any{"head", "-c", "200000", "/dev/zero"}, "max_output_kib": 4}, &res)
	if res.StdoutBytes != 200000 || len(res.Stdout) > 5<<10 || !strings.Contains(res.Note, "stdout was") {
		t.Errorf("exec of 200000 bytes with max_output_kib 4: %d bytes kept of %d, note %q; want about 4 KiB kept and a note", len(res.Stdout), res.StdoutBytes, res.Note)
	}
	mcpCall(t, cs, "exec", map[string]any{"sandbox": sb.ID, "args": []any{"cat"}, "stdin": "piped in"}, &res)
	if res.Stdout != "piped in" {
		t.Errorf("exec cat with stdin: stdout %q; want %q", res.Stdout, "piped in")
	}

	mcpCall(t, cs, "write_file", map[string]any{"sandbox": sb.ID, "path": "/work/dir/hello.txt", "content": "hello from mcp\n"}, nil)
	if out := d.must("exec", sb.ID, "--", "cat", "/work/dir/hello.txt"); out != "hello from mcp\n" {
		t.Errorf("the file written by write_file, read by corral exec: %q", out)
	}
	if txt := mcpCall(t, cs, "read_file", map[string]any{"sandbox": sb.ID, "path": "/work/dir/hello.txt"}, nil); txt != "hello from mcp\n" {
		t.Errorf("read_file = %q; want the file", txt)
	}
	var l struct {
		Entries []struct{ Path, Type string }
	}
	mcpCall(t, cs, "list_files", map[string]any{"sandbox": sb.ID, "path": "/work", "depth": 2}, &l)
	if got := fmt.Sprint(l.Entries); got != "[{/work/dir dir} {/work/dir/hello.txt file}]" {
		t.Errorf("list_files /work depth 2 = %s", got)
	}

	var st struct{ PID uint32 }
	mcpCall(t, cs, "start_process", map[string]any{"sandbox": sb.ID, "command": "sleep 600", "tag": "sleeper"}, &st)
	var ps struct {
		Processes []struct {
			PID uint32
			Tag string
		}
	}
	mcpCall(t, cs, "list_processes", map[string]any{"sandbox": sb.ID}, &ps)
	if len(ps.Processes) != 1 || ps.Processes[0].PID != st.PID || ps.Processes[0].Tag != "sleeper" {
		t.Errorf("list_processes = %+v; want the sleeper, pid %d", ps.Processes, st.PID)
	}
	mcpCall(t, cs, "kill_process", map[string]any{"sandbox": sb.ID, "tag": "sleeper"}, nil)

	// process_logs follows a process: it waits for output past the
	// offsets it returned before and returns what arrived.
	mcpCall(t, cs, "start_process", map[string]any{"sandbox": sb.ID, "command": "echo one; read x; echo $x", "tag": "echoer", "open_stdin": true}, nil)
	type follow struct {
		Stdout      string
		StdoutBytes int64 `json:"stdout_bytes"`
		Running     bool
	}
	var f1, f2 follow
	mcpCall(t, cs, "process_logs", map[string]any{"sandbox": sb.ID, "tag": "echoer", "follow_seconds": 300}, &f1)
	if f1.Stdout != "one\n" || f1.StdoutBytes != 4 {
		t.Errorf("process_logs following from the start = %+v; want one, offset 4", f1)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		mcpCall(t, cs, "process_logs", map[string]any{"sandbox": sb.ID, "tag": "echoer", "since_stdout_bytes": 4, "follow_seconds": 300}, &f2)
	}()
	mcpCall(t, cs, "send_input", map[string]any{"sandbox": sb.ID, "tag": "echoer", "input": "two\n"}, nil)
	<-done
	if f2.Stdout != "two\n" || f2.StdoutBytes != 8 {
		t.Errorf("process_logs following past offset 4 = %+v; want two, offset 8", f2)
	}

	if cancels {
		execCancelled(t, cs, sb.ID)
	}

	mcpCall(t, cs, "remove_sandbox", map[string]any{"sandbox": sb.ID}, nil)
	removed = true
	if out := d.must("ls", "-q"); out != "" {
		t.Errorf("corral ls after remove_sandbox = %q; want nothing", out)
	}
}

// running returns the pids of the processes of box id whose command line
// contains s.
func running(t *testing.T, cs *mcp.ClientSession, id, s string) []uint32 {
	t.Helper()
	var ps struct {
		Processes []struct {
			PID uint32
			Cmd []string
		}
	}
	mcpCall(t, cs, "list_processes", map[string]any{"sandbox": id}, &ps)
	var out []uint32
	for _, p := range ps.Processes {
		if strings.Contains(strings.Join(p.Cmd, " "), s) {
			out = append(out, p.PID)
		}
	}
	return out
}

// execCancelled checks that an exec whose call the client cancels does not
// leave its command running.
func execCancelled(t *testing.T, cs *mcp.ClientSession, id string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exec", Arguments: map[string]any{"sandbox": id, "command": "sleep 300", "timeout_seconds": 600}})
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(running(t, cs, id, "sleep 300")) == 0 {
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("the exec of sleep 300 did not show in list_processes within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Errorf("a cancelled exec call returned no error")
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		pids := running(t, cs, id, "sleep 300")
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the command of a cancelled exec still runs 30s later (pids %v); want it killed", pids)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPStdio drives corral mcp, started as a subprocess the way MCP
// clients start it, with the official Go SDK's client.
func TestMCPStdio(t *testing.T) {
	d := startDaemon(t)
	var stderr bytes.Buffer
	cmd := exec.Command(corralBin, "--host", "unix://"+d.socket, "mcp")
	cmd.Stderr = &stderr
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to corral mcp: %v (stderr %q)", err, stderr.String())
	}
	driveMCP(t, d, cs, true)
	// Closing stdin ends corral mcp cleanly.
	if err := cs.Close(); err != nil || cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 0 {
		t.Errorf("close the session: %v, corral mcp %v; want exit 0 (stderr %q)", err, cmd.ProcessState, stderr.String())
	}
	d.requireNoLeftovers()
}

// bearer adds a token to every request.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTP drives the daemon's /mcp endpoint over TCP with the official
// Go SDK's streamable HTTP client: refused without the token, the same
// tools with it.
func TestMCPHTTP(t *testing.T) {
	const token = "mcp-test-token"
	d := startDaemonWith(t, func(cfg *string, dir string) {
		tok := filepath.Join(dir, "token")
		if err := os.WriteFile(tok, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		*cfg += fmt.Sprintf("listen = %q\ntoken_file = %q\n", "127.0.0.1:0", tok)
	})
	endpoint := "http://" + d.tcpAddr() + "/mcp"
	client := mcp.NewClient(&mcp.Implementation{Name: "it"}, nil)

	if _, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, nil); err == nil {
		t.Fatal("connect to /mcp without the token succeeded; want it refused")
	}
	resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /mcp without the token = %d; want 401", resp.StatusCode)
	}

	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{token}},
	}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp with the token: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	// The stateless endpoint does not see a legacy client's cancellation
	// (docs/mcp.md): the command runs on to its timeout.
	driveMCP(t, d, cs, false)
	d.requireNoLeftovers()
}

// TestMCPStdioSubscribe subscribes, over corral mcp, to a background
// process's log resource: the process's new output and its end send
// notifications/resources/updated, and the resource then has the output.
func TestMCPStdioSubscribe(t *testing.T) {
	d := startDaemon(t)
	cmd := exec.Command(corralBin, "--host", "unix://"+d.socket, "mcp")
	updated := make(chan string, 16)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "it"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to corral mcp: %v", err)
	}
	defer cs.Close()
	var sb struct{ ID string }
	mcpCall(t, cs, "create_sandbox", map[string]any{"image": "busybox"}, &sb)
	defer mcpCall(t, cs, "remove_sandbox", map[string]any{"sandbox": sb.ID}, nil)
	var st struct{ PID uint32 }
	mcpCall(t, cs, "start_process", map[string]any{"sandbox": sb.ID, "command": "read x; echo got $x", "tag": "r", "open_stdin": true}, &st)
	uri := fmt.Sprintf("corral://sandboxes/%s/processes/%d/log", sb.ID, st.PID)
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	mcpCall(t, cs, "send_input", map[string]any{"sandbox": sb.ID, "tag": "r", "input": "it\n"}, nil)
	if got := <-updated; got != uri {
		t.Errorf("updated %q; want %q", got, uri)
	}
	mcpCall(t, cs, "wait_process", map[string]any{"sandbox": sb.ID, "tag": "r"}, nil)
	res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Contents[0].Text; !strings.Contains(txt, `"stdout": "got it\n"`) {
		t.Errorf("log resource = %s; want the process's output", txt)
	}
}
