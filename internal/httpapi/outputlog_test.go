package httpapi

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// fakeOutputLog holds "hello " on stdout and "oops" on stderr of pid 7
// of every box, from output offset 100 on.
type fakeOutputLog struct{ box string }

func (f *fakeOutputLog) Read(id string, pid uint32, to uint64, fn func(off uint64, stderr bool, data []byte) error) (uint64, error) {
	f.box = id
	if pid != 7 {
		return 0, fmt.Errorf("output log of pid %d: %w", pid, errdefs.ErrNotFound)
	}
	chunks := []struct {
		stderr bool
		data   string
	}{{false, "hello "}, {true, "oops"}}
	off := uint64(100)
	for _, c := range chunks {
		d := []byte(c.data)
		if to > 0 && off+uint64(len(d)) > to {
			d = d[:max(to, off)-off]
		}
		if len(d) > 0 {
			if err := fn(off, c.stderr, d); err != nil {
				return 0, err
			}
		}
		off += uint64(len(c.data))
	}
	return 100, nil
}

func TestProcessLog(t *testing.T) {
	fl := &fakeOutputLog{}
	f := newFixture(t, "", func(f *fixture, _ *sandbox.ManagerConfig) { f.outputLog = fl })
	sb := f.create(t, `{"image":"busybox"}`)
	frame := func(kind byte, s string) string {
		return string([]byte{kind, 0, 0, 0, 0, 0, 0, byte(len(s))}) + s
	}
	tests := []struct {
		name, path string
		code       int
		body       string
	}{
		{name: "all", path: "/processes/7/log", code: 200, body: frame(1, "hello ") + frame(2, "oops")},
		{name: "up to an offset", path: "/processes/7/log?to=108", code: 200, body: frame(1, "hello ") + frame(2, "oo")},
		{name: "unknown pid", path: "/processes/8/log", code: 404},
		{name: "bad pid", path: "/processes/x/log", code: 400},
		{name: "pid 0", path: "/processes/0/log", code: 400},
		{name: "bad offset", path: "/processes/7/log?to=-1", code: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "GET", "/v1/sandboxes/"+sb.ID+tc.path, "")
			if code != tc.code || (tc.code == 200 && body != tc.body) {
				t.Errorf("GET %s = %d %q; want %d %q", tc.path, code, body, tc.code, tc.body)
			}
		})
	}
	if fl.box != sb.ID {
		t.Errorf("Read of box %q; want %q", fl.box, sb.ID)
	}
	req, _ := http.NewRequest("GET", f.srv.URL+"/v1/sandboxes/"+sb.ID+"/processes/7/log", nil)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get(OutputSourceHeader); got != "log-file" {
		t.Errorf("%s = %q; want log-file", OutputSourceHeader, got)
	}
	if got := resp.Header.Get(OutputStartHeader); got != "100" {
		t.Errorf("%s = %q; want 100", OutputStartHeader, got)
	}
	if got := resp.Header.Get("Content-Type"); got != multiplexedStream {
		t.Errorf("Content-Type = %q; want %q", got, multiplexedStream)
	}
	if code, _ := f.do(t, "GET", "/v1/sandboxes/nope/processes/7/log", ""); code != 404 {
		t.Errorf("GET of an unknown box = %d; want 404", code)
	}
	off := newFixture(t, "")
	sb = off.create(t, `{"image":"busybox"}`)
	if code, body := off.do(t, "GET", "/v1/sandboxes/"+sb.ID+"/processes/7/log", ""); code != 501 {
		t.Errorf("GET with the log files off = %d %s; want 501", code, body)
	}
}
