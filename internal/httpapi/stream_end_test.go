package httpapi

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/sandbox/sandboxtest"
)

// envelope is one Connect envelope of a stream.
type envelope struct {
	flags byte
	msg   string
}

// envelopes splits a Connect stream; rest is what is left of a cut one.
func envelopes(b []byte) (out []envelope, rest int) {
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if len(b) < 5+n {
			break
		}
		out = append(out, envelope{b[0], string(b[5 : 5+n])})
		b = b[5+n:]
	}
	return out, len(b)
}

// TestProxyStreamAgentDied: when the agent's Connect stream breaks after
// the answer started, the proxy ends the stream with a Connect error that
// says why (the OOM killer took the agent, the sandbox was removed),
// instead of cutting it ("incomplete envelope").
func TestProxyStreamAgentDied(t *testing.T) {
	f := newFixture(t, "")
	for _, name := range []string{"oom", "crash", "goes", "mid"} {
		if code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"`+name+`","resources":{"memory_bytes":268435456}}`); code != 201 {
			t.Fatalf("create %s = %d %s", name, code, body)
		}
	}
	idOf := func(name string) string {
		rec, err := f.m.Get(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		return rec.ID
	}
	type answer struct {
		resp *http.Response
		body []byte
		err  error
	}
	call := func(name, query string, meanwhile func()) answer {
		t.Helper()
		got := make(chan answer, 1)
		go func() {
			resp, err := f.srv.Client().Post(f.srv.URL+"/v1/sandboxes/"+name+"/agent/connectstream"+query, "application/connect+proto", nil)
			if err != nil {
				got <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			got <- answer{resp, b, err}
		}()
		if req := <-f.agentReqs; !strings.Contains(req, "/connectstream") {
			t.Fatalf("agent got %s; want the /connectstream request", req)
		}
		meanwhile()
		f.abort <- struct{}{}
		return <-got
	}
	endError := func(a answer) (code, msg string) {
		t.Helper()
		if a.err != nil {
			t.Fatalf("stream = %v; want it to end properly", a.err)
		}
		envs, rest := envelopes(a.body)
		if len(envs) != 2 || rest != 0 || envs[0] != (envelope{0, "hi"}) || envs[1].flags != connectFlagEndStream {
			t.Fatalf("stream = %q; want the message, then an end-of-stream envelope", a.body)
		}
		var end struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal([]byte(envs[1].msg), &end); err != nil {
			t.Fatalf("end of stream %q: %v", envs[1].msg, err)
		}
		return end.Error.Code, end.Error.Message
	}

	a := call("oom", "", func() {
		f.env.Runtime.Update(idOf("oom"), func(b *sandboxtest.Box) { b.OOMKills = 4 })
	})
	if a.resp != nil && a.resp.Header.Get(agentclient.OOMKillsHeader) != "" {
		t.Errorf("the client got the agent's %s header", agentclient.OOMKillsHeader)
	}
	code, msg := endError(a)
	if want := "its agent was killed by the OOM killer (memory limit 256 MiB): the command's output ends here"; code != "resource_exhausted" || !strings.Contains(msg, want) {
		t.Errorf("agent killed by the OOM killer: end error %s %q; want resource_exhausted containing %q", code, msg, want)
	}

	// The same counter: the agent died of something else.
	code, msg = endError(call("crash", "", func() {
		f.env.Runtime.Update(idOf("crash"), func(b *sandboxtest.Box) { b.OOMKills = 3 })
	}))
	if want := "its agent went away while the request ran"; code != "unavailable" || !strings.Contains(msg, want) {
		t.Errorf("agent gone: end error %s %q; want unavailable containing %q", code, msg, want)
	}

	code, msg = endError(call("goes", "", func() {
		if code, body := f.do(t, "DELETE", "/v1/sandboxes/goes?force=true", ""); code != 204 {
			t.Fatalf("delete = %d %s", code, body)
		}
	}))
	if want := "was removed while the command ran"; code != "not_found" || !strings.Contains(msg, want) {
		t.Errorf("sandbox removed: end error %s %q; want not_found containing %q", code, msg, want)
	}

	// Cut in the middle of an envelope: nothing valid can follow.
	a = call("mid", "?mid=1", func() {})
	if envs, rest := envelopes(a.body); a.err == nil && rest == 0 {
		t.Errorf("stream cut mid-envelope = %v (%d left over); want it to end abruptly", envs, rest)
	}
}

func TestStreamGuardFollowsEnvelopes(t *testing.T) {
	g := &streamGuard{}
	stream := []byte{0, 0, 0, 0, 3, 'a', 'b', 'c', 1, 0, 0, 1, 0}
	stream = append(stream, make([]byte, 256)...)
	for i := range stream { // a byte at a time: every split
		g.follow(stream[i : i+1])
		if boundary := g.hdrN == 0 && g.left == 0; boundary != (i == 7 || i == len(stream)-1) {
			t.Errorf("after byte %d: at a boundary = %v", i, boundary)
		}
	}
	g.follow([]byte{2, 0, 0, 0, 2})
	if !g.ended {
		t.Errorf("end-of-stream envelope not seen")
	}
}

// TestProxyStreamGVisorOOM: the OOM killer ends a gvisor box whole (its
// kernel is the host process it kills); the broken stream of the command
// ends with resource_exhausted saying so, and the error is marked as an
// OOM kill for the exec's record.
func TestProxyStreamGVisorOOM(t *testing.T) {
	f := newFixture(t, "", func(f *fixture, mc *sandbox.ManagerConfig) {
		f.env.Other.Addr = func(string) string { return "tcp://" + f.agent.Listener.Addr().String() }
		mc.Tiers = map[string]sandbox.TierConfig{
			sandbox.TierContainer: {Runtimes: []string{"fake"}, Default: "fake"},
			sandbox.TierGVisor:    {Runtimes: []string{"other"}, Default: "other"},
		}
	})
	if code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"g","tier":"gvisor","resources":{"memory_bytes":67108864}}`); code != 201 {
		t.Fatalf("create = %d %s", code, body)
	}
	rec, err := f.m.Get(t.Context(), "g")
	if err != nil || rec.TierOf() != sandbox.TierGVisor {
		t.Fatalf("Get(g) = %+v, %v; want a gvisor box", rec, err)
	}
	got := make(chan []byte, 1)
	go func() {
		resp, err := f.srv.Client().Post(f.srv.URL+"/v1/sandboxes/g/agent/connectstream", "application/connect+proto", nil)
		if err != nil {
			got <- nil
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- b
	}()
	<-f.agentReqs
	f.env.Other.Update(rec.ID, func(b *sandboxtest.Box) { b.OOMKills = 1 })
	f.abort <- struct{}{}
	envs, _ := envelopes(<-got)
	if len(envs) != 2 || envs[1].flags != connectFlagEndStream {
		t.Fatalf("stream = %+v; want the message, then an end-of-stream envelope", envs)
	}
	var end struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal([]byte(envs[1].msg), &end); err != nil {
		t.Fatal(err)
	}
	if want := "killed: out of memory (memory limit 64 MiB): in the gvisor tier the OOM killer ends the whole box"; end.Error.Code != "resource_exhausted" || !strings.Contains(end.Error.Message, want) {
		t.Errorf("end error %s %q; want resource_exhausted containing %q", end.Error.Code, end.Error.Message, want)
	}
	p := &agentProxy{m: f.m}
	if err := p.gvisorDied(t.Context(), rec.ID, io.ErrUnexpectedEOF); !errors.As(err, new(oomKill)) {
		t.Errorf("gvisorDied after an OOM kill = %v; want it marked as an OOM kill", err)
	}
}
