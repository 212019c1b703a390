package e2bapi

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// newSandbox is E2B's NewSandbox (POST /sandboxes, /v2/sandboxes).
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             *networkConfig    `json:"network"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	MCP                 json.RawMessage   `json:"mcp"`
	IAM                 json.RawMessage   `json:"iam"`
	VolumeMounts        []volumeMount     `json:"volumeMounts"`
}

// volumeMount is E2B's SandboxVolumeMount: a named volume (corral volume
// create) at path.
type volumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

type autoResume struct {
	Enabled bool `json:"enabled"`
}

// networkConfig is E2B's SandboxNetworkConfig.
type networkConfig struct {
	AllowPublicTraffic *bool           `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string        `json:"allowOut,omitempty"`
	DenyOut            []string        `json:"denyOut,omitempty"`
	EgressProxy        json.RawMessage `json:"egressProxy,omitempty"`
	MaskRequestHost    string          `json:"maskRequestHost,omitempty"`
	Rules              json.RawMessage `json:"rules,omitempty"`
	HTTPSPorts         json.RawMessage `json:"httpsPorts,omitempty"`
}

// sandboxJSON is E2B's Sandbox: what create, connect and resume answer.
type sandboxJSON struct {
	TemplateID      string `json:"templateID"`
	SandboxID       string `json:"sandboxID"`
	ClientID        string `json:"clientID"`
	EnvdVersion     string `json:"envdVersion"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	// TrafficAccessToken is needed on requests to the sandbox's ports
	// when it was created with allowPublicTraffic false.
	TrafficAccessToken *string `json:"trafficAccessToken,omitempty"`
	Domain             *string `json:"domain"`
}

// listedSandbox is E2B's ListedSandbox.
type listedSandbox struct {
	TemplateID  string            `json:"templateID"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int               `json:"cpuCount"`
	MemoryMB    int64             `json:"memoryMB"`
	DiskSizeMB  int64             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata"`
	State       string            `json:"state"`
	EnvdVersion string            `json:"envdVersion"`
}

