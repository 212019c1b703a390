package agent

import (
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// TestInitEnvdBody checks POST /init with envd's body (what E2B's
// orchestrator sends): envVars are added to the defaults, defaultUser and
// defaultWorkdir replace them, the orchestrator's fields are ignored and
// what Corral cannot do is refused, leaving the defaults as they were.
func TestInitEnvdBody(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	mustWrite(t, passwd, "tester:x:0:0::/home/tester:/bin/sh\nroot:x:0:0::/root:/bin/sh\n")
	s, err := New(testutil.Context(t), Config{PasswdPath: passwd, GroupPath: passwd, Env: []string{"A=1", "B=2"}, DefaultUser: "tester"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	post := func(body string) (int, string) {
		t.Helper()
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/init", strings.NewReader(body)))
		return rec.Code, rec.Body.String()
	}
	code, out := post(`{"envVars":{"B":"two","C":"3"},"defaultWorkdir":"/srv","accessToken":"t","timestamp":"2026-01-02T03:04:05Z","hyperloopIP":"10.0.0.1","lifecycleID":"x","volumeMounts":[]}`)
	if code != http.StatusNoContent {
		t.Fatalf("POST /init (envd) = %d %s; want 204", code, out)
	}
	got := s.live.apply(s.cfg)
	if want := []string{"A=1", "B=two", "C=3"}; !slices.Equal(got.Env, want) || got.Workdir != "/srv" || got.DefaultUser != "tester" {
		t.Fatalf("defaults after envd's /init = env %q, workdir %q, user %q; want %q, /srv, tester", got.Env, got.Workdir, got.DefaultUser, want)
	}
	// A second call adds to the first.
	if code, out := post(`{"envVars":{"D":"4"},"defaultUser":"root"}`); code != http.StatusNoContent {
		t.Fatalf("POST /init (envd) again = %d %s; want 204", code, out)
	}
	got = s.live.apply(s.cfg)
	if want := []string{"A=1", "B=two", "C=3", "D=4"}; !slices.Equal(got.Env, want) || got.Workdir != "/srv" || got.DefaultUser != "root" {
		t.Fatalf("defaults after a second /init = env %q, workdir %q, user %q; want %q, /srv, root", got.Env, got.Workdir, got.DefaultUser, want)
	}

	for _, tc := range []struct{ name, body, want string }{
		{"ca bundle", `{"caBundle":"-----BEGIN CERTIFICATE-----"}`, "caBundle"},
		{"volumes", `{"volumeMounts":[{"name":"v","path":"/v"}]}`, "volumeMounts"},
		{"mixed", `{"envVars":{"X":"1"},"env":["Y=2"]}`, "mixes"},
		{"bad key", `{"envVars":{"X=Y":"1"}}`, "envVars key"},
		{"unknown user", `{"defaultUser":"nobody-here"}`, "user"},
		{"relative workdir", `{"defaultWorkdir":"srv"}`, "workdir"},
		{"unknown field", `{"envVars":{},"hyperloop":"x"}`, "hyperloop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := post(tc.body)
			if code != http.StatusBadRequest || !strings.Contains(out, tc.want) {
				t.Errorf("POST /init %s = %d %s; want 400 naming %s", tc.body, code, out, tc.want)
			}
			if got := s.live.apply(s.cfg); len(got.Env) != 4 || got.DefaultUser != "root" {
				t.Errorf("a refused /init changed the defaults: %+v", got)
			}
		})
	}

	// Corral's own body still replaces the defaults whole.
	if code, out := post(`{"env":["Z=26"],"workdir":"/w"}`); code != http.StatusNoContent {
		t.Fatalf("POST /init (Corral) = %d %s; want 204", code, out)
	}
	if got := s.live.apply(s.cfg); !slices.Equal(got.Env, []string{"Z=26"}) || got.Workdir != "/w" || got.DefaultUser != "" {
		t.Errorf("defaults after Corral's /init = %+v; want env [Z=26], workdir /w, the agent's user", got)
	}
}
