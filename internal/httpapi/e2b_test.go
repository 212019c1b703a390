package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

func TestAPIKeyHeader(t *testing.T) {
	f := newFixture(t, "tok3n")
	for _, tc := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"api key", []string{APIKeyHeader, "tok3n"}, http.StatusOK},
		{"wrong api key", []string{APIKeyHeader, "tok3"}, http.StatusUnauthorized},
		{"bearer", []string{"Authorization", "Bearer tok3n"}, http.StatusOK},
		{"api key as bearer", []string{"Authorization", "Bearer " + "x", APIKeyHeader, "tok3n"}, http.StatusOK},
		{"sandbox header on a control route", []string{SandboxIDHeader, "x"}, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := f.do(t, "GET", "/v1/sandboxes", "", tc.hdr...); code != tc.want {
				t.Errorf("GET /v1/sandboxes with %q = %d %s; want %d", tc.hdr, code, body, tc.want)
			}
		})
	}
}

// TestE2BDataPlane checks requests routed by E2b-Sandbox-Id without the
// daemon's token: the sandbox's access token authenticates them, and they
// behave as E2B's edge does.
func TestE2BDataPlane(t *testing.T) {
	f := newFixture(t, "tok3n")
	auth := []string{"Authorization", "Bearer tok3n"}
	code, body := f.do(t, "POST", "/v1/sandboxes", `{"name":"e2b"}`, auth...)
	if code != http.StatusCreated {
		t.Fatalf("create = %d %s", code, body)
	}
	var sb rest.Sandbox
	_ = json.Unmarshal([]byte(body), &sb)
	rec, err := f.m.Get(t.Context(), sb.ID)
	if err != nil || rec.AccessToken == "" {
		t.Fatalf("Get = %+v, %v; want an access token", rec, err)
	}
	if strings.Contains(body, rec.AccessToken) {
		t.Errorf("the /v1 API shows the access token: %s", body)
	}
	tok := []string{SandboxIDHeader, sb.ID, AccessTokenHeader, rec.AccessToken}

	// With the token: proxied; neither token reaches the box; the Basic
	// user does.
	code, body = f.do(t, "GET", "/files?path=a", "", append(tok, "Authorization", "Basic dXNlcjo=")...)
	if code != http.StatusOK || body != "agent ok" {
		t.Fatalf("GET /files with the access token = %d %q; want the agent's answer", code, body)
	}
	if got, want := <-f.agentReqs, `HTTP/1.1 GET /files?path=a auth="Basic dXNlcjo=" sbx="" body=""`; got != want {
		t.Errorf("agent got %s; want %s", got, want)
	}
	// The daemon's token as an API key is not handed to the box either.
	if code, body := f.do(t, "GET", "/health", "", SandboxIDHeader, sb.ID, APIKeyHeader, "tok3n"); code != http.StatusOK {
		t.Fatalf("GET /health with the API key = %d %s", code, body)
	}
	if got, want := <-f.agentReqs, `HTTP/1.1 GET /health? auth="" sbx="" body=""`; got != want {
		t.Errorf("agent got %s; want %s", got, want)
	}

	for _, tc := range []struct {
		name, path string
		hdr        []string
		want       int
	}{
		{"no token", "/files", []string{SandboxIDHeader, sb.ID}, http.StatusUnauthorized},
		{"wrong token", "/process.Process/List", []string{SandboxIDHeader, sb.ID, AccessTokenHeader, rec.AccessToken + "x"}, http.StatusUnauthorized},
		{"name", "/files", []string{SandboxIDHeader, "e2b", AccessTokenHeader, rec.AccessToken}, http.StatusBadGateway},
		{"ID prefix", "/files", []string{SandboxIDHeader, sb.ID[:4], AccessTokenHeader, rec.AccessToken}, http.StatusBadGateway},
		{"unknown", "/health", []string{SandboxIDHeader, "0123456789ab"}, http.StatusBadGateway},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, "GET", tc.path, "", tc.hdr...)
			var e struct {
				Code    int    `json:"code"`
				Message string `json:"message"`
			}
			if err := json.Unmarshal([]byte(body), &e); code != tc.want || err != nil || e.Code != tc.want || e.Message == "" {
				t.Errorf("GET %s with %q = %d %s; want %d with E2B's error body", tc.path, tc.hdr, code, body, tc.want)
			}
		})
	}

	// A paused box answers 502 and stays paused: only connect resumes it.
	if _, err := f.m.Pause(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, body := f.do(t, "GET", "/health", "", tok...); code != http.StatusBadGateway {
		t.Errorf("GET /health of a paused box = %d %s; want 502", code, body)
	}
	if b, _ := f.env.Runtime.Get(sb.ID); b.Status != sandbox.StatusPaused {
		t.Errorf("box is %s after a request with its access token; want still paused", b.Status)
	}
	// With the daemon's token, Corral's own semantics: auto-resume.
	if code, body := f.do(t, "GET", "/health", "", append([]string{SandboxIDHeader, sb.ID}, auth...)...); code != http.StatusOK {
		t.Errorf("GET /health of a paused box with the daemon's token = %d %s; want 200", code, body)
	}
	<-f.agentReqs
}

// TestFileSignature checks the signature against ones the E2B JS SDK
// (getSignature, e2b 2.51.0) made for the same inputs.
func TestFileSignature(t *testing.T) {
	for _, tc := range []struct {
		query, method, want string
	}{
		{"path=%2Fhome%2Fuser%2Fa.txt", "GET", "v1_Zkbb3914oLJLvMBzCAHQhm2ydBLxbSx2eQUR/kLdvIY"},
		{"path=%2Ftmp%2Fx&username=root", "POST", "v1_1pEX9gdM/CvT96zaKPwWrW1pNu8+fG99yAK6cXoJirE"},
	} {
		q, _ := url.ParseQuery(tc.query)
		if got := fileSignature(q, tc.method, "tok"); got != tc.want {
			t.Errorf("signature of %s %s = %s; want %s", tc.method, tc.query, got, tc.want)
		}
	}
}

