package audit

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	fspb "github.com/corral-sandbox/corral/api/gen/filesystem"
	processpb "github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/rest"
)

// envelope frames msg as a Connect streaming message.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

const secretValue = "s3cr3t-value-never-stored"

func startRequest(t *testing.T, isJSON bool) *http.Request {
	cwd, user := "/work", "alice"
	req := &processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "sh", Args: []string{"-c", "echo hi"}, Cwd: &cwd, User: &user,
		Envs: map[string]string{"API_KEY": secretValue, "HOME": "/root"},
	}}
	marshal, ctype := proto.Marshal, "application/connect+proto"
	if isJSON {
		marshal, ctype = protojson.Marshal, "application/connect+json"
	}
	msg, err := marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	body := envelope(0, msg)
	r := httptest.NewRequest(http.MethodPost, "/process.Process/Start", bytes.NewReader(body))
	r.Header.Set("Content-Type", ctype)
	r.GetBody = func() (io.ReadCloser, error) { return readCloser(body), nil }
	return r
}

func response(t *testing.T, isJSON bool, ev *processpb.ProcessEvent) []byte {
	marshal := proto.Marshal
	if isJSON {
		marshal = protojson.Marshal
	}
	b, err := marshal(&processpb.StartResponse{Event: ev})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExecRecord(t *testing.T) {
	for _, isJSON := range []bool{false, true} {
		t.Run(map[bool]string{false: "proto", true: "json"}[isJSON], func(t *testing.T) {
			var got []rest.AuditEvent
			e := NewExec(func(ev rest.AuditEvent) { got = append(got, ev) }, "box1", startRequest(t, isJSON))
			feed := func(flags byte, msg []byte) {
				pre := msg[:min(len(msg), MaxMsgPrefix)]
				e.Message(flags, pre, uint32(len(msg)))
			}
			feed(0, response(t, isJSON, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}))
			out := bytes.Repeat([]byte("x"), 3000) // longer than the prefix kept
			feed(0, response(t, isJSON, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: out}}}}))
			feed(0, response(t, isJSON, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stderr{Stderr: []byte("oops")}}}}))
			feed(0, response(t, isJSON, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true, Status: "exit status 3", CpuTimeUs: 1500, PeakMemoryBytes: 4 << 20}}}))
			feed(connectEndStream, []byte("{}"))
			e.Finish(http.StatusOK)

			if len(got) != 2 || got[0].Type != rest.AuditExec || got[1].Type != rest.AuditExecEnd {
				t.Fatalf("events = %+v; want exec, exec_end", got)
			}
			start, end := got[0].Exec, got[1].Exec
			if start.Cmd != "sh" || strings.Join(start.Args, " ") != "-c echo hi" || start.Cwd != "/work" || start.User != "alice" ||
				strings.Join(start.Env, ",") != "API_KEY,HOME" || start.Pid != 42 {
				t.Errorf("exec = %+v; want sh -c 'echo hi' in /work as alice, env API_KEY,HOME, pid 42", start)
			}
			if end.ExitCode == nil || *end.ExitCode != 3 || end.Status != "exit status 3" || end.End == nil || end.ID != start.ID || end.Detached {
				t.Errorf("exec_end = %+v; want exit 3 with the exec's ID", end)
			}
			if end.CPUTimeUS != 1500 || end.PeakMemoryBytes != 4<<20 {
				t.Errorf("exec_end usage = %d us, %d bytes; want 1500 us, 4 MiB", end.CPUTimeUS, end.PeakMemoryBytes)
			}
			if !isJSON && (end.StdoutBytes != 3000 || end.StderrBytes != 4) {
				t.Errorf("output = %d/%d bytes; want 3000/4", end.StdoutBytes, end.StderrBytes)
			}
			if isJSON && (end.StdoutBytes < 2990 || end.StdoutBytes > 3010 || end.StderrBytes > 10) {
				t.Errorf("output = %d/%d bytes; want about 3000/4", end.StdoutBytes, end.StderrBytes)
			}
			for _, ev := range got {
				b, _ := json.Marshal(ev)
				if bytes.Contains(b, []byte(secretValue)) {
					t.Errorf("event %s holds an environment value", b)
				}
			}
		})
	}
}

func TestExecRecordDetachedAndFailed(t *testing.T) {
	var got []rest.AuditEvent
	add := func(ev rest.AuditEvent) { got = append(got, ev) }
	e := NewExec(add, "box1", startRequest(t, false))
	e.Message(0, response(t, false, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 7}}}), 0)
	e.Finish(http.StatusOK) // the client left
	if len(got) != 2 || !got[1].Exec.Detached || got[1].Exec.Pid != 7 {
		t.Errorf("detached exec: events = %+v; want exec, exec_end detached with pid 7", got)
	}

	got = nil
	e = NewExec(add, "box1", startRequest(t, false))
	trailer := []byte(`{"error":{"code":"not_found","message":"exec: \"nope\": executable file not found"}}`)
	e.Message(connectEndStream, trailer, uint32(len(trailer)))
	e.Finish(http.StatusOK)
	if len(got) != 2 || got[1].Exec.Detached || !strings.Contains(got[1].Exec.Error, "executable file not found") {
		t.Errorf("failed exec: events = %+v; want exec, exec_end with the error", got)
	}
}

