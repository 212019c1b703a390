package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/client"
	"github.com/corral-sandbox/corral/client/clienttest"
	"github.com/corral-sandbox/corral/internal/mcpserver"
)

type logsResult struct {
	Stdout   string
	Stderr   string
	Running  bool
	ExitCode *int `json:"exit_code"`
}

type waitResult struct {
	Exited   bool
	PID      uint32
	ExitCode *int `json:"exit_code"`
}

// TestBackgroundProcess drives a background process through its output,
// its stdin and its end. The fake's "bg" command echoes its arguments,
// then its input, and exits with N at an input line "exit N".
func TestBackgroundProcess(t *testing.T) {
	cs, _ := session(t)
	id := create(t, cs, nil).ID
	var st struct{ PID uint32 }
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"bg", "hello"}, "tag": "repl", "open_stdin": true}, &st)

	var l logsResult
	txt := call(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "repl"}, &l)
	if l.Stdout != "hello\n" || !l.Running || l.ExitCode != nil {
		t.Errorf("process_logs = %+v; want stdout hello, running", l)
	}
	if !strings.HasPrefix(txt, "running\nstdout:\nhello\n") {
		t.Errorf("process_logs text = %q; want running and the output as it is", txt)
	}

	var in struct {
		BytesSent int `json:"bytes_sent"`
	}
	call(t, cs, "send_input", map[string]any{"sandbox": id, "pid": st.PID, "input": "one\ntwo\n"}, &in)
	if in.BytesSent != 8 {
		t.Errorf("send_input sent %d bytes; want 8", in.BytesSent)
	}
	call(t, cs, "process_logs", map[string]any{"sandbox": id, "pid": st.PID, "tail_lines": 2}, &l)
	if l.Stdout != "one\ntwo\n" {
		t.Errorf("process_logs(tail_lines 2) stdout = %q; want the last two lines", l.Stdout)
	}

	var w waitResult
	call(t, cs, "wait_process", map[string]any{"sandbox": id, "tag": "repl", "timeout_seconds": 1}, &w)
	if w.Exited || w.ExitCode != nil {
		t.Errorf("wait_process of a running process = %+v; want exited false at the timeout", w)
	}
	call(t, cs, "send_input", map[string]any{"sandbox": id, "tag": "repl", "input": "exit 3\n"}, nil)
	call(t, cs, "wait_process", map[string]any{"sandbox": id, "pid": st.PID}, &w)
	if !w.Exited || w.ExitCode == nil || *w.ExitCode != 3 || w.PID != st.PID {
		t.Errorf("wait_process = %+v; want pid %d exited with 3", w, st.PID)
	}
	call(t, cs, "process_logs", map[string]any{"sandbox": id, "pid": st.PID}, &l)
	if l.Running || l.ExitCode == nil || *l.ExitCode != 3 || l.Stdout != "hello\none\ntwo\nexit 3\n" {
		t.Errorf("process_logs after the end = %+v; want all the output and exit code 3", l)
	}

	// close_stdin alone ends a process that reads to end of file.
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"bg"}, "tag": "cat", "open_stdin": true}, nil)
	call(t, cs, "send_input", map[string]any{"sandbox": id, "tag": "cat", "input": "x\n", "close_stdin": true}, nil)
	call(t, cs, "wait_process", map[string]any{"sandbox": id, "tag": "cat"}, &w)
	if !w.Exited || w.ExitCode == nil || *w.ExitCode != 0 {
		t.Errorf("wait_process after close_stdin = %+v; want exited with 0", w)
	}

	// Without open_stdin, the process has no stdin to write to.
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"bg"}, "tag": "deaf"}, nil)
	if msg := callErr(t, cs, "send_input", map[string]any{"sandbox": id, "tag": "deaf", "input": "x"}); !strings.Contains(msg, "open_stdin: true") {
		t.Errorf("send_input without open_stdin: error = %q; want it to name open_stdin", msg)
	}
}

