package mcpserver_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/client/clienttest"
	"github.com/corral-sandbox/corral/internal/mcpserver"
)

// session connects an MCP client to a server driving a fake daemon, over
// the SDK's in-memory transport.
func session(t *testing.T) (*mcp.ClientSession, *clienttest.Daemon) {
	t.Helper()
	d := clienttest.New()
	ts := d.Server()
	t.Cleanup(ts.Close)
	c, err := client.New(client.WithHost(ts.URL), client.WithToken(""))
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(c, mcpserver.Options{}).Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs, d
}

// call calls a tool that must succeed and decodes its structured result
// into out (when not nil); it returns the result's text.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s(%v): %v", name, args, err)
	}
	if res.IsError {
		t.Fatalf("%s(%v) = tool error %q; want success", name, args, text(res))
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
	return text(res)
}

// callErr calls a tool that must fail and returns its error text (a tool
// error or a protocol error).
func callErr(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return err.Error()
	}
	if !res.IsError {
		t.Fatalf("%s(%v) = success %q; want an error", name, args, text(res))
	}
	return text(res)
}

func text(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func create(t *testing.T, cs *mcp.ClientSession, args map[string]any) rest.Sandbox {
	t.Helper()
	var sb rest.Sandbox
	call(t, cs, "create_sandbox", args, &sb)
	if sb.ID == "" {
		t.Fatalf("create_sandbox(%v) returned no id", args)
	}
	return sb
}

// TestToolsDescribed checks the tool list and that every tool and every
// input property carries a description a model can act on.
func TestToolsDescribed(t *testing.T) {
	cs, _ := session(t)
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 100 {
			t.Errorf("tool %s: description %q is too short to act on", tool.Name, tool.Description)
		}
		b, _ := json.Marshal(tool.InputSchema)
		var s struct {
			Type       string `json:"type"`
			Properties map[string]struct {
				Description string `json:"description"`
			} `json:"properties"`
		}
		if err := json.Unmarshal(b, &s); err != nil || s.Type != "object" {
			t.Errorf("tool %s: input schema %s; want a JSON Schema of type object", tool.Name, b)
		}
		for p, ps := range s.Properties {
			if ps.Description == "" {
				t.Errorf("tool %s: property %s has no description", tool.Name, p)
			}
		}
		if tool.OutputSchema == nil {
			t.Errorf("tool %s has no output schema", tool.Name)
		}
	}
	slices.Sort(names)
	want := []string{"create_sandbox", "diff", "exec", "fork_sandbox", "inspect_sandbox", "kill_process", "list_files", "list_processes",
		"list_sandboxes", "network_log", "process_logs", "read_file", "remove_sandbox", "send_input", "snapshot_sandbox", "start_process",
		"wait_process", "write_file"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

func TestSandboxLifecycle(t *testing.T) {
	cs, d := session(t)
	sb := create(t, cs, map[string]any{
		"image": "busybox", "name": "web", "memory": "512m", "cpus": 1.5, "disk": "1g", "pids": 100,
		"env": map[string]any{"A": "1"}, "labels": map[string]any{"team": "x"}, "timeout_seconds": 600,
		"network": map[string]any{"mode": "allowlist", "allow": []any{"example.org:443"}},
	})
	d.Mu.Lock()
	got := d.Creates[len(d.Creates)-1]
	d.Mu.Unlock()
	want := rest.CreateSandboxRequest{
		Image: "busybox", Name: "web", Env: map[string]string{"A": "1"}, Labels: map[string]string{"team": "x"}, TimeoutSeconds: 600,
		Resources: rest.Resources{MemoryBytes: 512 << 20, CPUs: 1.5, DiskBytes: 1 << 30, Pids: 100},
		Network:   &rest.Network{Mode: "allowlist", Allow: []string{"example.org:443"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("create request (-want +got):\n%s", diff)
	}

	var l struct{ Sandboxes []rest.Sandbox }
	call(t, cs, "list_sandboxes", nil, &l)
	if len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != sb.ID {
		t.Errorf("list_sandboxes = %+v; want the one created (%s)", l.Sandboxes, sb.ID)
	}
	var in rest.Sandbox
	call(t, cs, "inspect_sandbox", map[string]any{"sandbox": "web"}, &in)
	if in.ID != sb.ID || in.State != "running" {
		t.Errorf("inspect_sandbox(web) = %s %s; want %s running", in.ID, in.State, sb.ID)
	}

	var img rest.Image
	call(t, cs, "snapshot_sandbox", map[string]any{"sandbox": sb.ID, "name": "web-ready"}, &img)
	if img.Name != "web-ready" || img.Source != "snapshot" {
		t.Errorf("snapshot_sandbox = %+v; want image web-ready from a snapshot", img)
	}
	var forks struct{ Sandboxes []rest.Sandbox }
	call(t, cs, "fork_sandbox", map[string]any{"sandbox": sb.ID, "count": 2, "labels": map[string]any{"try": "a"}}, &forks)
	if len(forks.Sandboxes) != 2 || forks.Sandboxes[0].Origin != sb.ID || forks.Sandboxes[0].Labels["try"] != "a" {
		t.Errorf("fork_sandbox = %+v; want 2 copies of %s labelled try=a", forks.Sandboxes, sb.ID)
	}

	call(t, cs, "remove_sandbox", map[string]any{"sandbox": sb.ID}, nil)
	d.Mu.Lock()
	_, left := d.Sandboxes[sb.ID]
	d.Mu.Unlock()
	if left {
		t.Errorf("remove_sandbox(%s) left the sandbox", sb.ID)
	}
	if msg := callErr(t, cs, "inspect_sandbox", map[string]any{"sandbox": sb.ID}); !strings.Contains(msg, "not found") {
		t.Errorf("inspect_sandbox of a removed sandbox: %q; want not found", msg)
	}
}

func TestCreateBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"memory", map[string]any{"memory": "lots"}, `memory "lots": want a size such as 512m`},
		{"disk", map[string]any{"disk": "-1g"}, `disk "-1g"`},
		{"network mode", map[string]any{"network": map[string]any{"mode": "wide"}}, "mode"},
		{"unknown field", map[string]any{"tier": "microvm"}, "tier"},
		{"negative cpus", map[string]any{"cpus": -1}, "cpus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs, d := session(t)
			if msg := callErr(t, cs, "create_sandbox", tc.args); !strings.Contains(msg, tc.want) {
				t.Errorf("create_sandbox(%v) error = %q; want it to contain %q", tc.args, msg, tc.want)
			}
			d.Mu.Lock()
			defer d.Mu.Unlock()
			if len(d.Sandboxes) != 0 || len(d.Creates) != 0 {
				t.Errorf("create_sandbox(%v) reached the daemon (%d creates); want it refused before", tc.args, len(d.Creates))
			}
		})
	}
}

