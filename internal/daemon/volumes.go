package daemon

import (
	"context"
	"slices"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/volume"
)

// volumeService serves /v1/volumes (httpapi.VolumeService): the volume
// store, with the Manager's knowledge of which sandboxes mount a volume.
type volumeService struct {
	store   *volume.Store
	manager *sandbox.Manager
}

func (s volumeService) Create(ctx context.Context, req rest.CreateVolumeRequest) (rest.Volume, error) {
	if err := sandbox.ValidateLabels(req.Labels); err != nil {
		return rest.Volume{}, err
	}
	v, err := s.store.Create(ctx, req.Name, req.SizeBytes, req.Labels)
	if err != nil {
		return rest.Volume{}, err
	}
	return s.view(v, nil), nil
}

func (s volumeService) List(ctx context.Context) ([]rest.Volume, error) {
	users := s.manager.VolumeUsers()
	var out []rest.Volume
	for _, v := range s.store.List() {
		out = append(out, s.view(v, users[v.Name]))
	}
	return out, nil
}

func (s volumeService) Get(ctx context.Context, name string) (rest.Volume, error) {
	v, err := s.store.Get(name)
	if err != nil {
		return rest.Volume{}, err
	}
	return s.view(v, s.manager.VolumeUsers()[name]), nil
}

func (s volumeService) Remove(ctx context.Context, name string) error {
	if err := volume.ValidateName(name); err != nil {
		return err
	}
	if _, err := s.store.Get(name); err != nil {
		return err
	}
	return s.manager.RemoveVolume(ctx, name, func(ctx context.Context) error {
		return s.store.Remove(ctx, name)
	})
}

// view is the API's view of v; users are the sandboxes that mount it.
func (s volumeService) view(v volume.Volume, users []string) rest.Volume {
	out := rest.Volume{Name: v.Name, SizeBytes: v.SizeBytes, Labels: v.Labels, Created: v.Created, Sandboxes: slices.Clone(users)}
	if out.Sandboxes == nil {
		out.Sandboxes = []string{}
	}
	if u, err := s.store.Usage(v.Name); err == nil {
		out.UsedBytes = int64(u.UsedBytes) //nolint:gosec // a volume is at most volume.MaxBytes
	}
	return out
}