func TestProcessToolsBadInput(t *testing.T) {
	cs, _ := session(t)
	id := create(t, cs, nil).ID
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"process_logs", map[string]any{"sandbox": id}, "give pid or tag"},
		{"process_logs", map[string]any{"sandbox": id, "pid": 1, "tag": "a"}, "give pid or tag"},
		{"process_logs", map[string]any{"sandbox": id, "tag": "a", "tail_lines": -1}, "tail_lines"},
		{"process_logs", map[string]any{"sandbox": id, "tag": "a", "max_output_kib": 4096}, "max_output_kib"},
		{"process_logs", map[string]any{"sandbox": id, "tag": "gone"}, `process with tag "gone" not found`},
		{"send_input", map[string]any{"sandbox": id, "tag": "a"}, "input is empty"},
		{"send_input", map[string]any{"sandbox": id, "input": "x"}, "give pid or tag"},
		{"wait_process", map[string]any{"sandbox": id, "tag": "a", "timeout_seconds": 7200}, "timeout_seconds"},
		{"wait_process", map[string]any{"sandbox": id, "pid": 0}, "pid"},
		{"diff", map[string]any{"sandbox": id, "format": "tree"}, "format"},
		{"diff", map[string]any{"sandbox": id, "max_entries": 0.5}, "max_entries"},
		{"diff", map[string]any{"sandbox": id, "context": 3}, "context"},
	} {
		if msg := callErr(t, cs, tc.tool, tc.args); !strings.Contains(msg, tc.want) {
			t.Errorf("%s(%v) error = %q; want it to contain %q", tc.tool, tc.args, msg, tc.want)
		}
	}
}

func TestDiff(t *testing.T) {
	cs, d := session(t)
	id := create(t, cs, nil).ID
	changes := []rest.Change{
		{Kind: "A", Path: "/app/a.py", Type: "file", Size: 3, Mode: 0o644},
		{Kind: "C", Path: "/app/b.py", Type: "file", Size: 5, Mode: 0o644},
		{Kind: "D", Path: "/app/c.py", Type: "file", Size: 1, Mode: 0o644},
	}
	patch := "diff --git a/a.py b/a.py\n" + strings.Repeat("+x\n", 1000)
	d.Mu.Lock()
	d.Diffs[id] = clienttestDiff(changes, patch)
	d.Mu.Unlock()

	var out struct {
		Format  string
		Changes []rest.Change
		Stat    *rest.DiffStat
		Patch   string
		Total   int
		Note    string
	}
	call(t, cs, "diff", map[string]any{"sandbox": id, "dir": "/app", "paths": []any{"*.py"}, "max_entries": 2}, &out)
	if diff := cmp.Diff(changes[:2], out.Changes); diff != "" || out.Total != 3 || !strings.Contains(out.Note, "max_entries") {
		t.Errorf("diff(max_entries 2) = %+v; want the first 2 of 3 changes with a note (-want +got):\n%s", out, diff)
	}
	call(t, cs, "diff", map[string]any{"sandbox": id, "format": "stat"}, &out)
	if out.Stat == nil || out.Stat.FilesChanged != 1 || out.Total != 1 || out.Stat.Files[0].Insertions != 1000 {
		t.Errorf("diff(stat) = %+v; want one file with 1000 insertions", out)
	}
	txt := call(t, cs, "diff", map[string]any{"sandbox": id, "format": "patch", "max_output_kib": 1, "from": "base"}, &out)
	if out.Total != len(patch) || len(out.Patch) > 1100 || !strings.HasPrefix(out.Patch, "diff --git") || !strings.Contains(out.Note, "does not apply") {
		t.Errorf("diff(patch, 1 KiB) = total %d, %d bytes, note %q; want the patch cut to 1 KiB with a note", out.Total, len(out.Patch), out.Note)
	}
	if !strings.HasPrefix(txt, "note: ") {
		t.Errorf("diff(patch) text starts %q; want the note first", txt[:min(len(txt), 40)])
	}
	d.Mu.Lock()
	q := d.DiffQueries
	d.Mu.Unlock()
	want := []string{"dir=%2Fapp&format=list&path=%2A.py", "format=stat", "format=patch&from=base"}
	if diff := cmp.Diff(want, q); diff != "" {
		t.Errorf("diff queries (-want +got):\n%s", diff)
	}
}

func clienttestDiff(changes []rest.Change, patch string) clienttest.Diff {
	return clienttest.Diff{
		Changes: changes,
		Stat: rest.DiffStat{
			Files:        []rest.FileStat{{Path: "a.py", Insertions: 1000, NewSize: 2000}},
			FilesChanged: 1, Insertions: 1000,
		},
		Patch: patch,
	}
}

