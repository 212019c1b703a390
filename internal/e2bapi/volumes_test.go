package e2bapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/api/rest"
)

// fakeVolumes keeps volume names; used ones cannot be removed.
type fakeVolumes struct {
	mu    sync.Mutex
	names []string
	used  map[string]bool
}

func (f *fakeVolumes) Create(_ context.Context, req rest.CreateVolumeRequest) (rest.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.Name == "" {
		return rest.Volume{}, fmt.Errorf("volume name must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	if slices.Contains(f.names, req.Name) {
		return rest.Volume{}, fmt.Errorf("volume %q already exists: %w", req.Name, errdefs.ErrAlreadyExists)
	}
	f.names = append(f.names, req.Name)
	slices.Sort(f.names)
	return rest.Volume{Name: req.Name, SizeBytes: 1 << 30}, nil
}

func (f *fakeVolumes) List(context.Context) ([]rest.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []rest.Volume
	for _, n := range f.names {
		out = append(out, rest.Volume{Name: n})
	}
	return out, nil
}

func (f *fakeVolumes) Get(_ context.Context, name string) (rest.Volume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !slices.Contains(f.names, name) {
		return rest.Volume{}, fmt.Errorf("volume %q not found: %w", name, errdefs.ErrNotFound)
	}
	return rest.Volume{Name: name}, nil
}

func (f *fakeVolumes) Remove(_ context.Context, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.names, name)
	switch {
	case i < 0:
		return fmt.Errorf("volume %q not found: %w", name, errdefs.ErrNotFound)
	case f.used[name]:
		return fmt.Errorf("volume %q is used: %w", name, errdefs.ErrFailedPrecondition)
	}
	f.names = slices.Delete(f.names, i, i+1)
	return nil
}

// TestVolumes: E2B's Volume.create/list/getInfo/destroy on Corral's named
// volumes, an ID being the name.
func TestVolumes(t *testing.T) {
	f := newFixture(t)
	code, out, _ := f.do(t, "POST", "/volumes", `{"name":"data"}`)
	var v volumeJSON
	if err := json.Unmarshal([]byte(out), &v); code != http.StatusCreated || err != nil || v != (volumeJSON{VolumeID: "data", Name: "data"}) {
		t.Errorf("POST /volumes = %d %s; want 201 with data as ID and name", code, out)
	}
	code, out, _ = f.do(t, "POST", "/volumes", `{"name":"data"}`)
	wantError(t, "POST /volumes again", code, out, http.StatusConflict)
	code, out, _ = f.do(t, "POST", "/volumes", `{}`)
	wantError(t, "POST /volumes without a name", code, out, http.StatusBadRequest)

	code, out, _ = f.do(t, "GET", "/volumes", "")
	var list []volumeJSON
	if err := json.Unmarshal([]byte(out), &list); code != http.StatusOK || err != nil || len(list) != 1 || list[0].VolumeID != "data" {
		t.Errorf("GET /volumes = %d %s; want data", code, out)
	}
	if code, out, _ := f.do(t, "GET", "/volumes/data", ""); code != http.StatusOK {
		t.Errorf("GET /volumes/data = %d %s; want 200", code, out)
	}
	code, out, _ = f.do(t, "GET", "/volumes/nope", "")
	wantError(t, "GET /volumes/nope", code, out, http.StatusNotFound)

	f.volumes.used["data"] = true
	code, out, _ = f.do(t, "DELETE", "/volumes/data", "")
	wantError(t, "DELETE a used volume", code, out, http.StatusConflict)
	f.volumes.used["data"] = false
	if code, out, _ := f.do(t, "DELETE", "/volumes/data", ""); code != http.StatusNoContent {
		t.Errorf("DELETE /volumes/data = %d %s; want 204", code, out)
	}
	// The SDK's destroy reads 404 as "there was none".
	code, out, _ = f.do(t, "DELETE", "/volumes/data", "")
	wantError(t, "DELETE /volumes/data again", code, out, http.StatusNotFound)
}