// TestE2BSignedURLs checks E2B's signed file URLs: a signature made with
// a sandbox's access token stands for the token on GET and POST /files,
// for that path, user and operation only, until it expires; without
// E2b-Sandbox-Id the sandbox is the one whose token made it.
func TestE2BSignedURLs(t *testing.T) {
	f := newFixture(t, "tok3n")
	auth := []string{"Authorization", "Bearer tok3n"}
	// The second box has an agent of its own, to tell where requests go.
	two := make(chan string, 16)
	agent2 := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		two <- r.Method + " " + r.URL.Path
		fmt.Fprint(w, "agent two")
	}))
	t.Cleanup(agent2.Close)
	var recs []sandbox.Record
	for i := range 2 {
		if i == 1 {
			f.env.Runtime.Addr = func(string) string { return "tcp://" + agent2.Listener.Addr().String() }
		}
		code, body := f.do(t, "POST", "/v1/sandboxes", `{}`, auth...)
		var sb rest.Sandbox
		if err := json.Unmarshal([]byte(body), &sb); code != http.StatusCreated || err != nil {
			t.Fatalf("create = %d %s", code, body)
		}
		rec, err := f.m.Get(t.Context(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	rec := recs[1]
	sign := func(method, query, token string) string {
		q, _ := url.ParseQuery(query)
		q.Set("signature", fileSignature(q, method, token))
		return "/files?" + q.Encode()
	}
	future := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	past := strconv.FormatInt(time.Now().Add(-time.Minute).Unix(), 10)

	for _, tc := range []struct {
		name, method, path string
		hdr                []string
	}{
		{"read, no sandbox header", "GET", sign("GET", "path=/a", rec.AccessToken), nil},
		{"write with a user", "POST", sign("POST", "path=/a&username=root", rec.AccessToken), nil},
		{"with the sandbox header", "GET", sign("GET", "path=/a", rec.AccessToken), []string{SandboxIDHeader, rec.ID}},
		{"not expired", "GET", sign("GET", "path=/a&signature_expiration="+future, rec.AccessToken), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, "", tc.hdr...)
			if code != http.StatusOK || body != "agent two" {
				t.Fatalf("%s %s = %d %s; want the answer of the agent of %s, whose token signed it", tc.method, tc.path, code, body, rec.ID)
			}
			if got := <-two; got != tc.method+" /files" {
				t.Errorf("agent got %s", got)
			}
		})
	}
	for _, tc := range []struct {
		name, method, path string
		hdr                []string
		want               string
	}{
		{"another path", "GET", strings.Replace(sign("GET", "path=/a", rec.AccessToken), "%2Fa", "%2Fb", 1), nil, "invalid signature"},
		{"another user", "GET", sign("GET", "path=/a", rec.AccessToken) + "&username=root", nil, "invalid signature"},
		{"write with a read signature", "POST", sign("GET", "path=/a", rec.AccessToken), nil, "invalid signature"},
		{"expired", "GET", sign("GET", "path=/a&signature_expiration="+past, rec.AccessToken), nil, "expired"},
		{"expiration changed", "GET", strings.Replace(sign("GET", "path=/a&signature_expiration="+past, rec.AccessToken), past, future, 1), nil, "invalid signature"},
		{"another sandbox's header", "GET", sign("GET", "path=/a", rec.AccessToken), []string{SandboxIDHeader, recs[0].ID}, "invalid signature"},
		{"a made-up token", "GET", sign("GET", "path=/a", "guess"), nil, "invalid signature"},
		{"a route other than /files", "GET", strings.Replace(sign("GET", "path=/a", rec.AccessToken), "/files", "/v1/sandboxes", 1), nil, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := f.do(t, tc.method, tc.path, "", tc.hdr...)
			if code != http.StatusUnauthorized || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s = %d %s; want 401 saying %q", tc.method, tc.path, code, body, tc.want)
			}
		})
	}
}

// TestRequireTokenSignedUpload: a PUT of a template file URL signed with
// the daemon's token passes without the token, until it expires, for
// that path only.
func TestRequireTokenSignedUpload(t *testing.T) {
	const token = "s3cret"
	h := RequireToken(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	const p = "/templates/t/files/abc"
	good := p + "?" + SignUpload(p, time.Now().Add(time.Hour), token)
	for _, tc := range []struct {
		name, method, target string
		want                 int
	}{
		{"signed", http.MethodPut, good, http.StatusOK},
		{"another path", http.MethodPut, "/templates/t/files/abd?" + SignUpload(p, time.Now().Add(time.Hour), token), http.StatusUnauthorized},
		{"another method", http.MethodGet, good, http.StatusUnauthorized},
		{"expired", http.MethodPut, p + "?" + SignUpload(p, time.Now().Add(-time.Minute), token), http.StatusUnauthorized},
		{"another token", http.MethodPut, p + "?" + SignUpload(p, time.Now().Add(time.Hour), "other"), http.StatusUnauthorized},
		{"unsigned", http.MethodPut, p, http.StatusUnauthorized},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.target, nil))
		if rec.Code != tc.want {
			t.Errorf("%s: %s %s = %d; want %d", tc.name, tc.method, tc.target, rec.Code, tc.want)
		}
	}
}
