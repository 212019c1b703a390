package e2bapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// forkDefaultTimeout is a fork's lifetime when the request names none
// (E2B's default).
const forkDefaultTimeout = 15 * time.Second

// forkRequest is E2B's SandboxForkRequest.
type forkRequest struct {
	Timeout *int64 `json:"timeout"`
	Count   *int   `json:"count"`
}

// forkResult is E2B's SandboxForkResult: a sandbox or an error.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *errorBody   `json:"error,omitempty"`
}

// fork copies a running sandbox count times (E2B's fork: files and, where
// the runtime can checkpoint, memory, so the copies' processes go on
// where the source's were; else the copies start afresh on copies of the
// files). Each copy lives timeout seconds (15 by default; 0: no end).
// Corral makes every copy or none, so a 201 lists only sandboxes.
func (a *API) fork(w http.ResponseWriter, r *http.Request) {
	var req forkRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	count := 1
	if req.Count != nil {
		count = *req.Count
		if count < 1 || count > sandbox.MaxForkCount {
			a.fail(w, r, fmt.Errorf("count %d must be between 1 and %d: %w", count, sandbox.MaxForkCount, errdefs.ErrInvalidArgument))
			return
		}
	}
	d := forkDefaultTimeout
	if req.Timeout != nil {
		var err error
		if d, err = seconds("timeout", *req.Timeout, sandbox.MaxTimeout); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	src, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	recs, err := a.cfg.Manager.Fork(r.Context(), src.ID, sandbox.ForkRequest{Count: count, MemoryState: true})
	if errdefs.IsNotImplemented(err) || errors.Is(err, sandbox.ErrCheckpoint) {
		// The runtime, or this box (a user namespace, the gvisor tier),
		// cannot copy memory: copy the files only.
		log.G(r.Context()).Info("fork without memory state", "sandbox", src.ID, "reason", err)
		recs, err = a.cfg.Manager.Fork(r.Context(), src.ID, sandbox.ForkRequest{Count: count})
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]forkResult, len(recs))
	for i, rec := range recs {
		rec, err := a.cfg.Manager.SetDeadline(r.Context(), rec.ID, a.deadline(d))
		if err != nil {
			out[i].Error = &errorBody{Code: http.StatusInternalServerError, Message: err.Error()}
			continue
		}
		sb := a.sandboxOf(rec)
		out[i].Sandbox = &sb
	}
	writeJSON(w, http.StatusCreated, out)
}

// deadline is now + d, or none when d is 0.
func (a *API) deadline(d time.Duration) time.Time {
	if d == 0 {
		return time.Time{}
	}
	return a.cfg.Now().Add(d)
}

// snapshotRequest is E2B's SandboxSnapshotRequest.
type snapshotRequest struct {
	Name string `json:"name"`
}

// snapshotInfo is E2B's SnapshotInfo.
type snapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

func snapshotOf(img sandbox.Image) snapshotInfo {
	return snapshotInfo{SnapshotID: img.Name, Names: []string{img.Name}}
}

// createSnapshot saves the sandbox's files as a Corral snapshot, an
// image: E2B's snapshot template, which Sandbox.create names. Without a
// name the snapshot is called snapshot-<random>. A name in use is a 409
// (E2B would add a build to that template; Corral keeps an image as it
// is).
func (a *API) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req snapshotRequest
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	name := req.Name
	if name == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b) // never fails
		name = "snapshot-" + hex.EncodeToString(b)
	}
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	img, err := a.cfg.Manager.Snapshot(r.Context(), rec.ID, name)
	if errdefs.IsAlreadyExists(err) {
		err = fmt.Errorf("%w; delete it first (Sandbox.deleteSnapshot, corral image rm %s) or pick another name", err, name)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotOf(img))
}

// listSnapshots lists the snapshots (images with a saved disk), by name,
// filtered by source sandbox (sandboxID) and name, in pages.
func (a *API) listSnapshots(w http.ResponseWriter, r *http.Request) {
	imgs, err := a.listImages(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	src, name := q.Get("sandboxID"), q.Get("name")
	imgs = slices.DeleteFunc(imgs, func(img sandbox.Image) bool {
		return img.Disk == "" || src != "" && img.Origin != src || name != "" && img.Name != name
	})
	slices.SortFunc(imgs, func(x, y sandbox.Image) int { return strings.Compare(x.Name, y.Name) })
	page, next, err := paginate(q, imgs, func(img sandbox.Image) string { return img.Name })
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]snapshotInfo, 0, len(page))
	for _, img := range page {
		out = append(out, snapshotOf(img))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}