func TestExec(t *testing.T) {
	cs, _ := session(t)
	id := create(t, cs, nil).ID
	type result struct {
		ExitCode    int    `json:"exit_code"`
		Stdout      string `json:"stdout"`
		Stderr      string `json:"stderr"`
		StdoutBytes int64  `json:"stdout_bytes"`
		TimedOut    bool   `json:"timed_out"`
		OOMKilled   bool   `json:"oom_killed"`
		Note        string `json:"note"`
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want result
		text string // in the result's text
	}{
		{"echo", map[string]any{"args": []any{"echo", "hi", "there"}},
			result{Stdout: "hi there\n", StdoutBytes: 9}, "exit_code: 0\nstdout:\nhi there\nstderr: (empty)\n"},
		{"non-zero exit is a result", map[string]any{"args": []any{"fail"}},
			result{ExitCode: 3, Stderr: "boom\n"}, "exit_code: 3\nstdout: (empty)\nstderr:\nboom\n"},
		{"stdin", map[string]any{"args": []any{"cat"}, "stdin": "from stdin"},
			result{Stdout: "from stdin", StdoutBytes: 10}, "stdout:\nfrom stdin\n"},
		{"timeout", map[string]any{"args": []any{"timeout"}, "timeout_seconds": 5},
			result{ExitCode: 137, TimedOut: true, Note: "killed by its timeout after 5s"}, "(timed out)"},
		{"oom", map[string]any{"args": []any{"oom"}},
			result{ExitCode: 137, OOMKilled: true}, "killed by the OOM killer"},
		{"output cut", map[string]any{"args": []any{"big", "300000"}, "max_output_kib": 1},
			result{Stdout: strings.Repeat("x", 512) + "\n[... 292 KiB cut ...]\n" + strings.Repeat("x", 512), StdoutBytes: 300000,
				Note: "stdout was 293 KiB, more than max_output_kib (1 KiB): its middle was cut"}, "note: stdout was 293 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.args["sandbox"] = id
			var got result
			txt := call(t, cs, "exec", tc.args, &got)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("exec(%v) (-want +got):\n%s", tc.args, diff)
			}
			if !strings.Contains(txt, tc.text) {
				t.Errorf("exec(%v) text = %q; want it to contain %q", tc.args, txt, tc.text)
			}
		})
	}
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"not found", map[string]any{"args": []any{"nosuchcmd"}}, `start nosuchcmd: exec: "nosuchcmd": executable file not found`},
		{"no command", map[string]any{}, "command or args is required"},
		{"both", map[string]any{"command": "ls", "args": []any{"ls"}}, "not both"},
		{"timeout too long", map[string]any{"args": []any{"echo"}, "timeout_seconds": 7200}, "timeout_seconds"},
		{"output too big", map[string]any{"args": []any{"echo"}, "max_output_kib": 4096}, "max_output_kib"},
		{"unknown sandbox", map[string]any{"sandbox": "nope", "args": []any{"echo"}}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := tc.args["sandbox"]; !ok {
				tc.args["sandbox"] = id
			}
			if msg := callErr(t, cs, "exec", tc.args); !strings.Contains(msg, tc.want) {
				t.Errorf("exec(%v) error = %q; want it to contain %q", tc.args, msg, tc.want)
			}
		})
	}
}

