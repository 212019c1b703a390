package httpapi

import (
	"context"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/sandbox"
)

// VolumeService is what the API needs to serve /v1/volumes: the daemon's
// volume store, with the Manager saying which sandboxes use a volume.
type VolumeService interface {
	// Create makes a volume; errdefs.ErrAlreadyExists when the name is
	// taken, ErrInvalidArgument for a bad name, size or labels.
	Create(ctx context.Context, req rest.CreateVolumeRequest) (rest.Volume, error)
	// List returns the volumes sorted by name.
	List(ctx context.Context) ([]rest.Volume, error)
	// Get returns one volume; errdefs.ErrNotFound when there is none.
	Get(ctx context.Context, name string) (rest.Volume, error)
	// Remove removes a volume and its data; errdefs.ErrFailedPrecondition
	// while a sandbox mounts it.
	Remove(ctx context.Context, name string) error
}

func (s *Server) volumes() (VolumeService, error) {
	if s.cfg.Volumes == nil {
		return nil, fmt.Errorf("volumes are not served by this daemon: %w", errdefs.ErrNotImplemented)
	}
	return s.cfg.Volumes, nil
}

func (s *Server) createVolume(w http.ResponseWriter, r *http.Request) {
	vs, err := s.volumes()
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	var req rest.CreateVolumeRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	v, err := vs.Create(r.Context(), req)
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	w.Header().Set("Location", "/v1/volumes/"+v.Name)
	writeJSON(w, http.StatusCreated, v)
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	vs, err := s.volumes()
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	list, err := vs.List(r.Context())
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if list == nil {
		list = []rest.Volume{}
	}
	writeJSON(w, http.StatusOK, rest.VolumeList{Volumes: list})
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	vs, err := s.volumes()
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	v, err := vs.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) removeVolume(w http.ResponseWriter, r *http.Request) {
	vs, err := s.volumes()
	if err != nil {
		writeError(r.Context(), w, err)
		return
	}
	if err := vs.Remove(r.Context(), r.PathValue("name")); err != nil {
		writeError(r.Context(), w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func toVolumeMounts(in []rest.VolumeMount) []sandbox.VolumeMount {
	var out []sandbox.VolumeMount
	for _, v := range in {
		out = append(out, sandbox.VolumeMount(v))
	}
	return out
}

func fromVolumeMounts(in []sandbox.VolumeMount) []rest.VolumeMount {
	var out []rest.VolumeMount
	for _, v := range in {
		out = append(out, rest.VolumeMount(v))
	}
	return out
}
