package volume

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
)

// memRecords is an in-memory Records.
type memRecords struct {
	mu   sync.Mutex
	recs map[string]Volume
}

func newMemRecords() *memRecords { return &memRecords{recs: map[string]Volume{}} }

func (m *memRecords) PutVolume(_ context.Context, v *Volume) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.recs[v.Name] = *v
	return nil
}

func (m *memRecords) DeleteVolume(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.recs, name)
	return nil
}

func (m *memRecords) ListVolumes(context.Context) ([]*Volume, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Volume
	for _, v := range m.recs {
		out = append(out, &v)
	}
	slices.SortFunc(out, func(a, b *Volume) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func TestValidateSize(t *testing.T) {
	for _, tc := range []struct {
		in, want int64
		bad      bool
	}{
		{in: 0, want: DefaultBytes},
		{in: MinBytes, want: MinBytes},
		{in: MinBytes + 1, want: MinBytes + 1<<20},
		{in: MinBytes - 1, bad: true},
		{in: -1, bad: true},
		{in: MaxBytes + 1, bad: true},
	} {
		got, err := ValidateSize(tc.in)
		if tc.bad {
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "volume size") {
				t.Errorf("ValidateSize(%d) = %d, %v; want an invalid argument naming the size", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ValidateSize(%d) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestCreateRefusesBadInput: a bad name or size is refused before anything
// is recorded or made.
func TestCreateRefusesBadInput(t *testing.T) {
	recs := newMemRecords()
	root := t.TempDir()
	s := &Store{root: root, recs: recs, mkfs: "/bin/false", vols: map[string]*entry{}, busy: map[string]bool{}}
	for _, tc := range []struct {
		name string
		size int64
		want string
	}{
		{name: "", want: "volume name"},
		{name: "../x", want: "volume name"},
		{name: "a/b", want: "volume name"},
		{name: "ok", size: 1, want: "volume size"},
	} {
		_, err := s.Create(t.Context(), tc.name, tc.size, nil)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Create(%q, %d) = %v; want an invalid argument naming %q", tc.name, tc.size, err, tc.want)
		}
	}
	if got, _ := recs.ListVolumes(t.Context()); len(got) != 0 {
		t.Errorf("records after refused creates: %v; want none", got)
	}
}

func TestRemoveUnknown(t *testing.T) {
	s := &Store{root: t.TempDir(), recs: newMemRecords(), vols: map[string]*entry{}, busy: map[string]bool{}}
	if err := s.Remove(t.Context(), "nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Remove(nope) = %v; want not found", err)
	}
	if _, err := s.Path("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Path(nope) = %v; want not found", err)
	}
}
