package agent

import (
	"encoding/json"
	"errors"
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

const maxInitBytes = 2 << 20

// postInit replaces the default environment, user and working directory of
// the commands started from now on.
func (s *Server) postInit(w http.ResponseWriter, r *http.Request) {
	var req InitRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxInitBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSONError(w, http.StatusBadRequest, errors.New("init: body must be {env, user, workdir}: "+err.Error()))
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

func writeJSONError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": err.Error()})
}
