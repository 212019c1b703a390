package clienttest

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/corral-sandbox/corral/api/rest"
)

// decodeBody decodes an optional JSON body into v, rejecting unknown
// fields as the daemon does; it answers 400 and returns false on error.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "invalid_argument", "decode body: "+err.Error())
		return false
	}
	return true
}

// autoResume makes a paused or suspended sandbox running, as the daemon's
// data plane does.
func (d *Daemon) autoResume(sb *rest.Sandbox) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if sb.State == "paused" || sb.State == "suspended" {
		sb.State, sb.Suspended = "running", nil
	}
}

// lifecycleRoutes adds the routes of pause, resume, suspend, keep-alive,
// snapshots, forks and warm pools.
func (d *Daemon) lifecycleRoutes(mux *http.ServeMux) {
	// state changes sb under the daemon's lock when it is in one of from.
	state := func(w http.ResponseWriter, r *http.Request, op string, from []string, fn func(*rest.Sandbox)) {
		sb := d.sandbox(w, r)
		if sb == nil {
			return
		}
		d.Mu.Lock()
		defer d.Mu.Unlock()
		if !slices.Contains(from, sb.State) {
			writeError(w, http.StatusPreconditionFailed, "failed_precondition", fmt.Sprintf("sandbox %s is %s, it cannot be %s", sb.ID, sb.State, op))
			return
		}
		fn(sb)
		writeJSON(w, http.StatusOK, sb)
	}
	mux.HandleFunc("POST /v1/sandboxes/{id}/pause", func(w http.ResponseWriter, r *http.Request) {
		state(w, r, "paused", []string{"running", "paused"}, func(sb *rest.Sandbox) { sb.State = "paused" })
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/resume", func(w http.ResponseWriter, r *http.Request) {
		state(w, r, "resumed", []string{"running", "paused", "suspended"}, func(sb *rest.Sandbox) {
			if su := sb.Suspended; su != nil && su.Memory {
				sb.ProcessesLost = nil
				if why, ok := d.LoseProcesses[sb.ID]; ok {
					sb.ProcessesLost = &rest.ProcessesLost{Time: time.Now().UTC(), Reason: why}
				}
			}
			sb.State, sb.Suspended = "running", nil
		})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/suspend", func(w http.ResponseWriter, r *http.Request) {
		var req rest.SuspendRequest
		if !decodeBody(w, r, &req) {
			return
		}
		state(w, r, "suspended", []string{"running", "paused", "suspended"}, func(sb *rest.Sandbox) {
			if sb.State == "suspended" {
				return
			}
			sb.State = "suspended"
			sb.Suspended = &rest.Suspension{Time: time.Unix(0, 0).UTC(), Memory: !req.FilesystemOnly}
			if !req.FilesystemOnly {
				sb.Suspended.MemoryBytes = 4 << 20
			}
		})
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/keepalive", func(w http.ResponseWriter, r *http.Request) {
		var req rest.KeepAliveRequest
		if !decodeBody(w, r, &req) {
			return
		}
		if req.TimeoutSeconds < 0 {
			writeError(w, http.StatusBadRequest, "invalid_argument", "timeout_seconds must not be negative")
			return
		}
		sb := d.sandbox(w, r)
		if sb == nil {
			return
		}
		d.Mu.Lock()
		defer d.Mu.Unlock()
		if s := cmp.Or(req.TimeoutSeconds, sb.TimeoutSeconds); s > 0 {
			dl := time.Now().UTC().Add(time.Duration(s) * time.Second).Truncate(time.Millisecond)
			sb.Deadline = &dl
		}
		writeJSON(w, http.StatusOK, sb)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshot", func(w http.ResponseWriter, r *http.Request) {
		var req rest.SnapshotRequest
		if !decodeBody(w, r, &req) {
			return
		}
		if req.Name == "" || strings.ToLower(req.Name) != req.Name || strings.ContainsAny(req.Name, " @") {
			writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("image name %q: want NAME[:TAG] (lowercase letters, digits, '.', '_', '-')", req.Name))
			return
		}
		sb := d.sandbox(w, r)
		if sb == nil {
			return
		}
		d.Mu.Lock()
		defer d.Mu.Unlock()
		if _, ok := d.Images[req.Name]; ok {
			writeError(w, http.StatusConflict, "already_exists", fmt.Sprintf("snapshot name %q is used by an image", req.Name))
			return
		}
		img := &rest.Image{
			Name: req.Name, Created: time.Unix(0, 0).UTC(), Size: 1 << 20, Layers: 1, Source: "snapshot",
			DiskBytes: cmp.Or(sb.Resources.DiskBytes, 1<<30), Origin: sb.ID,
		}
		d.Images[img.Name] = img
		writeJSON(w, http.StatusCreated, img)
	})
	mux.HandleFunc("GET /v1/snapshots", func(w http.ResponseWriter, _ *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		l := rest.SnapshotList{Snapshots: []rest.Image{}}
		for _, n := range slices.Sorted(maps.Keys(d.Images)) {
			if img := d.Images[n]; img.Source == "snapshot" {
				l.Snapshots = append(l.Snapshots, *img)
			}
		}
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("DELETE /v1/snapshots/{name...}", func(w http.ResponseWriter, r *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		name := r.PathValue("name")
		img, ok := d.Images[name]
		switch {
		case !ok:
			writeError(w, http.StatusNotFound, "not_found", "image "+name+" not found")
			return
		case img.Source != "snapshot":
			writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("image %q is not a snapshot (source %q); remove it with corral image rm", name, img.Source))
			return
		}
		delete(d.Images, name)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/sandboxes/{id}/fork", func(w http.ResponseWriter, r *http.Request) {
		var req rest.ForkRequest
		if !decodeBody(w, r, &req) {
			return
		}
		n := cmp.Or(req.Count, 1)
		if n < 1 || n > 64 {
			writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("count %d must be between 1 and 64", n))
			return
		}
		src := d.sandbox(w, r)
		if src == nil {
			return
		}
		d.Mu.Lock()
		defer d.Mu.Unlock()
		if req.MemoryState && src.State == "suspended" {
			writeError(w, http.StatusPreconditionFailed, "failed_precondition", "sandbox "+src.ID+" is suspended, resume it to fork its memory state")
			return
		}
		l := rest.SandboxList{Sandboxes: []rest.Sandbox{}}
		for range n {
			d.nextID++
			c := *src
			c.ID = fmt.Sprintf("sb%04d", d.nextID)
			c.Name, c.State, c.Suspended, c.Deadline, c.Origin = "", "running", nil, nil, src.ID
			c.AgentPath = "/v1/sandboxes/" + c.ID + "/agent"
			c.Env, c.Labels = maps.Clone(src.Env), maps.Clone(src.Labels)
			if len(req.Labels) > 0 && c.Labels == nil {
				c.Labels = map[string]string{}
			}
			maps.Copy(c.Labels, req.Labels)
			d.Sandboxes[c.ID] = &c
			l.Sandboxes = append(l.Sandboxes, c)
		}
		writeJSON(w, http.StatusCreated, l)
	})
	mux.HandleFunc("GET /v1/pools", func(w http.ResponseWriter, _ *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		l := rest.PoolList{Pools: []rest.Pool{}}
		for _, k := range slices.Sorted(maps.Keys(d.Pools)) {
			l.Pools = append(l.Pools, *d.Pools[k])
		}
		writeJSON(w, http.StatusOK, l)
	})
	mux.HandleFunc("PUT /v1/pools", func(w http.ResponseWriter, r *http.Request) {
		var req rest.PoolSpec
		if !decodeBody(w, r, &req) {
			return
		}
		d.Mu.Lock()
		defer d.Mu.Unlock()
		switch _, ok := d.Images[req.Image]; {
		case req.Image == "":
			writeError(w, http.StatusBadRequest, "invalid_argument", "image is required")
			return
		case req.Size < 0 || req.Size > 1024:
			writeError(w, http.StatusBadRequest, "invalid_argument", fmt.Sprintf("size %d must be between 0 (remove the pool) and 1024", req.Size))
			return
		case !ok:
			writeError(w, http.StatusNotFound, "not_found", "image "+req.Image+" not found")
			return
		}
		p := &rest.Pool{
			Key: "pool-" + req.Image, Image: req.Image, Runtime: cmp.Or(req.Runtime, "crun"),
			Resources: req.Resources, Size: req.Size, Ready: req.Size,
		}
		if p.Size == 0 {
			delete(d.Pools, p.Key)
		} else {
			d.Pools[p.Key] = p
		}
		writeJSON(w, http.StatusOK, p)
	})
	mux.HandleFunc("DELETE /v1/pools/{key}", func(w http.ResponseWriter, r *http.Request) {
		d.Mu.Lock()
		defer d.Mu.Unlock()
		key := r.PathValue("key")
		if _, ok := d.Pools[key]; !ok {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("pool %q not found", key))
			return
		}
		delete(d.Pools, key)
		w.WriteHeader(http.StatusNoContent)
	})
}
