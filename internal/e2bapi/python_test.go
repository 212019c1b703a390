package e2bapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// The Python SDK (e2b 2.45, which cannot be installed here) drives the
// control plane with requests that differ from the JavaScript SDK's:
// these are those requests, byte for byte as its generated client and
// sandbox_api.py build them, and the answers it reads.

// pythonRequired are the keys the Python SDK's generated models read with
// d.pop(key) (a KeyError when missing, where the JS SDK reads undefined),
// by model.
var pythonRequired = map[string][]string{
	"Sandbox":       {"templateID", "sandboxID", "clientID", "envdVersion"},
	"SandboxDetail": {"templateID", "sandboxID", "clientID", "startedAt", "endAt", "envdVersion", "cpuCount", "memoryMB", "diskSizeMB", "state"},
	"ListedSandbox": {"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"},
}

// hasKeys checks that the JSON object body has every key the Python
// model requires.
func hasKeys(t *testing.T, model, body string) {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("%s: %v in %s", model, err, body)
	}
	for _, k := range pythonRequired[model] {
		if _, ok := m[k]; !ok {
			t.Errorf("%s %s lacks %q, which the Python SDK requires", model, body, k)
		}
	}
}

// TestPythonSDKControlPlane sends the Python SDK's control-plane requests
// where they differ from the JS SDK's (docs/e2b.md lists them).
func TestPythonSDKControlPlane(t *testing.T) {
	f := newFixture(t)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		code, out, _ := f.do(t, method, path, body)
		return code, out
	}

	// Sandbox.create(): the v1 route, with secure and allow_internet_access
	// always sent (True by default), empty metadata and envVars, and no
	// lifecycle fields unless set.
	code, out := do("POST", "/sandboxes", `{"templateID": "host", "timeout": 300, "secure": true, "allow_internet_access": true, "metadata": {"user": "ann b/c"}, "envVars": {}}`)
	if code != http.StatusCreated {
		t.Fatalf("create as the Python SDK = %d %s; want 201", code, out)
	}
	var sb sandboxJSON
	if err := json.Unmarshal([]byte(out), &sb); err != nil || sb.SandboxID == "" || sb.EnvdVersion != EnvdVersion || sb.EnvdAccessToken == "" {
		t.Fatalf("create answer %s; want sandboxID, envdVersion and envdAccessToken", out)
	}
	hasKeys(t, "Sandbox", out)
	_, detail := do("GET", "/sandboxes/"+sb.SandboxID, "")
	hasKeys(t, "SandboxDetail", detail)
	if n := f.m.created.Network; n == nil || n.Mode != netpolicy.ModeFull {
		t.Errorf("create with allow_internet_access true: network %+v; want mode full (E2B's default, which the Python SDK always sends)", n)
	}
	// lifecycle={"on_timeout": "pause", "auto_resume": False}: autoResume
	// is sent, disabled.
	if code, out := do("POST", "/sandboxes", `{"templateID": "host", "timeout": 300, "autoPause": true, "autoResume": {"enabled": false}, "secure": true, "allow_internet_access": true, "metadata": {}, "envVars": {}}`); code != http.StatusCreated {
		t.Errorf("create with autoResume disabled = %d %s; want 201", code, out)
	}

	// Sandbox.list(query=SandboxQuery(metadata=..., state=[...],
	// started_after=...)): metadata is each key and value quote()d (which
	// keeps '/') and then urlencode()d; state is comma-joined; started_after
	// is isoformat() of an aware time (an offset, microseconds); limit is
	// always sent.
	q := url.Values{
		// quote("ann b/c") is "ann%20b/c"; urlencode makes it
		// "ann%2520b%2Fc" (the JS SDK's encodeURIComponent also quotes '/').
		"metadata":     {"user=ann%2520b%2Fc"},
		"state":        {"running,paused"},
		"startedAfter": {"2000-01-02T05:04:05.123456+02:00"},
		"limit":        {"100"},
	}
	code, out = do("GET", "/v2/sandboxes?"+q.Encode(), "")
	var listed []listedSandbox
	if err := json.Unmarshal([]byte(out), &listed); err != nil || code != http.StatusOK {
		t.Fatalf("list as the Python SDK = %d %s", code, out)
	}
	var raw []json.RawMessage
	_ = json.Unmarshal([]byte(out), &raw)
	for _, r := range raw {
		hasKeys(t, "ListedSandbox", string(r))
	}
	if !slices.ContainsFunc(listed, func(s listedSandbox) bool { return s.SandboxID == sb.SandboxID }) || len(listed) != 1 {
		t.Errorf("list by the Python SDK's metadata filter = %s; want %s only", out, sb.SandboxID)
	}

	// Sandbox.connect(): the v1 route, timeout always sent (300 by default).
	if code, out := do("POST", "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout": 300}`); code != http.StatusOK {
		t.Errorf("connect as the Python SDK = %d %s; want 200", code, out)
	}
	// set_timeout(), then pause(keep_memory=...): memory is always sent.
	if code, out := do("POST", "/sandboxes/"+sb.SandboxID+"/timeout", `{"timeout": 30}`); code != http.StatusNoContent {
		t.Errorf("set_timeout = %d %s; want 204", code, out)
	}
	if code, out := do("POST", "/sandboxes/"+sb.SandboxID+"/pause", `{"memory": true}`); code != http.StatusNoContent {
		t.Errorf("pause(keep_memory=True) = %d %s; want 204", code, out)
	}
	if rec, _ := f.m.Get(t.Context(), sb.SandboxID); rec.State != sandbox.StatePaused {
		t.Errorf("state after pause = %s; want paused", rec.State)
	}
	if code, out := do("POST", "/sandboxes/"+sb.SandboxID+"/connect", `{"timeout": 300}`); code != http.StatusCreated {
		t.Errorf("connect to a paused sandbox as the Python SDK = %d %s; want 201", code, out)
	}
	if code, out := do("DELETE", "/sandboxes/"+sb.SandboxID, ""); code != http.StatusNoContent {
		t.Errorf("kill = %d %s; want 204", code, out)
	}
}

// TestPythonSDKTemplateUpload: the Python SDK PUTs a COPY step's files to
// the upload link's url with no header at all (it ignores the answer's
// headers, which the JS SDK applies), so the url itself must carry the
// credential: a signature made with the X-API-KEY the link was asked with.
func TestPythonSDKTemplateUpload(t *testing.T) {
	f, _, _ := newTemplateFixture(t)
	if code, out, _ := f.do(t, "POST", "/v3/templates", `{"name": "py-tpl", "cpuCount": 2, "memoryMB": 1024}`); code != http.StatusAccepted {
		t.Fatalf("POST /v3/templates = %d %s", code, out)
	}
	req, err := http.NewRequest("GET", f.srv.URL+"/templates/py-tpl/files/abc123", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-KEY", "daemon-token")
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var link fileUpload
	if err := json.NewDecoder(resp.Body).Decode(&link); err != nil || resp.StatusCode != http.StatusCreated || link.URL == nil {
		t.Fatalf("upload link = %d %+v, %v; want 201 with a url", resp.StatusCode, link, err)
	}
	u, err := url.Parse(*link.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Path != "/templates/py-tpl/files/abc123" || q.Get("signature") == "" || q.Get("expires") == "" {
		t.Errorf("upload url %s; want this route signed (signature, expires) for a PUT without credentials", *link.URL)
	}
}