// TestExecShell checks that command runs through sh -c (the fake agent
// knows no sh, so its refusal names the program it was asked for).
func TestExecShell(t *testing.T) {
	cs, _ := session(t)
	id := create(t, cs, nil).ID
	if msg := callErr(t, cs, "exec", map[string]any{"sandbox": id, "command": "echo hi | wc -c"}); !strings.Contains(msg, `start sh: exec: "sh"`) {
		t.Errorf("exec with a command line: error = %q; want sh started", msg)
	}
}

func TestProcesses(t *testing.T) {
	cs, d := session(t)
	id := create(t, cs, nil).ID
	var st struct {
		PID uint32
		Tag string
	}
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"job", "x"}, "tag": "srv"}, &st)
	if st.PID == 0 || st.Tag != "srv" {
		t.Fatalf("start_process = %+v; want a pid and tag srv", st)
	}
	var l struct{ Processes []client.Process }
	call(t, cs, "list_processes", map[string]any{"sandbox": id}, &l)
	if len(l.Processes) != 1 || l.Processes[0].PID != 7 || l.Processes[0].Tag != "web" {
		t.Errorf("list_processes = %+v; want the fake's pid 7 tagged web", l.Processes)
	}
	var k struct{ Signal string }
	call(t, cs, "kill_process", map[string]any{"sandbox": id, "pid": st.PID, "signal": "TERM"}, &k)
	call(t, cs, "kill_process", map[string]any{"sandbox": id, "pid": 42}, &k)
	if k.Signal != "KILL" {
		t.Errorf("kill_process without a signal sent %q; want KILL", k.Signal)
	}
	d.Mu.Lock()
	sigs := slices.Clone(d.Signals)
	d.Mu.Unlock()
	if want := []string{fmt.Sprintf("%d:15", st.PID), "42:9"}; !slices.Equal(sigs, want) {
		t.Errorf("signals sent = %v; want %v", sigs, want)
	}
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"sandbox": id}, "give pid or tag"},
		{map[string]any{"sandbox": id, "pid": 1, "tag": "a"}, "give pid or tag"},
		{map[string]any{"sandbox": id, "tag": "gone"}, `process with tag "gone" not found`},
		{map[string]any{"sandbox": id, "pid": 1, "signal": "STOP"}, "signal"},
	} {
		if msg := callErr(t, cs, "kill_process", tc.args); !strings.Contains(msg, tc.want) {
			t.Errorf("kill_process(%v) error = %q; want it to contain %q", tc.args, msg, tc.want)
		}
	}
}

