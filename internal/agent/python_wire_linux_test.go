package agent

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The Python SDK (e2b 2.45, which cannot be installed here) speaks envd's
// protocol with other clients than the JavaScript SDK: httpx for /files
// (multipart/form-data by default, where the JS SDK sends octet-stream
// bodies), and connectrpc-python with a JSON codec and its own headers for
// the RPCs. These are its requests, as it builds them, and the answers it
// reads.

// pythonHeaders are the headers the Python SDK sends with every envd
// request (the sandbox routing headers aside, which the daemon strips),
// with user tester as commands.run(..., user="tester") names it.
func pythonHeaders(h http.Header) {
	h.Set("User-Agent", "e2b-python-sdk/2.45.1")
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("tester:")))
}

// TestPythonSDKFiles: files.write(path, "text") sends one multipart part
// named by the path with ?path= the same path (relative ones are the
// user's home's), and files.read asks with httpx's own Accept-Encoding.
func TestPythonSDKFiles(t *testing.T) {
	home := t.TempDir()
	c := agentWithHome(t, home)
	for _, p := range []string{"py/notes.txt", filepath.Join(t.TempDir(), "abs", "notes.txt")} {
		ct, body := multipartBody(t, p)
		req, err := http.NewRequestWithContext(t.Context(), "POST", c.BaseURL+"/files?"+url.Values{"path": {p}}.Encode(), body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", ct)
		pythonHeaders(req.Header)
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := p
		if !filepath.IsAbs(p) {
			want = filepath.Join(home, p)
		}
		var got []uploadedEntry
		if err := json.Unmarshal(b, &got); err != nil || resp.StatusCode != 200 || len(got) != 1 || got[0].Path != want {
			t.Errorf("write(%q) as the Python SDK = %d %s; want 200 with the one entry %s", p, resp.StatusCode, b, want)
		}
		if data, err := os.ReadFile(want); err != nil || string(data) != "data of "+p {
			t.Errorf("%s = %q, %v; want the part's data", want, data, err)
		}

		// read(): httpx asks for gzip among others and decodes it.
		req, _ = http.NewRequestWithContext(t.Context(), "GET", c.BaseURL+"/files?"+url.Values{"path": {p}}.Encode(), nil)
		pythonHeaders(req.Header)
		req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
		resp, err = c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("read(%q) with httpx's Accept-Encoding = %d, Content-Encoding %q; want 200 gzip", p, resp.StatusCode, resp.Header.Get("Content-Encoding"))
		}
	}
}

// TestPythonSDKConnectJSON: connectrpc-python with the SDK's JSON codec
// (no compression, Connect-Timeout-Ms from request_timeout) for a unary
// call, and for a server stream (commands.run: Start with the SDK's
// Keepalive-Ping-Interval header).
func TestPythonSDKConnectJSON(t *testing.T) {
	home := t.TempDir()
	c := agentWithHome(t, home)
	mustWrite(t, filepath.Join(home, "f.txt"), "x")

	req, err := http.NewRequestWithContext(t.Context(), "POST", c.BaseURL+"/filesystem.Filesystem/Stat", bytes.NewReader([]byte(`{"path":"f.txt"}`)))
	if err != nil {
		t.Fatal(err)
	}
	pythonHeaders(req.Header)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var stat struct {
		Entry struct {
			Name, Type, Path string
		}
	}
	if err := json.Unmarshal(b, &stat); err != nil || resp.StatusCode != 200 || stat.Entry.Name != "f.txt" || stat.Entry.Type != "FILE_TYPE_FILE" || stat.Entry.Path != filepath.Join(home, "f.txt") {
		t.Errorf("Stat as connectrpc-python = %d %s; want the entry of f.txt", resp.StatusCode, b)
	}

	// A server stream: one enveloped JSON request, enveloped JSON answers,
	// the last flagged end of stream.
	msg := []byte(`{"process":{"cmd":"/bin/sh","args":["-c","echo hi; exit 3"],"envs":{}},"stdin":false}`)
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.Write(msg)
	req, err = http.NewRequestWithContext(t.Context(), "POST", c.BaseURL+"/process.Process/Start", &env)
	if err != nil {
		t.Fatal(err)
	}
	pythonHeaders(req.Header)
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	req.Header.Set("Connect-Timeout-Ms", "60000")
	req.Header.Set("Keepalive-Ping-Interval", "50")
	resp, err = c.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("Start as connectrpc-python = %d %s; want 200 application/connect+json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	var stdout []byte
	var exit *int
	ended := false
	for !ended {
		var hdr [5]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			t.Fatalf("read an envelope: %v", err)
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
		if _, err := io.ReadFull(r, data); err != nil {
			t.Fatal(err)
		}
		if hdr[0]&2 != 0 { // end of stream: {} or an error
			if string(data) != "{}" {
				t.Errorf("end of stream %s; want {}", data)
			}
			ended = true
			continue
		}
		var ev struct {
			Event struct {
				Data *struct {
					Stdout []byte `json:"stdout"`
				} `json:"data"`
				End *struct {
					ExitCode int  `json:"exitCode"`
					Exited   bool `json:"exited"`
				} `json:"end"`
				Keepalive *struct{} `json:"keepalive"`
			} `json:"event"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if d := ev.Event.Data; d != nil {
			stdout = append(stdout, d.Stdout...)
		}
		if e := ev.Event.End; e != nil && e.Exited {
			exit = &e.ExitCode
		}
	}
	if string(stdout) != "hi\n" || exit == nil || *exit != 3 {
		t.Errorf("Start as connectrpc-python: stdout %q, exit %v; want hi and 3", stdout, exit)
	}
}

// TestPythonSDKWatcherPolling: the sync Python SDK's watch_dir polls
// (CreateWatcher, GetWatcherEvents, RemoveWatcher) where the JS SDK holds
// a WatchDir stream open.
func TestPythonSDKWatcherPolling(t *testing.T) {
	home := t.TempDir()
	c := agentWithHome(t, home)
	call := func(method, body string) map[string]any {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", c.BaseURL+"/filesystem.Filesystem/"+method, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		pythonHeaders(req.Header)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Connect-Protocol-Version", "1")
		req.Header.Set("Keepalive-Ping-Interval", "50")
		resp, err := c.HTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s = %d %v, %v", method, body, resp.StatusCode, out, err)
		}
		return out
	}
	w := call("CreateWatcher", `{"path":".","recursive":false,"includeEntry":true,"allowNetworkMounts":false}`)
	id, _ := w["watcherId"].(string)
	if id == "" {
		t.Fatalf("CreateWatcher = %v; want a watcherId", w)
	}
	mustWrite(t, filepath.Join(home, "new.txt"), "x")
	var names []string
	// Poll as the SDK does, until the event comes (or the test's deadline).
	for t.Context().Err() == nil {
		evs := call("GetWatcherEvents", `{"watcherId":"`+id+`"}`)
		list, _ := evs["events"].([]any)
		for _, e := range list {
			m, _ := e.(map[string]any)
			if n, _ := m["name"].(string); n != "" {
				names = append(names, n+" "+m["type"].(string))
			}
		}
		if len(names) > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(names) == 0 || names[0] != "new.txt EVENT_TYPE_CREATE" {
		t.Errorf("polled events %v; want new.txt EVENT_TYPE_CREATE first", names)
	}
	call("RemoveWatcher", `{"watcherId":"`+id+`"}`)
}
