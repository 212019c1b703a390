package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
)

// liveDefaults are the command defaults set after start through POST /init
// (a warm pool's box handed out for a request with its own environment).
// They replace Config's Env, DefaultUser and Workdir when set.
type liveDefaults struct {
	mu sync.RWMutex
	// set is true once /init was called; guarded by mu.
	set bool
	// env, user and workdir replace the Config's; guarded by mu.
	env     []string
	user    string
	workdir string
}

// apply returns cfg with the live defaults in place.
func (d *liveDefaults) apply(cfg Config) Config {
	if d == nil {
		return cfg
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.set {
		cfg.Env, cfg.DefaultUser, cfg.Workdir = slices.Clone(d.env), d.user, d.workdir
	}
	return cfg
}

// InitRequest is the body of POST /init.
type InitRequest struct {
	// Env is the complete default environment of commands ("K=V").
	Env []string `json:"env"`
	// User is the default user ("" = root).
	User string `json:"user,omitempty"`
	// Workdir is the default working directory ("" = the user's home).
	Workdir string `json:"workdir,omitempty"`
}

// envdInit is the body of envd's POST /init, which E2B's orchestrator
// sends; the agent takes it too. envVars are added to the default
// environment (replacing variables of the same name), defaultUser and
// defaultWorkdir replace the defaults when not empty. accessToken,
// timestamp, hyperloopIP and lifecycleID are accepted and ignored: the
// daemon checks the box's access token before a request reaches the
// agent, a box shares the host's clock, and the rest belongs to E2B's
// orchestrator. caBundle and volumeMounts are refused: Corral installs
// its own CA (network secrets) and has no volumes.
type envdInit struct {
	EnvVars        map[string]string `json:"envVars"`
	DefaultUser    string            `json:"defaultUser"`
	DefaultWorkdir string            `json:"defaultWorkdir"`
	AccessToken    json.RawMessage   `json:"accessToken"`
	Timestamp      json.RawMessage   `json:"timestamp"`
	HyperloopIP    json.RawMessage   `json:"hyperloopIP"`
	LifecycleID    json.RawMessage   `json:"lifecycleID"`
	CABundle       string            `json:"caBundle"`
	VolumeMounts   json.RawMessage   `json:"volumeMounts"`
}

// initBody is either form of POST /init's body: Corral's own (the
// daemon's, InitRequest) or envd's (envdInit).
type initBody struct {
	InitRequest
	envdInit
}

const maxInitBytes = 2 << 20

// postInit replaces the default environment, user and working directory of
// the commands started from now on (Corral's body), or adds to them
// (envd's body).
func (s *Server) postInit(w http.ResponseWriter, r *http.Request) {
	var body initBody
	dec := json.NewDecoder(io.LimitReader(r.Body, maxInitBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		writeJSONError(w, http.StatusBadRequest, errors.New("init: body must be {env, user, workdir} or envd's {envVars, defaultUser, defaultWorkdir, ...}: "+err.Error()))
		return
	}
	req, err := s.initRequest(body)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err)
		return
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ContainsRune(kv, 0) {
			writeJSONError(w, http.StatusBadRequest, errors.New("init: env entries must be KEY=VALUE without NUL"))
			return
		}
	}
	if wd := req.Workdir; wd != "" && (!path.IsAbs(wd) || strings.ContainsRune(wd, 0)) {
		writeJSONError(w, http.StatusBadRequest, errors.New("init: workdir must be an absolute path"))
		return
	}
	if req.User != "" {
		if _, _, err := resolveUser(s.cfg, req.User); err != nil {
			writeJSONError(w, http.StatusBadRequest, errors.New("init: user: "+err.Error()))
			return
		}
	}
	s.live.mu.Lock()
	s.live.set, s.live.env, s.live.user, s.live.workdir = true, slices.Clone(req.Env), req.User, req.Workdir
	s.live.mu.Unlock()
	if err := s.state.update(func(st *agentState) { st.Defaults = &req }); err != nil {
		// The defaults hold for this agent, not for the next one.
		writeJSONError(w, http.StatusInternalServerError, errors.New("init: keep the defaults for the next agent: "+err.Error()))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// initRequest returns the complete defaults a body asks for: Corral's
// as they are, envd's applied to the current defaults. A body that mixes
// the two forms is refused.
func (s *Server) initRequest(b initBody) (InitRequest, error) {
	e := b.envdInit
	envd := e.EnvVars != nil || e.DefaultUser != "" || e.DefaultWorkdir != "" || e.AccessToken != nil || e.Timestamp != nil ||
		e.HyperloopIP != nil || e.LifecycleID != nil || e.CABundle != "" || e.VolumeMounts != nil
	if !envd {
		return b.InitRequest, nil
	}
	if b.Env != nil || b.User != "" || b.Workdir != "" {
		return InitRequest{}, errors.New("init: body mixes Corral's fields (env, user, workdir) with envd's (envVars, defaultUser, defaultWorkdir, ...): send one form")
	}
	switch {
	case e.CABundle != "":
		return InitRequest{}, errors.New("init: caBundle is not supported: Corral installs its own CA in boxes whose network policy binds secrets")
	case len(e.VolumeMounts) > 0 && string(e.VolumeMounts) != "null" && string(e.VolumeMounts) != "[]":
		return InitRequest{}, errors.New("init: volumeMounts are not supported: Corral has no volumes")
	}
	for k := range e.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return InitRequest{}, fmt.Errorf("init: envVars key %q must be a non-empty name without '=' or NUL", k)
		}
	}
	cur := s.live.apply(s.cfg)
	req := InitRequest{Env: mergeEnv(defaultEnv(cur), e.EnvVars), User: cur.DefaultUser, Workdir: cur.Workdir}
	if e.DefaultUser != "" {
		req.User = e.DefaultUser
	}
	if e.DefaultWorkdir != "" {
		req.Workdir = e.DefaultWorkdir
	}
	return req, nil
}

func writeJSONError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": err.Error()})
}