func TestFiles(t *testing.T) {
	cs, d := session(t)
	id := create(t, cs, nil).ID
	type readResult struct {
		Size     int64
		Offset   int64
		Bytes    int64
		Encoding string
		Content  string
		Note     string
	}
	var w struct{ Bytes int }
	call(t, cs, "write_file", map[string]any{"sandbox": id, "path": "/tmp/a.txt", "content": "héllo\n"}, &w)
	if w.Bytes != 7 {
		t.Errorf("write_file wrote %d bytes; want 7", w.Bytes)
	}
	var r readResult
	if txt := call(t, cs, "read_file", map[string]any{"sandbox": id, "path": "/tmp/a.txt"}, &r); txt != "héllo\n" {
		t.Errorf("read_file text = %q; want the file as it is", txt)
	}
	if want := (readResult{Size: 7, Bytes: 7, Encoding: "text", Content: "héllo\n"}); r != want {
		t.Errorf("read_file = %+v; want %+v", r, want)
	}

	bin := []byte{0, 0xff, 0xfe, 'a'}
	call(t, cs, "write_file", map[string]any{"sandbox": id, "path": "/tmp/b.bin", "content": base64.StdEncoding.EncodeToString(bin), "encoding": "base64"}, nil)
	d.Mu.Lock()
	stored := d.Files[id+":/tmp/b.bin"]
	d.Mu.Unlock()
	if !bytes.Equal(stored, bin) {
		t.Errorf("write_file base64 stored %v; want %v", stored, bin)
	}
	call(t, cs, "read_file", map[string]any{"sandbox": id, "path": "/tmp/b.bin"}, &r)
	if r.Encoding != "base64" || r.Content != base64.StdEncoding.EncodeToString(bin) {
		t.Errorf("read_file of a binary file = %+v; want it in base64", r)
	}

	// A big file is read in pages, never splitting a character.
	big := strings.Repeat("a", 1023) + "é" + strings.Repeat("b", 1000)
	d.Mu.Lock()
	d.Files[id+":/tmp/big"] = []byte(big)
	d.Mu.Unlock()
	call(t, cs, "read_file", map[string]any{"sandbox": id, "path": "/tmp/big", "max_kib": 1}, &r)
	if r.Bytes != 1023 || r.Content != big[:1023] || r.Note != "the file goes on after these 1023 bytes: read on with offset 1023" {
		t.Errorf("read_file page 1 = %d bytes, note %q; want 1023 bytes (not half of é) and the next offset", r.Bytes, r.Note)
	}
	r = readResult{}
	call(t, cs, "read_file", map[string]any{"sandbox": id, "path": "/tmp/big", "offset": 1023}, &r)
	if r.Content != big[1023:] || r.Note != "" || r.Size != int64(len(big)) {
		t.Errorf("read_file page 2 = %+v; want the rest of the file", r)
	}

	d.Mu.Lock()
	d.Dirs["/tmp/sub"] = true
	d.Files[id+":/tmp/sub/c"] = []byte("c")
	d.Mu.Unlock()
	var l struct {
		Entries []struct {
			Path, Type, Mode string
			Size             int64
		}
	}
	call(t, cs, "list_files", map[string]any{"sandbox": id, "path": "/tmp"}, &l)
	var got []string
	for _, e := range l.Entries {
		got = append(got, fmt.Sprintf("%s %s %s %d", e.Path, e.Type, e.Mode, e.Size))
	}
	want := []string{"/tmp/a.txt file -rw-r--r-- 7", "/tmp/b.bin file -rw-r--r-- 4", "/tmp/big file -rw-r--r-- 2025", "/tmp/sub dir drwxr-xr-x 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("list_files /tmp (-want +got):\n%s", diff)
	}
	call(t, cs, "list_files", map[string]any{"sandbox": id, "path": "/tmp", "depth": 2}, &l)
	if len(l.Entries) != 5 {
		t.Errorf("list_files /tmp depth 2 = %d entries; want 5 (with /tmp/sub/c)", len(l.Entries))
	}

	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"read_file", map[string]any{"path": "/tmp/missing"}, "no such file or directory: /tmp/missing"},
		{"read_file", map[string]any{"path": "/tmp"}, "/tmp is a directory: use list_files"},
		{"read_file", map[string]any{"path": "/tmp/a.txt", "max_kib": 100000}, "max_kib"},
		{"write_file", map[string]any{"path": "/tmp/x", "content": "%%%", "encoding": "base64"}, "content is not valid base64"},
		{"write_file", map[string]any{"path": "", "content": "x"}, "path"},
		{"list_files", map[string]any{"path": "/nope"}, "no such directory: /nope"},
		{"list_files", map[string]any{"path": "/tmp", "depth": 9}, "depth"},
	} {
		tc.args["sandbox"] = id
		if msg := callErr(t, cs, tc.tool, tc.args); !strings.Contains(msg, tc.want) {
			t.Errorf("%s(%v) error = %q; want it to contain %q", tc.tool, tc.args, msg, tc.want)
		}
	}
}

func netEvents(id string) []rest.NetworkEvent {
	var evs []rest.NetworkEvent
	for i, v := range []string{"allow", "deny", "allow", "error", "allow"} {
		evs = append(evs, rest.NetworkEvent{Time: time.Unix(int64(i), 0).UTC(), Sandbox: id, Kind: "tcp", Host: fmt.Sprintf("h%d.example", i), Verdict: v})
	}
	return evs
}