// sandboxDetail is E2B's SandboxDetail (GET /sandboxes/{id}).
type sandboxDetail struct {
	listedSandbox
	EnvdAccessToken     string         `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool          `json:"allowInternetAccess"`
	Domain              *string        `json:"domain"`
	Network             *networkConfig `json:"network,omitempty"`
	Lifecycle           lifecycle      `json:"lifecycle"`
	VolumeMounts        []volumeMount  `json:"volumeMounts,omitempty"`
}

// lifecycle is E2B's SandboxLifecycle.
type lifecycle struct {
	AutoResume bool   `json:"autoResume"`
	OnTimeout  string `json:"onTimeout"`
}

func (a *API) domain() *string {
	if a.cfg.Domain == "" {
		return nil
	}
	d := a.cfg.Domain
	return &d
}

func (a *API) sandboxOf(rec sandbox.Record) sandboxJSON {
	return sandboxJSON{
		TemplateID: rec.Image, SandboxID: rec.ID, ClientID: ClientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: rec.AccessToken, TrafficAccessToken: trafficToken(rec), Domain: a.domain(),
	}
}

// trafficToken is rec's traffic access token, nil when its ports are
// public.
func trafficToken(rec sandbox.Record) *string {
	if rec.E2B == nil || rec.E2B.TrafficToken == "" {
		return nil
	}
	t := rec.E2B.TrafficToken
	return &t
}

func listedOf(rec sandbox.Record) listedSandbox {
	md := rec.Labels
	if md == nil {
		md = map[string]string{}
	}
	return listedSandbox{
		TemplateID: rec.Image, SandboxID: rec.ID, ClientID: ClientID,
		StartedAt: rec.Created, EndAt: rec.Deadline,
		CPUCount: cpuCount(rec.Resources.CPUs), MemoryMB: mib(rec.Resources.MemoryBytes), DiskSizeMB: mib(rec.Resources.DiskBytes),
		Metadata: md, State: state(rec.State), EnvdVersion: EnvdVersion,
	}
}

func (a *API) detailOf(rec sandbox.Record) sandboxDetail {
	d := sandboxDetail{
		listedSandbox: listedOf(rec), EnvdAccessToken: rec.AccessToken, Domain: a.domain(),
		Lifecycle: lifecycle{OnTimeout: "kill"},
	}
	if rec.TimeoutAction == sandbox.TimeoutPause {
		d.Lifecycle.OnTimeout = "pause"
	}
	for _, v := range rec.Volumes {
		d.VolumeMounts = append(d.VolumeMounts, volumeMount{Name: v.Name, Path: v.Target})
	}
	if n := rec.Network; n != nil {
		switch n.Mode {
		case netpolicy.ModeFull:
			d.AllowInternetAccess = new(true)
		case netpolicy.ModeNone, "":
			d.AllowInternetAccess = new(false)
		case netpolicy.ModeAllowlist:
			d.Network = &networkConfig{AllowOut: n.Allow, DenyOut: []string{allTraffic}}
		}
	}
	if e := rec.E2B; e != nil {
		d.Lifecycle.AutoResume = e.AutoResume
		if e.TrafficToken != "" || e.MaskRequestHost != "" {
			if d.Network == nil {
				d.Network = &networkConfig{}
			}
			d.Network.AllowPublicTraffic = new(e.TrafficToken == "")
			d.Network.MaskRequestHost = e.MaskRequestHost
		}
	}
	return d
}

// allTraffic is E2B's deny-everything entry (the SDK's ALL_TRAFFIC).
const allTraffic = "0.0.0.0/0"

// networkOf maps E2B's egress settings onto Corral's policy, which is an
// allowlist: allowOut entries (domains, *.domain, IPs, CIDRs) are the
// allowlist. denyOut must hold 0.0.0.0/0 ("everything else", the
// allowlist's own meaning); its other entries (IPs or CIDRs, never names,
// as in E2B) are then implied, as allowOut takes precedence over them, but
// without 0.0.0.0/0 they would mean "everything but these", which an
// allowlist cannot say. allow_internet_access true is mode full, false mode
// none; neither (and no network) keeps Corral's default: the image's
// policy, else none.
func networkOf(req newSandbox) (*netpolicy.Settings, error) {
	n := req.Network
	if n != nil {
		switch {
		case present(n.EgressProxy):
			return nil, unsupported("network.egressProxy")
		case present(n.Rules):
			return nil, unsupported("network.rules")
		case present(n.HTTPSPorts):
			return nil, unsupported("network.httpsPorts")
		}
		all := slices.Contains(n.DenyOut, allTraffic)
		for _, d := range n.DenyOut {
			if err := denyEntry(d); err != nil {
				return nil, err
			}
			if !all {
				return nil, fmt.Errorf("network.denyOut %q without %q: Corral's egress policy is an allowlist, which cannot say \"everything but these\"; add %q to denyOut and list what the sandbox may reach in network.allowOut: %w",
					d, allTraffic, allTraffic, errdefs.ErrInvalidArgument)
			}
		}
		if len(n.AllowOut) > 0 {
			return &netpolicy.Settings{Mode: netpolicy.ModeAllowlist, Allow: slices.Clone(n.AllowOut)}, nil
		}
		if len(n.DenyOut) > 0 {
			return &netpolicy.Settings{Mode: netpolicy.ModeNone}, nil
		}
	}
	if req.AllowInternetAccess != nil {
		if *req.AllowInternetAccess {
			return &netpolicy.Settings{Mode: netpolicy.ModeFull}, nil
		}
		return &netpolicy.Settings{Mode: netpolicy.ModeNone}, nil
	}
	return nil, nil
}

// denyEntry checks a denyOut entry: an IP address or a CIDR block.
func denyEntry(d string) error {
	if _, err := netip.ParsePrefix(d); err == nil {
		return nil
	}
	if _, err := netip.ParseAddr(d); err == nil {
		return nil
	}
	return fmt.Errorf("network.denyOut %q must be an IP address or a CIDR block (domain names cannot be denied, as in E2B): %w", d, errdefs.ErrInvalidArgument)
}

func unsupported(field string) error {
	return fmt.Errorf("%s is not supported by Corral's E2B API yet (see docs/e2b.md): %w", field, errdefs.ErrInvalidArgument)
}

func present(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "[]" && s != "{}"
}

func (a *API) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	creq, err := createRequest(req)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rec, err := a.cfg.Manager.Create(r.Context(), creq)
	if errdefs.IsNotFound(err) && req.TemplateID == BaseTemplate {
		err = fmt.Errorf("template %s is not built on this daemon: run `corral e2b setup` once (it builds it from Debian packages and keeps it), or name another template: %w",
			BaseTemplate, err)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if err := a.startTemplate(r.Context(), rec, req.TemplateID); err != nil {
		// Nothing is left behind: the box goes, on a ctx of its own.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), removeTimeout)
		if derr := a.cfg.Manager.Delete(ctx, rec.ID, true); derr != nil {
			log.G(ctx).Warn("remove a sandbox whose template did not start", "sandbox", rec.ID, "error", derr)
		} else if a.cfg.Removed != nil {
			a.cfg.Removed(ctx, rec.ID)
		}
		cancel()
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.sandboxOf(rec))
}

// startTemplate starts the start command of the template of new sandbox
// rec (templateID, "NAME" or "NAME:TAG") as a managed command tagged
// "start", then runs its ready command until it exits 0, as E2B does
// before create returns. It gives up after Config.ReadyTimeout or when ctx ends
// (the client gave up).
func (a *API) startTemplate(ctx context.Context, rec sandbox.Record, templateID string) error {
	sc, err := a.templateStart(templateID)
	if err != nil || sc == (startCommands{}) {
		return err
	}
	if a.cfg.Commands == nil {
		return fmt.Errorf("template %s has a start command, which this daemon does not run: %w", templateID, errdefs.ErrNotImplemented)
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.ReadyTimeout)
	defer cancel()
	if sc.Start != "" {
		if _, err := a.cfg.Commands.Start(ctx, rec.AgentAddr, startTag, sc.Start); err != nil {
			return fmt.Errorf("template %s: start command: %w", templateID, err)
		}
	}
	if sc.Ready == "" {
		return nil
	}
	for {
		code, err := a.cfg.Commands.Run(ctx, rec.AgentAddr, sc.Ready)
		if err == nil && code == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("last exit code %d", code)
			}
			return fmt.Errorf("template %s: ready command %q did not exit 0 within %s (%v); the sandbox was removed: %w", templateID, sc.Ready, a.cfg.ReadyTimeout, err, errdefs.ErrUnavailable)
		case <-time.After(readyInterval):
		}
	}
}

// templateStart returns the start commands of the template templateID
// ("NAME" or "NAME:TAG"); none for an image not built through the API.
func (a *API) templateStart(templateID string) (startCommands, error) {
	if a.cfg.TemplateDir == "" {
		return startCommands{}, nil
	}
	name, tag, _ := strings.Cut(templateID, ":")
	rec, err := a.readRecord(name)
	if errdefs.IsNotFound(err) {
		return startCommands{}, nil
	}
	if err != nil {
		return startCommands{}, err
	}
	return rec.Start[cmp.Or(tag, "default")], nil
}

// createRequest maps E2B's NewSandbox onto a sandbox.CreateRequest:
// templateID is the image, envVars the environment, metadata the labels
// (with their rules), timeout the lifetime (0: none), autoPause the
// action at its end, and autoResume, allowPublicTraffic and
// maskRequestHost how the data plane and the ports answer
// (sandbox.E2BSettings).
func createRequest(req newSandbox) (sandbox.CreateRequest, error) {
	var c sandbox.CreateRequest
	if req.TemplateID == "" {
		return c, fmt.Errorf("templateID is required: name a Corral image (corral images): %w", errdefs.ErrInvalidArgument)
	}
	switch {
	case present(req.MCP):
		return c, unsupported("mcp")
	case present(req.IAM):
		return c, unsupported("iam")
	case req.AutoPauseMemory != nil && !*req.AutoPauseMemory:
		return c, fmt.Errorf("autoPauseMemory false is not supported yet: a sandbox paused at its timeout keeps its memory: %w", errdefs.ErrInvalidArgument)
	}
	timeout := DefaultTimeout
	if req.Timeout != nil {
		var err error
		if timeout, err = seconds("timeout", *req.Timeout, sandbox.MaxTimeout); err != nil {
			return c, err
		}
	}
	set, err := networkOf(req)
	if err != nil {
		return c, err
	}
	c = sandbox.CreateRequest{
		Image: req.TemplateID, Env: req.EnvVars, Labels: req.Metadata, Timeout: timeout, Network: set,
		E2B: &sandbox.E2BSettings{AutoResume: req.AutoResume != nil && req.AutoResume.Enabled},
	}
	if n := req.Network; n != nil {
		if n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic {
			c.E2B.TrafficToken = rand.Text()
		}
		if len(n.MaskRequestHost) > 253 || strings.ContainsAny(n.MaskRequestHost, " \t\r\n/") {
			return c, fmt.Errorf("network.maskRequestHost %q must be a host name, optionally with a port or ${PORT}: %w", n.MaskRequestHost, errdefs.ErrInvalidArgument)
		}
		c.E2B.MaskRequestHost = n.MaskRequestHost
	}
	for i, v := range req.VolumeMounts {
		if v.Name == "" || v.Path == "" {
			return sandbox.CreateRequest{}, fmt.Errorf("volumeMounts[%d]: name and path are required: %w", i, errdefs.ErrInvalidArgument)
		}
		c.Volumes = append(c.Volumes, sandbox.VolumeMount{Name: v.Name, Target: v.Path})
	}
	if req.AutoPause != nil && *req.AutoPause {
		c.TimeoutAction = sandbox.TimeoutPause
	}
	return c, nil
}

func (a *API) get(w http.ResponseWriter, r *http.Request) {
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a.detailOf(rec))
}

func (a *API) kill(w http.ResponseWriter, r *http.Request) {
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err == nil {
		err = a.cfg.Manager.Delete(r.Context(), rec.ID, true)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if a.cfg.Removed != nil {
		a.cfg.Removed(r.Context(), rec.ID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// timeoutRequest is E2B's SandboxTimeoutRequest and ConnectSandbox.
type timeoutRequest struct {
	Timeout *int64 `json:"timeout"`
	// Memory false asks connect to resume from the file system only.
	Memory *bool `json:"memory"`
}

func (a *API) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	if req.Timeout == nil {
		a.fail(w, r, fmt.Errorf("timeout is required (seconds from now): %w", errdefs.ErrInvalidArgument))
		return
	}
	d, err := seconds("timeout", *req.Timeout, sandbox.MaxTimeout)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if _, err := a.cfg.Manager.SetDeadline(r.Context(), r.PathValue("id"), a.cfg.Now().Add(d)); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) refresh(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Duration int64 `json:"duration"`
	}
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	d, err := seconds("duration", req.Duration, maxRefresh)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err == nil {
		err = a.extend(r, rec, cmp.Or(d, rec.Timeout))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// extend moves rec's deadline to now + d when that is later (a lifetime
// is only extended here), or sets it when the sandbox has a timeout but
// no deadline (paused, which clears it). A sandbox without a timeout
// keeps living until removed.
func (a *API) extend(r *http.Request, rec sandbox.Record, d time.Duration) error {
	if rec.Timeout == 0 && rec.Deadline.IsZero() || d == 0 {
		return nil
	}
	t := a.cfg.Now().Add(d)
	if !rec.Deadline.IsZero() && !t.After(rec.Deadline) {
		return nil
	}
	_, err := a.cfg.Manager.SetDeadline(r.Context(), rec.ID, t)
	return err
}

func (a *API) connectV1(w http.ResponseWriter, r *http.Request) { a.connect(w, r, false) }
func (a *API) connectV2(w http.ResponseWriter, r *http.Request) { a.connect(w, r, true) }

// connect answers the sandbox, resuming it when paused (201) or as it is
// when running (200), and extends its lifetime to the request's timeout.
func (a *API) connect(w http.ResponseWriter, r *http.Request, v2 bool) {
	var req timeoutRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	d := connectDefaultTimeout
	switch {
	case req.Timeout != nil:
		var err error
		if d, err = seconds("timeout", *req.Timeout, sandbox.MaxTimeout); err != nil {
			a.fail(w, r, err)
			return
		}
	case !v2:
		a.fail(w, r, fmt.Errorf("timeout is required (seconds from now): %w", errdefs.ErrInvalidArgument))
		return
	}
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if state(rec.State) == "paused" {
		if rec, err = a.cfg.Manager.Resume(r.Context(), rec.ID); err != nil {
			a.fail(w, r, err)
			return
		}
		status = http.StatusCreated
	} else if rec.State != sandbox.StateRunning {
		a.fail(w, r, fmt.Errorf("sandbox %s is %s: %w", rec.ID, rec.State, errdefs.ErrFailedPrecondition))
		return
	}
	if err := a.extend(r, rec, d); err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, status, a.sandboxOf(rec))
}

// pause pauses a running sandbox: frozen, it keeps its memory (E2B's
// default); with "memory": false it is suspended keeping only its files
// (resume starts it afresh). Either way its deadline is cleared until
// connect. 409 when it is not running.
func (a *API) pause(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if rec.State != sandbox.StateRunning {
		a.fail(w, r, fmt.Errorf("sandbox %s is %s; only a running sandbox can be paused: %w", rec.ID, rec.State, errdefs.ErrConflict))
		return
	}
	if req.Memory != nil && !*req.Memory {
		_, err = a.cfg.Manager.Suspend(r.Context(), rec.ID, sandbox.SuspendRequest{FilesystemOnly: true})
	} else {
		_, err = a.cfg.Manager.Pause(r.Context(), rec.ID)
	}
	if err == nil {
		_, err = a.cfg.Manager.SetDeadline(r.Context(), rec.ID, time.Time{})
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// resume is the deprecated POST /sandboxes/{id}/resume: 409 unless the
// sandbox is paused; the lifetime starts again from the request's timeout
// (15 s by default).
func (a *API) resume(w http.ResponseWriter, r *http.Request) {
	var req timeoutRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	d := DefaultTimeout
	if req.Timeout != nil {
		var err error
		if d, err = seconds("timeout", *req.Timeout, sandbox.MaxTimeout); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if state(rec.State) != "paused" {
		a.fail(w, r, fmt.Errorf("sandbox %s is %s, not paused: %w", rec.ID, rec.State, errdefs.ErrConflict))
		return
	}
	if rec, err = a.cfg.Manager.Resume(r.Context(), rec.ID); err == nil && d > 0 {
		rec, err = a.cfg.Manager.SetDeadline(r.Context(), rec.ID, a.cfg.Now().Add(d))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, a.sandboxOf(rec))
}

// listQuery is a parsed list request.
type listQuery struct {
	metadata     map[string]string
	states       []string
	template     string
	startedAfter time.Time
	desc         bool
	limit        int
	after        *cursor
}

// maxLimit bounds a page (E2B's bound and default).
const maxLimit = 100

func parseListQuery(q url.Values, v2 bool) (listQuery, error) {
	lq := listQuery{limit: maxLimit, desc: true}
	if m := q.Get("metadata"); m != "" {
		md, err := parseMetadata(m)
		if err != nil {
			return lq, err
		}
		lq.metadata = md
	}
	if !v2 {
		lq.states = []string{"running"}
		return lq, nil
	}
	for _, v := range q["state"] {
		for s := range strings.SplitSeq(v, ",") {
			if s != "running" && s != "paused" {
				return lq, fmt.Errorf("state %q must be running or paused: %w", s, errdefs.ErrInvalidArgument)
			}
			lq.states = append(lq.states, s)
		}
	}
	lq.template = q.Get("template")
	if s := q.Get("startedAfter"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return lq, fmt.Errorf("startedAfter %q must be an RFC 3339 time: %w", s, errdefs.ErrInvalidArgument)
		}
		lq.startedAfter = t
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.desc = false
	default:
		return lq, fmt.Errorf("order %q must be asc or desc: %w", o, errdefs.ErrInvalidArgument)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return lq, fmt.Errorf("limit %q must be between 1 and %d: %w", s, maxLimit, errdefs.ErrInvalidArgument)
		}
		lq.limit = n
	}
	if s := q.Get("nextToken"); s != "" {
		c, err := parseCursor(s)
		if err != nil {
			return lq, err
		}
		lq.after = &c
	}
	return lq, nil
}

// parseMetadata reads E2B's metadata filter: a query string of URL-encoded
// keys and values ("user=abc&app=prod").
func parseMetadata(s string) (map[string]string, error) {
	vals, err := url.ParseQuery(s)
	if err != nil {
		return nil, fmt.Errorf("metadata %q must be a query string (key=value&...): %w", s, errdefs.ErrInvalidArgument)
	}
	md := map[string]string{}
	for k, vs := range vals {
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("metadata key %q: %v: %w", k, err, errdefs.ErrInvalidArgument)
		}
		for _, v := range vs {
			val, err := url.QueryUnescape(v)
			if err != nil {
				return nil, fmt.Errorf("metadata value of %q: %v: %w", key, err, errdefs.ErrInvalidArgument)
			}
			md[key] = val
		}
	}
	return md, nil
}

// cursor is where a page ends: the start time and ID of its last
// sandbox, the list's sort key.
type cursor struct {
	started time.Time
	id      string
}

func (c cursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.started.Format(time.RFC3339Nano) + " " + c.id))
}

func parseCursor(s string) (cursor, error) {
	bad := fmt.Errorf("nextToken %q is not one this server gave: %w", s, errdefs.ErrInvalidArgument)
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, bad
	}
	ts, id, ok := strings.Cut(string(b), " ")
	t, err := time.Parse(time.RFC3339Nano, ts)
	if !ok || err != nil || id == "" {
		return cursor{}, bad
	}
	return cursor{started: t, id: id}, nil
}

// compare orders sandboxes by start time, then ID.
func (c cursor) compare(rec sandbox.Record) int {
	if n := c.started.Compare(rec.Created); n != 0 {
		return n
	}
	return strings.Compare(c.id, rec.ID)
}

func (lq listQuery) match(rec sandbox.Record) bool {
	st := state(rec.State)
	if st != "running" && st != "paused" {
		return false
	}
	if len(lq.states) > 0 && !slices.Contains(lq.states, st) {
		return false
	}
	if lq.template != "" && rec.Image != lq.template {
		return false
	}
	if !lq.startedAfter.IsZero() && rec.Created.Before(lq.startedAfter) {
		return false
	}
	for k, v := range lq.metadata {
		if got, ok := rec.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (a *API) list(w http.ResponseWriter, r *http.Request, v2 bool) {
	lq, err := parseListQuery(r.URL.Query(), v2)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	recs, err := a.cfg.Manager.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	recs = slices.DeleteFunc(recs, func(rec sandbox.Record) bool { return !lq.match(rec) })
	slices.SortFunc(recs, func(x, y sandbox.Record) int {
		n := cursor{x.Created, x.ID}.compare(y)
		if lq.desc {
			return -n
		}
		return n
	})
	if lq.after != nil {
		i := 0
		for i < len(recs) {
			n := lq.after.compare(recs[i]) // < 0: recs[i] sorts after the cursor (asc)
			if lq.desc && n > 0 || !lq.desc && n < 0 {
				break
			}
			i++
		}
		recs = recs[i:]
	}
	out := make([]listedSandbox, 0, min(len(recs), lq.limit))
	for i, rec := range recs {
		if v2 && i == lq.limit {
			last := recs[i-1]
			w.Header().Set("X-Next-Token", cursor{last.Created, last.ID}.String())
			break
		}
		out = append(out, listedOf(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) listV1(w http.ResponseWriter, r *http.Request) { a.list(w, r, false) }
func (a *API) listV2(w http.ResponseWriter, r *http.Request) { a.list(w, r, true) }
