package daemon

import (
	"context"
	"io/fs"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
	"github.com/corral-sandbox/corral/internal/version"
)

// Info describes the daemon, its host and what it holds (GET /v1/info).
func (d *Daemon) Info(ctx context.Context) (rest.Info, error) {
	cfg := d.cfg
	info := rest.Info{
		Version: version.Version, GoVersion: goruntime.Version(),
		OS: goruntime.GOOS, Arch: goruntime.GOARCH, CPUs: goruntime.NumCPU(),
		Root: cfg.Root, RunDir: cfg.RunDir,
		DefaultImage: d.manager.DefaultImage(), DefaultTier: cfg.defaultTier(), DefaultRuntime: cfg.defaultRuntime(),
		Cgroup:    rest.CgroupInfo{Version: cgroupMode(), Driver: "cgroupfs", Parent: cfg.CgroupParent},
		Runtimes:  slices.Clone(d.runtimes),
		Sandboxes: rest.SandboxCounts{ByState: map[string]int{}},
	}
	for _, t := range d.manager.Tiers() {
		info.Tiers = append(info.Tiers, rest.TierInfo{Name: t.Name, Runtimes: t.Runtimes, DefaultRuntime: t.DefaultRuntime,
			Available: t.Available, Missing: t.Missing, Default: t.Default})
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		info.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	info.MemoryBytes = hostMemory()
	st := d.layers.Info()
	info.Storage = rest.StorageInfo{Driver: "overlay", Dir: st.Dir, DiskDir: st.DiskDir, Reflink: st.Reflink,
		TotalBytes: st.TotalBytes, FreeBytes: st.FreeBytes}
	if v := st.Volume; v != nil {
		info.Storage.DiskVolume = &rest.DiskVolumeInfo{Image: v.Image, Device: v.Device,
			TotalBytes: v.TotalBytes, FreeBytes: v.FreeBytes, AllocatedBytes: v.AllocatedBytes}
	}
	recs, err := d.manager.List(ctx)
	if err != nil {
		return info, err
	}
	for _, r := range recs {
		info.Sandboxes.Total++
		info.Sandboxes.ByState[string(r.State)]++
	}
	imgs, err := d.images.List(ctx)
	if err != nil {
		return info, err
	}
	for _, img := range imgs {
		if img.Disk != "" {
			info.Snapshots++
		} else {
			info.Images++
		}
	}
	for _, p := range d.manager.Pools() {
		info.Pools.Pools++
		info.Pools.Ready += p.Ready
		info.Pools.Size += p.Size
	}
	return info, nil
}

// DiskUsage reports the disk use of images, layers, the build cache,
// sandboxes, snapshots and warm pools (GET /v1/system/df).
func (d *Daemon) DiskUsage(ctx context.Context) (rest.DiskUsage, error) {
	var in dfInput
	var err error
	if in.images, err = d.images.List(ctx); err != nil {
		return rest.DiskUsage{}, err
	}
	if in.layers, err = d.layers.Layers(ctx); err != nil {
		return rest.DiskUsage{}, err
	}
	if in.cache, err = d.images.CacheLayers(); err != nil {
		return rest.DiskUsage{}, err
	}
	u, err := d.layers.Usage(ctx)
	if err != nil {
		return rest.DiskUsage{}, err
	}
	in.active, in.diskCache = u.Active, u.CacheBytes
	if in.boxes, err = d.manager.List(ctx); err != nil {
		return rest.DiskUsage{}, err
	}
	disks, err := d.layers.Disks(ctx)
	if err != nil {
		return rest.DiskUsage{}, err
	}
	in.saved = map[string]int64{}
	for _, sd := range disks {
		in.saved[sd.Name] = sd.UsedBytes
	}
	in.volumes, in.volumeUsers = map[string]int64{}, d.manager.VolumeUsers()
	for _, v := range d.volumes.List() {
		in.volumes[v.Name] = d.volumes.Allocated(v.Name)
	}
	in.memory = map[string]int64{}
	for _, img := range in.images {
		if img.Memory != "" {
			in.memory[img.Name] = dirBytes(img.Memory)
		}
	}
	return computeDiskUsage(in), nil
}

// dirBytes sums the blocks of the files under dir (0 when unreadable).
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := e.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// dfInput is what computeDiskUsage counts.
type dfInput struct {
	// images are the images, snapshots (Disk set) included.
	images []sandbox.Image
	layers []overlay.Layer
	// cache holds the layer of each build-cache entry.
	cache []string
	// active are the writable layers: the listed sandboxes' (keyed by
	// their IDs), the warm pools' and running build steps'.
	active    []overlay.ActiveUsage
	diskCache int64
	boxes     []sandbox.Record
	// saved and memory are the bytes of saved disks by name and of
	// snapshots' memory state by snapshot name.
	saved, memory map[string]int64
	// volumes are the named volumes' allocated bytes by name, and
	// volumeUsers the sandboxes that mount each.
	volumes     map[string]int64
	volumeUsers map[string][]string
}

// Summary row types of rest.DiskUsage, in the order shown.
const (
	dfImages     = "images"
	dfBuildCache = "build_cache"
	dfLayers     = "layers"
	dfSandboxes  = "sandboxes"
	dfSnapshots  = "snapshots"
	dfPools      = "pools"
	dfDiskCache  = "disk_cache"
	dfVolumes    = "volumes"
)

// computeDiskUsage counts in as docker system df does. A layer counts
// once however many images share it. Reclaimable is what removing the
// unused things of a type would give back: images no sandbox uses (not
// built-in ones; their layers that nothing else keeps), build-cache
// layers only the cache keeps (image prune --build-cache), layers nothing
// keeps (image prune), sandboxes in state error, snapshots no sandbox was
// made from, warm pools' ready boxes.
func computeDiskUsage(in dfInput) rest.DiskUsage {
	byKey := make(map[string]overlay.Layer, len(in.layers))
	for _, l := range in.layers {
		byKey[l.Key] = l
	}
	chain := func(top string) []string {
		var out []string
		for k := top; k != "" && len(out) <= len(byKey); k = byKey[k].Parent {
			if _, ok := byKey[k]; !ok {
				break
			}
			out = append(out, k)
		}
		return out
	}
	mark := func(set map[string]bool, top string) {
		for _, k := range chain(top) {
			set[k] = true
		}
	}
	sum := func(set map[string]bool) int64 {
		var n int64
		for k := range set {
			n += byKey[k].Size
		}
		return n
	}
	usedBy := map[string]int{} // image name -> sandboxes
	for _, b := range in.boxes {
		usedBy[b.Image]++
	}
	// holders counts, per layer, the images, snapshots and cache entries
	// whose chain holds it.
	holders := map[string]int{}
	hold := func(top string) {
		for _, k := range chain(top) {
			holders[k]++
		}
	}
	var (
		imageLayers = map[string]bool{} // of images
		keptLayers  = map[string]bool{} // of used or built-in images, snapshots
		cacheLayers = map[string]bool{}
		boxLayers   = map[string]bool{} // under writable layers
	)
	var out rest.DiskUsage
	for _, img := range in.images {
		hold(img.TopLayer)
		if img.Disk != "" {
			mark(keptLayers, img.TopLayer)
			continue
		}
		mark(imageLayers, img.TopLayer)
		if img.Builtin || usedBy[img.Name] > 0 {
			mark(keptLayers, img.TopLayer)
		}
	}
	for _, k := range in.cache {
		hold(k)
		mark(cacheLayers, k)
	}
	for _, a := range in.active {
		mark(boxLayers, a.Parent)
	}

	imgRow := rest.DiskUsageRow{Type: dfImages}
	snapRow := rest.DiskUsageRow{Type: dfSnapshots}
	out.Images, out.Snapshots = []rest.ImageDiskUsage{}, []rest.ImageDiskUsage{}
	for _, img := range in.images {
		u := rest.ImageDiskUsage{Name: img.Name, Sandboxes: usedBy[img.Name], Builtin: img.Builtin}
		if img.Disk != "" {
			u.SizeBytes = in.saved[img.Disk] + in.memory[img.Name]
			u.UniqueBytes = u.SizeBytes
			snapRow.Total++
			snapRow.SizeBytes += u.SizeBytes
			if u.Sandboxes > 0 {
				snapRow.Active++
			} else {
				snapRow.ReclaimableBytes += u.SizeBytes
			}
			out.Snapshots = append(out.Snapshots, u)
			continue
		}
		for _, k := range chain(img.TopLayer) {
			u.SizeBytes += byKey[k].Size
			if holders[k] > 1 {
				u.SharedBytes += byKey[k].Size
			}
		}
		u.UniqueBytes = u.SizeBytes - u.SharedBytes
		imgRow.Total++
		if u.Sandboxes > 0 {
			imgRow.Active++
		}
		out.Images = append(out.Images, u)
	}
	imgRow.SizeBytes = sum(imageLayers)
	for k := range imageLayers {
		if !keptLayers[k] && !cacheLayers[k] && !boxLayers[k] {
			imgRow.ReclaimableBytes += byKey[k].Size
		}
	}

	cacheRow := rest.DiskUsageRow{Type: dfBuildCache, Total: len(in.cache)}
	for _, k := range in.cache {
		if imageLayers[k] || keptLayers[k] || boxLayers[k] {
			cacheRow.Active++
		}
	}
	for k := range cacheLayers {
		if !imageLayers[k] && !keptLayers[k] {
			cacheRow.SizeBytes += byKey[k].Size
			if !boxLayers[k] {
				cacheRow.ReclaimableBytes += byKey[k].Size
			}
		}
	}

	layerRow := rest.DiskUsageRow{Type: dfLayers, Total: len(in.layers), Active: len(boxLayers)}
	for _, l := range in.layers {
		layerRow.SizeBytes += l.Size
		if !imageLayers[l.Key] && !keptLayers[l.Key] && !cacheLayers[l.Key] && !boxLayers[l.Key] {
			layerRow.ReclaimableBytes += l.Size
		}
	}

	activeByKey := map[string]overlay.ActiveUsage{}
	for _, a := range in.active {
		activeByKey[a.Key] = a
	}
	boxRow := rest.DiskUsageRow{Type: dfSandboxes, Total: len(in.boxes)}
	out.Sandboxes = []rest.SandboxDiskUsage{}
	listed := map[string]bool{}
	for _, b := range in.boxes {
		listed[b.ID] = true
		a := activeByKey[b.ID]
		u := rest.SandboxDiskUsage{ID: b.ID, Name: b.Name, Image: b.Image, State: string(b.State),
			DiskBytes: a.AllocatedBytes, LimitBytes: a.DiskBytes}
		if b.Suspended != nil {
			u.MemoryBytes = b.Suspended.MemoryBytes
		}
		size := u.DiskBytes + u.MemoryBytes
		boxRow.SizeBytes += size
		if b.State == sandbox.StateRunning {
			boxRow.Active++
		}
		if b.State == sandbox.StateError {
			boxRow.ReclaimableBytes += size
		}
		out.Sandboxes = append(out.Sandboxes, u)
	}
	poolRow := rest.DiskUsageRow{Type: dfPools}
	for _, a := range in.active {
		if !listed[a.Key] {
			poolRow.Total++
			poolRow.SizeBytes += a.AllocatedBytes
		}
	}
	poolRow.Active, poolRow.ReclaimableBytes = poolRow.Total, poolRow.SizeBytes
	diskRow := rest.DiskUsageRow{Type: dfDiskCache, SizeBytes: in.diskCache}
	// Named volumes: those no sandbox mounts are reclaimable (volume rm).
	volRow := rest.DiskUsageRow{Type: dfVolumes, Total: len(in.volumes)}
	for name, n := range in.volumes {
		volRow.SizeBytes += n
		if len(in.volumeUsers[name]) > 0 {
			volRow.Active++
		} else {
			volRow.ReclaimableBytes += n
		}
	}
	out.Summary = []rest.DiskUsageRow{imgRow, cacheRow, layerRow, boxRow, snapRow, poolRow, diskRow, volRow}
	return out
}

// hostMemory returns the host's memory in bytes, 0 when unknown.
func hostMemory() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}