// deleteTemplate deletes a template built through the E2B API
// (Template.build) or a snapshot (Sandbox.deleteSnapshot). Other images
// are refused: the E2B API does not remove what Corral's own images are
// (corral image rm does).
func (a *API) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if a.cfg.TemplateDir != "" && a.cfg.TemplateImages != nil {
		if _, err := a.readRecord(id); err == nil {
			if err := a.deleteBuilt(r.Context(), id); err != nil {
				a.fail(w, r, err)
				return
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	imgs, err := a.listImages(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	i := slices.IndexFunc(imgs, func(img sandbox.Image) bool { return img.Name == id })
	switch {
	case i < 0:
		err = fmt.Errorf("template %q: %w", id, errdefs.ErrNotFound)
	case imgs[i].Disk == "":
		err = fmt.Errorf("template %q is a Corral image, not a snapshot: the E2B API deletes snapshots and templates it built only (corral image rm %s removes an image): %w", id, id, errdefs.ErrInvalidArgument)
	default:
		err = a.cfg.Images.Remove(r.Context(), id)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) listImages(ctx context.Context) ([]sandbox.Image, error) {
	if a.cfg.Images == nil {
		return nil, fmt.Errorf("snapshots: this daemon has no image store: %w", errdefs.ErrNotImplemented)
	}
	return a.cfg.Images.List(ctx)
}

// paginate returns the page of items (sorted by key) that q's nextToken
// and limit select, and the token of the next page ("" at the end). The
// token is the key of the page's last item.
func paginate[T any](q url.Values, items []T, key func(T) string) ([]T, string, error) {
	limit := maxLimit
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxLimit {
			return nil, "", fmt.Errorf("limit %q must be between 1 and %d: %w", s, maxLimit, errdefs.ErrInvalidArgument)
		}
		limit = n
	}
	if tok := q.Get("nextToken"); tok != "" {
		after, err := parsePageToken(tok)
		if err != nil {
			return nil, "", err
		}
		i, _ := slices.BinarySearchFunc(items, after, func(it T, k string) int { return strings.Compare(key(it), k) })
		for i < len(items) && key(items[i]) <= after {
			i++
		}
		items = items[i:]
	}
	if len(items) <= limit {
		return items, "", nil
	}
	return items[:limit], pageToken(key(items[limit-1])), nil
}

func pageToken(key string) string { return "k." + url.QueryEscape(key) }

func parsePageToken(s string) (string, error) {
	rest, ok := strings.CutPrefix(s, "k.")
	key, err := url.QueryUnescape(rest)
	if !ok || err != nil || key == "" {
		return "", fmt.Errorf("nextToken %q is not one this server gave: %w", s, errdefs.ErrInvalidArgument)
	}
	return key, nil
}

// networkUpdate is E2B's SandboxNetworkUpdateConfig.
type networkUpdate struct {
	AllowOut            []string        `json:"allowOut"`
	DenyOut             []string        `json:"denyOut"`
	EgressProxy         json.RawMessage `json:"egressProxy"`
	Rules               json.RawMessage `json:"rules"`
	AllowInternetAccess *bool           `json:"allow_internet_access"`
}

// updateNetwork replaces a running sandbox's egress policy, mapped as
// create maps it (networkOf). E2B clears what the request omits, so an
// update with no rules at all opens the sandbox to the internet, E2B's
// default (mode full). 409 when the sandbox is not running.
func (a *API) updateNetwork(w http.ResponseWriter, r *http.Request) {
	var req networkUpdate
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	set, err := networkOf(newSandbox{
		AllowInternetAccess: req.AllowInternetAccess,
		Network:             &networkConfig{AllowOut: req.AllowOut, DenyOut: req.DenyOut, EgressProxy: req.EgressProxy, Rules: req.Rules},
	})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if set == nil {
		set = &netpolicy.Settings{Mode: netpolicy.ModeFull}
	}
	rec, err := a.cfg.Manager.Get(r.Context(), r.PathValue("id"))
	if err == nil {
		_, err = a.cfg.Manager.SetNetwork(r.Context(), rec.ID, *set)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
