package httpapi

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/tunnel"
)

// EnvdPort is the port of envd (the box's agent) in E2B's host names,
// "49983-{id}.{domain}".
const EnvdPort = 49983

// TrafficTokenHeader carries a sandbox's traffic access token on requests
// to its ports by host name, when E2B's allowPublicTraffic is false.
const TrafficTokenHeader = "E2B-Traffic-Access-Token"

// byHost routes the requests of E2B's domain mode, whose Host is
// "{port}-{id}.{E2BDomain}", before next sees them: port 49983 to the
// box's agent, any other to that port in the box. auth tells requests
// with the daemon's token (every request on the unix socket, where the
// socket's mode is the access control). Other hosts go to next.
func (s *Server) byHost(auth daemonAuth, next http.Handler) http.Handler {
	if s.cfg.E2BDomain == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, port, ok := tunnel.ParseHost(r.Host, s.cfg.E2BDomain)
		if !ok {
			next.ServeHTTP(w, r)
			return
		}
		s.serveDomain(w, r, auth, id, port)
	})
}

// daemonAuth tells the requests that carry the daemon's token.
type daemonAuth struct {
	// token is the daemon's token; any makes every request the
	// daemon's (the unix socket), and then token is "".
	token string
	any   bool
}

// ok reports whether r carries the token, as "Authorization: Bearer
// <token>" or X-API-KEY, compared in constant time; an empty token
// matches nothing.
func (a daemonAuth) ok(r *http.Request) bool {
	return a.any || a.bearer(r) || a.token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(APIKeyHeader)), []byte(a.token)) == 1
}

// bearer reports whether r's Authorization header is the token.
func (a daemonAuth) bearer(r *http.Request) bool {
	return a.token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+a.token)) == 1
}

// serveDomain serves a request for port in sandbox id by host name, with
// E2B's rules: envd's port needs the sandbox's access token (or a signed
// file URL, or the daemon's token); the ports of a sandbox made through
// E2B's API are public unless it was created with allowPublicTraffic
// false (then E2B-Traffic-Access-Token must carry its traffic token, else
// 403); the ports of other sandboxes need the daemon's token, as Corral's
// own ports are private until exposed. A sandbox that is gone answers 502,
// as E2B's edge does.
func (s *Server) serveDomain(w http.ResponseWriter, r *http.Request, auth daemonAuth, id string, port int) {
	rec, err := s.cfg.Manager.Get(r.Context(), id)
	if err != nil && !errdefs.IsNotFound(err) {
		writeError(r.Context(), w, err)
		return
	}
	if err != nil || rec.ID != id {
		writeE2BError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s not found", id))
		return
	}
	if port == EnvdPort {
		s.serveDomainEnvd(w, r, auth.ok(r), rec)
		return
	}
	switch {
	case rec.E2B == nil:
		if !auth.ok(r) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="corral"`)
			writeE2BError(w, http.StatusUnauthorized, fmt.Sprintf("port %d of sandbox %s: the sandbox was not made through E2B's API, so its ports need the daemon's token (Authorization: Bearer or %s)", port, id, APIKeyHeader))
			return
		}
	case rec.E2B.TrafficToken != "":
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(TrafficTokenHeader)), []byte(rec.E2B.TrafficToken)) != 1 {
			writeE2BError(w, http.StatusForbidden, fmt.Sprintf("port %d of sandbox %s is not public: send its trafficAccessToken as %s", port, id, TrafficTokenHeader))
			return
		}
	}
	if s.cfg.Ports == nil {
		writeE2BError(w, http.StatusNotImplemented, "this daemon does not forward requests to sandbox ports")
		return
	}
	rec, ok := s.e2bRunning(w, r, rec)
	if !ok {
		return
	}
	host := ""
	if rec.E2B != nil && rec.E2B.MaskRequestHost != "" {
		host = strings.ReplaceAll(rec.E2B.MaskRequestHost, "${PORT}", strconv.Itoa(port))
	}
	s.proxy.busy.begin(rec.ID)
	defer s.proxy.busy.end(rec.ID)
	if sw, ok := w.(*statusWriter); ok {
		sw.proxied = true
	}
	// The daemon's and the sandbox's tokens are for the daemon only; any
	// other Authorization is the app's.
	strip := []string{TrafficTokenHeader, AccessTokenHeader, APIKeyHeader}
	if auth.bearer(r) {
		strip = append(strip, "Authorization")
	}
	s.cfg.Ports.Forward(w, r, rec.ID, port, host, strip...)
}

// serveDomainEnvd serves a request for the agent of rec by host name: as
// one that names it by the E2b-Sandbox-Id header, with any path.
func (s *Server) serveDomainEnvd(w http.ResponseWriter, r *http.Request, daemon bool, rec sandbox.Record) {
	switch got := r.Header.Get(AccessTokenHeader); {
	case daemon:
	case got == "" && signed(r):
		if err := checkSignature(r, rec.AccessToken, time.Now()); err != nil {
			writeE2BError(w, http.StatusUnauthorized, fmt.Sprintf("%v for sandbox %s", err, rec.ID))
			return
		}
	case rec.AccessToken == "" || subtle.ConstantTimeCompare([]byte(got), []byte(rec.AccessToken)) != 1:
		writeE2BError(w, http.StatusUnauthorized, fmt.Sprintf("missing or wrong %s for sandbox %s", AccessTokenHeader, rec.ID))
		return
	}
	s.forwardE2B(w, r, rec)
}

// e2bRunning returns rec running, for a request of E2B's data plane or to
// one of its ports: a paused sandbox made with autoResume is resumed
// (and its lifetime starts again from its timeout, as E2B's does); any
// other sandbox that is not running answers 502, and ok is false.
func (s *Server) e2bRunning(w http.ResponseWriter, r *http.Request, rec sandbox.Record) (_ sandbox.Record, ok bool) {
	if rec.State == sandbox.StateRunning {
		return rec, true
	}
	if rec.E2B == nil || !rec.E2B.AutoResume || !resumable(rec.State) {
		writeE2BError(w, http.StatusBadGateway, "sandbox "+rec.ID+" is "+string(rec.State)+"; connect resumes it")
		return rec, false
	}
	got, err := s.cfg.Manager.EnsureRunning(r.Context(), rec.ID)
	if err == nil && (got.State == sandbox.StateSuspending || got.State == sandbox.StateResuming) {
		got, err = s.cfg.Manager.Resume(r.Context(), rec.ID)
	}
	if err == nil && got.State == sandbox.StateRunning {
		got, err = s.cfg.Manager.KeepAlive(r.Context(), rec.ID, 0)
	}
	if err != nil || got.State != sandbox.StateRunning {
		msg := "sandbox " + rec.ID + " could not be resumed"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeE2BError(w, http.StatusBadGateway, msg)
		return rec, false
	}
	return got, true
}

// resumable reports whether a sandbox in state st can be brought back to
// running by a resume.
func resumable(st sandbox.RecordState) bool {
	switch st {
	case sandbox.StatePaused, sandbox.StateSuspended, sandbox.StateSuspending, sandbox.StateResuming:
		return true
	}
	return false
}
