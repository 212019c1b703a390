package httpapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/internal/sandbox"
)

// E2B's signed file URLs (the SDKs' uploadUrl and downloadUrl): a GET or
// POST of /files carries, instead of X-Access-Token, the query parameters
// signature and (optionally) signature_expiration. The signature is
// "v1_" + base64 (standard alphabet, no padding) of the SHA-256 of
// "path:operation:username:accessToken" (":expiration" appended when it
// is set), where path and username are the request's query parameters
// ("" when absent), operation is read for a GET and write for a POST, and
// expiration is a Unix time in seconds; envd checks it the same way.

// signed reports whether r is a file request authenticated by a
// signature rather than a token.
func signed(r *http.Request) bool {
	return r.URL.Path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost) &&
		r.URL.Query().Get("signature") != ""
}

var (
	errBadSignature = errors.New("invalid signature")
	errExpired      = errors.New("signature is already expired")
)

// fileSignature is the signature of a request for q by method with token.
func fileSignature(q url.Values, method, token string) string {
	op := "read"
	if method == http.MethodPost {
		op = "write"
	}
	parts := []string{q.Get("path"), op, q.Get("username"), token}
	if exp := q.Get("signature_expiration"); exp != "" {
		parts = append(parts, exp)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// checkSignature checks r's signature against a sandbox's access token:
// errBadSignature when it was not made with that token for this path,
// user and operation, errExpired when it was but its time has passed.
func checkSignature(r *http.Request, token string, now time.Time) error {
	q := r.URL.Query()
	if token == "" || subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(fileSignature(q, r.Method, token))) != 1 {
		return errBadSignature
	}
	if s := q.Get("signature_expiration"); s != "" {
		exp, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return errBadSignature
		}
		if exp < now.Unix() {
			return errExpired
		}
	}
	return nil
}

// agentBySignature serves a signed file request that names no sandbox,
// as the SDKs make them with E2B_SANDBOX_URL (one URL for every
// sandbox): the sandbox is the one whose access token made the
// signature.
func (s *Server) agentBySignature(w http.ResponseWriter, r *http.Request) {
	recs, err := s.cfg.Manager.List(r.Context())
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	for _, rec := range recs {
		switch err := checkSignature(r, rec.AccessToken, time.Now()); {
		case errors.Is(err, errBadSignature):
			continue
		case err != nil:
			writeE2BError(w, http.StatusUnauthorized, err.Error())
			return
		}
		s.forwardE2B(w, r, rec)
		return
	}
	writeE2BError(w, http.StatusUnauthorized, errBadSignature.Error()+": no sandbox's access token made it for this path, user and operation")
}

// forwardE2B forwards an authenticated E2B data-plane request to rec's
// agent, as E2B's edge does: a sandbox that is not running answers 502
// (connect resumes a paused one), unless it was made with autoResume
// (e2bRunning).
func (s *Server) forwardE2B(w http.ResponseWriter, r *http.Request, rec sandbox.Record) {
	rec, ok := s.e2bRunning(w, r, rec)
	if !ok {
		return
	}
	s.proxy.forward(w, r, rec, r.URL.Path)
}

// E2B's template file uploads (Template.build): GET
// /templates/{id}/files/{hash} answers a URL that the SDK PUTs a tar to
// with no credential of its own (the URL is made to be a storage bucket's
// presigned one), so the URL carries it: the query parameters expires
// (Unix seconds) and signature, the hex HMAC-SHA256 of "PUT path expires"
// keyed with the daemon's token. RequireToken lets such a PUT through
// until it expires.

// SignUpload returns the query ("expires=...&signature=...") that lets a
// PUT of path made before exp through RequireToken for token.
func SignUpload(path string, exp time.Time, token string) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return url.Values{"expires": {e}, "signature": {uploadSignature(path, e, token)}}.Encode()
}

func uploadSignature(path, exp, token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("PUT " + path + " " + exp))
	return hex.EncodeToString(m.Sum(nil))
}

// uploadSigned reports whether r is a PUT signed by SignUpload with token
// that has not expired.
func uploadSigned(r *http.Request, token string, now time.Time) bool {
	q := r.URL.Query()
	sig, exp := q.Get("signature"), q.Get("expires")
	if r.Method != http.MethodPut || sig == "" || exp == "" {
		return false
	}
	t, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || t < now.Unix() {
		return false
	}
	return hmac.Equal([]byte(sig), []byte(uploadSignature(r.URL.Path, exp, token)))
}

// CallerToken returns the daemon token r authenticated with (its
// Authorization: Bearer or X-API-KEY header), "" when it has none.
func CallerToken(r *http.Request) string {
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return t
	}
	return r.Header.Get(APIKeyHeader)
}
