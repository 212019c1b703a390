package spec

import (
	"fmt"
	"path"
	"strings"

	"github.com/corral-sandbox/corral/internal/identifiers"
)

// VolumeMount is a named volume at a path, parsed from "NAME:/PATH" or
// "NAME:/PATH:ro" (docker's -v NAME:/PATH[:ro]).
type VolumeMount struct {
	Name     string
	Target   string
	Readonly bool
}

// ParseVolume parses "NAME:/PATH", "NAME:/PATH:ro" or "NAME:/PATH:rw". A
// host path (docker's bind mount, "/srv:/data") is refused: only named
// volumes are mounted. The daemon checks the target further (reserved
// paths) and that the volume exists.
func ParseVolume(s string) (VolumeMount, error) {
	parts := strings.Split(s, ":")
	var m VolumeMount
	switch len(parts) {
	case 3:
		switch parts[2] {
		case "ro":
			m.Readonly = true
		case "rw":
		default:
			return m, fmt.Errorf("%q: the mode %q must be ro or rw", s, parts[2])
		}
	case 2:
	default:
		return m, fmt.Errorf("%q: want NAME:/PATH or NAME:/PATH:ro", s)
	}
	m.Name, m.Target = parts[0], parts[1]
	if strings.HasPrefix(m.Name, "/") || strings.HasPrefix(m.Name, ".") {
		return m, fmt.Errorf("%q: %q is a host path; only named volumes are mounted (corral volume create NAME)", s, m.Name)
	}
	if m.Name == "" || m.Target == "" {
		return m, fmt.Errorf("%q: want NAME:/PATH or NAME:/PATH:ro", s)
	}
	if err := identifiers.Validate("volume name", m.Name); err != nil {
		return m, fmt.Errorf("%q: %w", s, err)
	}
	if !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target || m.Target == "/" {
		return m, fmt.Errorf("%q: the path %q must be absolute, clean and not /", s, m.Target)
	}
	return m, nil
}
