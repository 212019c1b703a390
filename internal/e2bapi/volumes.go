package e2bapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/httpapi"
)

// Volumes is what the API needs to serve E2B's /volumes: Corral's named
// volumes (the daemon's volume service, as /v1/volumes uses it).
type Volumes interface {
	Create(ctx context.Context, req rest.CreateVolumeRequest) (rest.Volume, error)
	List(ctx context.Context) ([]rest.Volume, error)
	Get(ctx context.Context, name string) (rest.Volume, error)
	Remove(ctx context.Context, name string) error
}

// volumeJSON is E2B's VolumeAndToken (create, get) and Volume (list): a
// volume's ID is its Corral name. The token the SDK sends to the volume
// content API (/volumecontent) is the daemon token the request carried:
// the caller has it already, and the daemon checks it there as on every
// route.
type volumeJSON struct {
	VolumeID string `json:"volumeID"`
	Name     string `json:"name"`
	Token    string `json:"token,omitempty"`
}

func volumeOf(v rest.Volume) volumeJSON { return volumeJSON{VolumeID: v.Name, Name: v.Name} }

func (a *API) volumes() (Volumes, error) {
	if a.cfg.Volumes == nil {
		return nil, fmt.Errorf("volumes: this daemon has no volume store: %w", errdefs.ErrNotImplemented)
	}
	return a.cfg.Volumes, nil
}

// createVolume makes a volume of Corral's default size: E2B's NewVolume
// has a name only.
func (a *API) createVolume(w http.ResponseWriter, r *http.Request) {
	vs, err := a.volumes()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	var req struct {
		Name string `json:"name"`
	}
	if err := decode(w, r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	v, err := vs.Create(r.Context(), rest.CreateVolumeRequest{Name: req.Name})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := volumeOf(v)
	out.Token = httpapi.CallerToken(r)
	writeJSON(w, http.StatusCreated, out)
}

func (a *API) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := a.volumes()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	list, err := vs.List(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := make([]volumeJSON, 0, len(list))
	for _, v := range list {
		out = append(out, volumeOf(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *API) getVolume(w http.ResponseWriter, r *http.Request) {
	vs, err := a.volumes()
	var v rest.Volume
	if err == nil {
		v, err = vs.Get(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := volumeOf(v)
	out.Token = httpapi.CallerToken(r)
	writeJSON(w, http.StatusOK, out)
}

// deleteVolume removes a volume and its files: 404 when there is none,
// 409 while a sandbox mounts it.
func (a *API) deleteVolume(w http.ResponseWriter, r *http.Request) {
	vs, err := a.volumes()
	if err == nil {
		err = vs.Remove(r.Context(), r.PathValue("id"))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