// TestProcessLogsFollow follows a background process: the since offsets
// return only the output after the previous call's, and follow_seconds
// waits until output past them arrives, with nothing lost between the
// calls, then returns it.
func TestProcessLogsFollow(t *testing.T) {
	cs, _ := session(t)
	id := create(t, cs, nil).ID
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"bg", "hello"}, "tag": "srv", "open_stdin": true}, nil)

	var l struct {
		logsResult
		StdoutBytes int64 `json:"stdout_bytes"`
	}
	call(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "srv"}, &l)
	if l.Stdout != "hello\n" || l.StdoutBytes != 6 {
		t.Fatalf("process_logs = %+v; want hello and offset 6", l)
	}
	// Nothing new yet: since alone returns at once with nothing.
	call(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "srv", "since_stdout_bytes": l.StdoutBytes}, &l)
	if l.Stdout != "" || l.StdoutBytes != 6 || !l.Running {
		t.Fatalf("process_logs since 6 = %+v; want nothing new, offset 6, running", l)
	}
	// The follow waits for the line that the input makes the process
	// write, whether it comes before or after the call starts.
	done := make(chan struct{})
	var f struct {
		logsResult
		StdoutBytes int64 `json:"stdout_bytes"`
	}
	go func() {
		defer close(done)
		call(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "srv", "since_stdout_bytes": 6, "follow_seconds": MaxFollow}, &f)
	}()
	call(t, cs, "send_input", map[string]any{"sandbox": id, "tag": "srv", "input": "ping\n"}, nil)
	<-done
	if f.Stdout != "ping\n" || f.StdoutBytes != 11 || !f.Running {
		t.Errorf("process_logs following = %+v; want ping, offset 11, running", f)
	}
	// At the end, a follow returns the exit code.
	call(t, cs, "send_input", map[string]any{"sandbox": id, "tag": "srv", "input": "exit 2\n"}, nil)
	call(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "srv", "since_stdout_bytes": 11, "follow_seconds": MaxFollow}, &f)
	if f.Stdout != "exit 2\n" || f.StdoutBytes != 18 {
		t.Errorf("process_logs to the end = %+v; want the last line, offset 18", f)
	}
	call(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "srv", "since_stdout_bytes": 18, "follow_seconds": MaxFollow}, &f)
	if f.Stdout != "" || f.Running || f.ExitCode == nil || *f.ExitCode != 2 {
		t.Errorf("process_logs after the end = %+v; want nothing new and exit code 2", f)
	}

	if msg := callErr(t, cs, "process_logs", map[string]any{"sandbox": id, "tag": "srv", "tail_lines": 1, "follow_seconds": 1}); !strings.Contains(msg, "tail_lines goes without") {
		t.Errorf("tail_lines with follow_seconds: %q; want an error naming both", msg)
	}
}

// MaxFollow is the follow_seconds of the tests: long, never reached when
// the code is right.
const MaxFollow = 300

// TestProcessLogResource reads a background process's log resource and
// subscribes to it: new output and the process's end send
// notifications/resources/updated, after which a read has the output.
func TestProcessLogResource(t *testing.T) {
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
	updated := make(chan string, 16)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	}).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	if caps := cs.InitializeResult().Capabilities; caps.Resources == nil || !caps.Resources.Subscribe {
		t.Fatalf("server capabilities = %+v; want resource subscriptions", caps.Resources)
	}

	id := create(t, cs, nil).ID
	var p struct{ PID uint32 }
	call(t, cs, "start_process", map[string]any{"sandbox": id, "args": []any{"bg", "hello"}, "tag": "srv", "open_stdin": true}, &p)
	uri := fmt.Sprintf("corral://sandboxes/%s/processes/%d/log", id, p.PID)
	read := func() logsResult {
		t.Helper()
		res, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("ReadResource(%s): %v", uri, err)
		}
		var l logsResult
		if err := json.Unmarshal([]byte(res.Contents[0].Text), &l); err != nil || res.Contents[0].MIMEType != "application/json" {
			t.Fatalf("log resource %s %q: %v", res.Contents[0].MIMEType, res.Contents[0].Text, err)
		}
		return l
	}
	if l := read(); l.Stdout != "hello\n" || !l.Running {
		t.Errorf("log resource = %+v; want hello, running", l)
	}

	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	// The follow may start after this input: then its output is in the
	// read, and the end below still notifies.
	call(t, cs, "send_input", map[string]any{"sandbox": id, "tag": "srv", "input": "ping\nexit 0\n"}, nil)
	if got := <-updated; got != uri {
		t.Errorf("updated %q; want %q", got, uri)
	}
	call(t, cs, "wait_process", map[string]any{"sandbox": id, "tag": "srv"}, nil)
	if l := read(); l.Stdout != "hello\nping\nexit 0\n" {
		t.Errorf("log resource after the update = %+v; want the new output", l)
	}
	if err := cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}

	if _, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: "corral://sandboxes/" + id + "/processes/99999/log"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("ReadResource of an unknown process: %v; want resource not found", err)
	}
}