func TestNetworkLog(t *testing.T) {
	cs, d := session(t)
	id := create(t, cs, nil).ID
	d.Mu.Lock()
	d.NetLog[id] = netEvents(id)
	d.Mu.Unlock()
	hosts := func(evs []rest.NetworkEvent) []string {
		var out []string
		for _, e := range evs {
			out = append(out, e.Host)
		}
		return out
	}
	for _, tc := range []struct {
		args  map[string]any
		want  []string
		total int
	}{
		{map[string]any{}, []string{"h0.example", "h1.example", "h2.example", "h3.example", "h4.example"}, 5},
		{map[string]any{"limit": 2}, []string{"h3.example", "h4.example"}, 5},
		{map[string]any{"limit": 3}, []string{"h2.example", "h3.example", "h4.example"}, 5},
		{map[string]any{"denied_only": true}, []string{"h1.example", "h3.example"}, 2},
	} {
		tc.args["sandbox"] = id
		var got struct {
			Events []rest.NetworkEvent
			Total  int
		}
		call(t, cs, "network_log", tc.args, &got)
		if !slices.Equal(hosts(got.Events), tc.want) || got.Total != tc.total {
			t.Errorf("network_log(%v) = %v (total %d); want %v (total %d)", tc.args, hosts(got.Events), got.Total, tc.want, tc.total)
		}
	}
}

func TestResources(t *testing.T) {
	cs, d := session(t)
	sb := create(t, cs, map[string]any{"name": "box"})
	d.Mu.Lock()
	d.NetLog[sb.ID] = netEvents(sb.ID)
	d.Mu.Unlock()

	rl, err := cs.ListResources(t.Context(), nil)
	if err != nil || len(rl.Resources) != 1 || rl.Resources[0].URI != "corral://sandboxes" {
		t.Fatalf("ListResources = %+v, %v; want corral://sandboxes", rl, err)
	}
	tl, err := cs.ListResourceTemplates(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var templates []string
	for _, rt := range tl.ResourceTemplates {
		templates = append(templates, rt.URITemplate)
	}
	slices.Sort(templates)
	if want := []string{"corral://sandboxes/{id}", "corral://sandboxes/{id}/network-log", "corral://sandboxes/{id}/processes/{pid}/log"}; !slices.Equal(templates, want) {
		t.Errorf("resource templates = %v; want %v", templates, want)
	}

	read := func(uri string) (string, string) {
		t.Helper()
		res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("ReadResource(%s): %v", uri, err)
		}
		return res.Contents[0].MIMEType, res.Contents[0].Text
	}
	mime, txt := read("corral://sandboxes")
	var l struct{ Sandboxes []rest.Sandbox }
	if err := json.Unmarshal([]byte(txt), &l); err != nil || mime != "application/json" || len(l.Sandboxes) != 1 || l.Sandboxes[0].ID != sb.ID {
		t.Errorf("corral://sandboxes = %s %q; want JSON listing %s", mime, txt, sb.ID)
	}
	_, txt = read("corral://sandboxes/box")
	var one rest.Sandbox
	if err := json.Unmarshal([]byte(txt), &one); err != nil || one.ID != sb.ID {
		t.Errorf("corral://sandboxes/box = %q; want sandbox %s", txt, sb.ID)
	}
	mime, txt = read("corral://sandboxes/" + sb.ID + "/network-log")
	if lines := strings.Split(strings.TrimSpace(txt), "\n"); mime != "application/x-ndjson" || len(lines) != 5 || !strings.Contains(lines[4], `"host":"h4.example"`) {
		t.Errorf("network-log resource = %s %q; want 5 NDJSON lines", mime, txt)
	}

	_, err = cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "corral://sandboxes/nope"})
	var we *jsonrpc.Error
	if !errors.As(err, &we) || we.Code != mcp.CodeResourceNotFound {
		t.Errorf("ReadResource of an unknown sandbox: %v; want resource not found", err)
	}
}

// TestHTTP drives the streamable HTTP handler with the SDK's client, the
// API reached in-process as the daemon does it.
func TestHTTP(t *testing.T) {
	d := clienttest.New()
	c, closeAPI := mcpserver.InProcess(d.Handler())
	t.Cleanup(func() { closeAPI() })
	ts := httptest.NewServer(mcpserver.HTTPHandler(c, mcpserver.Options{}))
	t.Cleanup(ts.Close)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: ts.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	id := create(t, cs, nil).ID
	var res struct{ Stdout string }
	call(t, cs, "exec", map[string]any{"sandbox": id, "args": []any{"big", "200000"}}, &res)
	if want := strings.Repeat("x", 32<<10); !strings.HasPrefix(res.Stdout, want) || !strings.HasSuffix(res.Stdout, want) {
		t.Errorf("exec over HTTP: stdout of %d bytes; want the first and last 32 KiB of x", len(res.Stdout))
	}
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"job"}}, nil)
	call(t, cs, "remove_sandbox", map[string]any{"sandbox": id}, nil)
}