// TestExecRecordOOMKilledByDaemon: a command whose box the OOM killer
// ended whole (the gvisor tier) has no end event from the agent; the
// daemon's end of the stream marks it, and exec_end says oom_killed.
func TestExecRecordOOMKilledByDaemon(t *testing.T) {
	var got []rest.AuditEvent
	e := NewExec(func(ev rest.AuditEvent) { got = append(got, ev) }, "box1", startRequest(t, false))
	e.Message(0, response(t, false, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 9}}}), 0)
	e.SetOOMKilled()
	trailer := []byte(`{"error":{"code":"resource_exhausted","message":"sandbox box1: killed: out of memory"}}`)
	e.Message(connectEndStream, trailer, uint32(len(trailer)))
	e.Finish(http.StatusOK)
	if len(got) != 2 || got[1].Type != rest.AuditExecEnd || !got[1].Exec.OOM || got[1].Exec.Detached || !strings.Contains(got[1].Exec.Error, "out of memory") {
		t.Errorf("events = %+v; want exec, then exec_end with oom_killed and the error", got)
	}
}

func TestFileEvent(t *testing.T) {
	move, _ := proto.Marshal(&fspb.MoveRequest{Source: "/a", Destination: "/b"})
	list, _ := proto.Marshal(&fspb.ListDirRequest{Path: "/dir", Depth: 2})
	tests := []struct {
		name, method, path, ctype string
		body                      []byte
		wantOp, wantPath, wantTo  string
	}{
		{"read", http.MethodGet, "/files?path=/etc/x&username=bob", "", nil, "read", "/etc/x", ""},
		{"move proto", http.MethodPost, "/filesystem.Filesystem/Move", "application/proto", move, "move", "/a", "/b"},
		{"list proto", http.MethodPost, "/filesystem.Filesystem/ListDir", "application/proto", list, "list_dir", "/dir", ""},
		{"make dir json", http.MethodPost, "/filesystem.Filesystem/MakeDir", "application/json", []byte(`{"path":"/new"}`), "make_dir", "/new", ""},
		{"watch dir stream", http.MethodPost, "/filesystem.Filesystem/WatchDir", "application/connect+json", envelope(0, []byte(`{"path":"/w"}`)), "watch_dir", "/w", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, _, _ := strings.Cut(tc.path, "?")
			op := FileOp(tc.method, u)
			r := httptest.NewRequest(tc.method, tc.path, bytes.NewReader(tc.body))
			r.Header.Set("Content-Type", tc.ctype)
			ev := FileEvent("box1", op, r, tc.body, 200, 0, 12)
			if ev.File.Op != tc.wantOp || ev.File.Path != tc.wantPath || ev.File.To != tc.wantTo {
				t.Errorf("FileEvent(%s) = %+v; want op %s path %s to %q", tc.path, ev.File, tc.wantOp, tc.wantPath, tc.wantTo)
			}
		})
	}
	if op := FileOp(http.MethodPost, "/filesystem.Filesystem/GetWatcherEvents"); op != "" {
		t.Errorf("FileOp(GetWatcherEvents) = %q; want none", op)
	}
	r := httptest.NewRequest(http.MethodGet, "/files?path=/x", nil)
	r.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("carol:")))
	if ev := FileEvent("box1", "read", r, nil, 200, 0, 5); ev.File.User != "carol" || ev.File.Bytes != 5 {
		t.Errorf("FileEvent(read as carol) = %+v; want user carol, 5 bytes", ev.File)
	}
}

func readCloser(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// BenchmarkExecRecord is what recording adds to one exec on the data
// plane: the request and the answer's four messages parsed, two events
// queued (the writer's disk time is not on the request's path).
func BenchmarkExecRecord(b *testing.B) {
	t := &testing.T{}
	r := startRequest(t, false)
	msgs := [][]byte{
		response(t, false, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Start{Start: &processpb.ProcessEvent_StartEvent{Pid: 42}}}),
		response(t, false, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: &processpb.ProcessEvent_DataEvent{Output: &processpb.ProcessEvent_DataEvent_Stdout{Stdout: []byte("hello\n")}}}}),
		response(t, false, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: &processpb.ProcessEvent_EndEvent{Exited: true, Status: "exit status 0"}}}),
	}
	s, err := Open(Config{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	b.ReportAllocs()
	for b.Loop() {
		e := NewExec(s.Add, "box1", r)
		for _, m := range msgs {
			e.Message(0, m, uint32(len(m)))
		}
		e.Message(connectEndStream, []byte("{}"), 2)
		e.Finish(http.StatusOK)
	}
}
