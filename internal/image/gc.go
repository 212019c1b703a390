package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
)

// PruneOptions tune Prune.
type PruneOptions struct {
	// BuildCache also forgets the build cache, so that layers only the
	// cache kept are collected too.
	BuildCache bool
}

// PruneReport says what Prune removed.
type PruneReport struct {
	LayersRemoved  int   `json:"layers_removed"`
	BytesFreed     int64 `json:"bytes_freed"`
	CacheRemoved   int   `json:"cache_entries_removed"`
	LayersInUse    int   `json:"layers_in_use"`
	LayersRetained int   `json:"layers_retained"`
}

// Prune removes every layer that no image, no build-cache entry and no
// sandbox refers to (a layer is referred to with everything beneath it).
// It waits for imports, pulls and builds under way to record what they
// made.
func (s *Store) Prune(ctx context.Context, o PruneOptions) (PruneReport, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var rep PruneReport
	if o.BuildCache {
		n, err := s.dropCache()
		rep.CacheRemoved = n
		if err != nil {
			return rep, err
		}
	}
	r, err := s.collect(ctx, true)
	r.CacheRemoved = rep.CacheRemoved
	return r, err
}

// collect removes unreferenced layers, children first. Layers a sandbox
// uses are kept (the layer store refuses). Called with gcMu held.
func (s *Store) collect(ctx context.Context, verbose bool) (PruneReport, error) {
	var rep PruneReport
	roots, err := s.roots(ctx)
	if err != nil {
		return rep, err
	}
	layers, err := s.layers.Layers(ctx)
	if err != nil {
		return rep, err
	}
	byKey := make(map[string]overlay.Layer, len(layers))
	for _, l := range layers {
		byKey[l.Key] = l
	}
	live := map[string]bool{}
	for _, k := range roots {
		for k != "" && !live[k] {
			live[k] = true
			k = byKey[k].Parent
		}
	}
	depth := func(k string) int {
		n := 0
		for ; k != "" && n <= len(byKey); k = byKey[k].Parent {
			n++
		}
		return n
	}
	var dead []overlay.Layer
	for _, l := range layers {
		if !live[l.Key] {
			dead = append(dead, l)
		}
	}
	rep.LayersRetained = len(layers) - len(dead)
	// Deepest first, so that a parent goes after its children.
	slices.SortFunc(dead, func(a, b overlay.Layer) int { return depth(b.Key) - depth(a.Key) })
	for _, l := range dead {
		if err := s.layers.RemoveLayer(ctx, l.Key); err != nil {
			if errdefs.IsFailedPrecondition(err) {
				rep.LayersInUse++
				log.G(ctx).Debug("keep layer", "layer", l.Key, "reason", err)
				continue
			}
			return rep, err
		}
		rep.LayersRemoved++
		rep.BytesFreed += l.Size
	}
	if verbose || rep.LayersRemoved > 0 {
		log.G(ctx).Info("layers collected", "removed", rep.LayersRemoved, "bytes", rep.BytesFreed, "in_use", rep.LayersInUse, "retained", rep.LayersRetained)
	}
	return rep, nil
}

// roots are the layer keys that keep layers alive: every image's top layer
// and every build-cache entry's layer.
func (s *Store) roots(ctx context.Context) ([]string, error) {
	rs, err := s.records(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.TopLayer)
	}
	ents, err := os.ReadDir(s.cacheDir())
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read build cache: %w", err)
	}
	for _, e := range ents {
		var c cacheEntry
		if err := readJSONFile(filepath.Join(s.cacheDir(), e.Name()), &c); err == nil {
			out = append(out, c.Layer)
		}
	}
	return out, nil
}

// cacheEntry maps a build step's cache key to the layer it made.
type cacheEntry struct {
	Layer   string    `json:"layer"`
	Step    string    `json:"step"`
	Created time.Time `json:"created"`
}

func (s *Store) cacheDir() string { return filepath.Join(s.root, "cache") }

// CacheGet returns the layer recorded for the build-cache key, if that
// layer still exists.
func (s *Store) CacheGet(key string) (string, bool) {
	if err := validDigest("sha256:" + key); err != nil {
		return "", false
	}
	var c cacheEntry
	if err := readJSONFile(filepath.Join(s.cacheDir(), key+".json"), &c); err != nil {
		return "", false
	}
	return c.Layer, s.layers.HasLayer(c.Layer)
}

// CachePut records that the build step with cache key (64 hex digits) made
// layer.
func (s *Store) CachePut(key, layer, step string) error {
	if err := validDigest("sha256:" + key); err != nil {
		return err
	}
	if err := os.MkdirAll(s.cacheDir(), 0o700); err != nil {
		return err
	}
	if len(step) > 200 {
		step = step[:200] + "..."
	}
	b, err := json.Marshal(cacheEntry{Layer: layer, Step: step, Created: time.Now().UTC()})
	if err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(s.cacheDir(), key+".json"), b, 0o600)
}

func (s *Store) dropCache() (int, error) {
	ents, err := os.ReadDir(s.cacheDir())
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			if err := os.Remove(filepath.Join(s.cacheDir(), e.Name())); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func readJSONFile(p string, v any) error {
	b, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
