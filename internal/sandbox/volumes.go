package sandbox

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/identifiers"
)

// VolumeMount mounts a named volume into a sandbox.
type VolumeMount struct {
	// Name is the volume's name.
	Name string `json:"name"`
	// Target is the absolute path in the sandbox.
	Target string `json:"target"`
	// Readonly mounts it read-only.
	Readonly bool `json:"readonly,omitempty"`
}

// Volumes is what the Manager needs from the volume store
// (*volume.Store).
type Volumes interface {
	// Path returns the host path of volume name's root for the runtime
	// to bind; errdefs.ErrNotFound when there is no such volume.
	Path(name string) (string, error)
}

// maxVolumeMounts bounds the volumes of one sandbox.
const maxVolumeMounts = 32

// reservedTargets are paths of the sandbox that no volume may cover or lie
// under: the kernel's file systems, the agent's directory, the resolver
// configuration the daemon binds.
var reservedTargets = []string{"/proc", "/sys", "/dev", "/.corral", "/etc/resolv.conf"}

// validateVolumes checks the volume mounts of a create request (names,
// targets, duplicates) without looking the volumes up.
func validateVolumes(vs []VolumeMount) error {
	if len(vs) > maxVolumeMounts {
		return invalid("volumes: %d mounts, at most %d", len(vs), maxVolumeMounts)
	}
	seen := map[string]bool{}
	for i, v := range vs {
		if err := identifiers.Validate(fmt.Sprintf("volumes[%d].name", i), v.Name); err != nil {
			return err
		}
		t := v.Target
		if t == "" || strings.ContainsRune(t, 0) || !path.IsAbs(t) || path.Clean(t) != t || t == "/" {
			return invalid("volumes[%d].target %q must be an absolute, clean path other than /", i, t)
		}
		for _, r := range reservedTargets {
			if t == r || strings.HasPrefix(t, r+"/") || strings.HasPrefix(r, t+"/") {
				return invalid("volumes[%d].target %q: %s is reserved for the sandbox's own use", i, t, r)
			}
		}
		if seen[t] {
			return invalid("volumes[%d].target %q is given twice", i, t)
		}
		seen[t] = true
	}
	return nil
}

// volumeBinds returns spec with the binds of the volumes vs added, from
// the volume store's paths of this daemon (the paths are not recorded:
// they change with the daemon's process).
func (m *Manager) volumeBinds(spec *Spec, vs []VolumeMount) error {
	if len(vs) == 0 {
		return nil
	}
	if m.cfg.Volumes == nil {
		return fmt.Errorf("volumes are not available on this daemon: %w", errdefs.ErrNotImplemented)
	}
	binds := slices.Clone(spec.Binds)
	for _, v := range vs {
		p, err := m.cfg.Volumes.Path(v.Name)
		if err != nil {
			return err
		}
		binds = append(binds, Bind{Source: p, Target: v.Target, Readonly: v.Readonly})
	}
	spec.Binds = binds
	return nil
}

// VolumeUsers returns the IDs of the sandboxes that mount each volume,
// by volume name, in ID order.
func (m *Manager) VolumeUsers() map[string][]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string][]string{}
	for id, b := range m.boxes {
		for _, v := range b.rec.Volumes {
			out[v.Name] = append(out[v.Name], id)
		}
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out
}

// RemoveVolume runs remove (the volume store's removal of volume name)
// unless a sandbox mounts the volume, in any state (a stopped or
// suspended one mounts it again when it starts): then it fails with
// errdefs.ErrFailedPrecondition naming them. While remove runs, sandboxes
// that would mount the volume are refused.
func (m *Manager) RemoveVolume(ctx context.Context, name string, remove func(context.Context) error) error {
	m.mu.Lock()
	var users []string
	for id, b := range m.boxes {
		if slices.ContainsFunc(b.rec.Volumes, func(v VolumeMount) bool { return v.Name == name }) {
			users = append(users, id)
		}
	}
	if len(users) > 0 {
		m.mu.Unlock()
		slices.Sort(users)
		return fmt.Errorf("volume %q is used by sandbox %s: remove them first: %w", name, strings.Join(users, ", "), errdefs.ErrFailedPrecondition)
	}
	if m.volRemoving == nil {
		m.volRemoving = map[string]bool{}
	}
	if m.volRemoving[name] {
		m.mu.Unlock()
		return fmt.Errorf("volume %q is being removed: %w", name, errdefs.ErrConflict)
	}
	m.volRemoving[name] = true
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.volRemoving, name)
		m.mu.Unlock()
	}()
	return remove(ctx)
}

// checkVolumesLocked refuses a sandbox whose volumes are being removed.
// Called with mu held.
func (m *Manager) checkVolumesLocked(rec Record) error {
	for _, v := range rec.Volumes {
		if m.volRemoving[v.Name] {
			return fmt.Errorf("volume %q is being removed: %w", v.Name, errdefs.ErrConflict)
		}
	}
	return nil
}

// ValidateLabels checks labels as a sandbox's are checked (for the labels
// of other resources, such as volumes).
func ValidateLabels(labels map[string]string) error { return validateLabels(labels) }
