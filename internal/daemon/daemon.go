// Package daemon wires corral serve: configuration, start and stop order of
// the components (lock, metadata, layer and image stores, runtimes, the
// sandbox Manager and its recovery, the HTTP API) and signal handling.
package daemon

import (
	"cmp"
	"context"
	"crypto/tls"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/agentbin"
	"github.com/corral-sandbox/corral/internal/agentpool"
	"github.com/corral-sandbox/corral/internal/audit"
	"github.com/corral-sandbox/corral/internal/build"
	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/cleanup"
	"github.com/corral-sandbox/corral/internal/e2bapi"
	"github.com/corral-sandbox/corral/internal/httpapi"
	"github.com/corral-sandbox/corral/internal/identifiers"
	"github.com/corral-sandbox/corral/internal/image"
	"github.com/corral-sandbox/corral/internal/image/source"
	"github.com/corral-sandbox/corral/internal/log"
	"github.com/corral-sandbox/corral/internal/mcpserver"
	"github.com/corral-sandbox/corral/internal/meta"
	"github.com/corral-sandbox/corral/internal/netpolicy"
	"github.com/corral-sandbox/corral/internal/network"
	"github.com/corral-sandbox/corral/internal/proclog"
	"github.com/corral-sandbox/corral/internal/runtime/oci"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/secrets"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
	"github.com/corral-sandbox/corral/internal/tunnel"
	"github.com/corral-sandbox/corral/internal/version"
	"github.com/corral-sandbox/corral/internal/volume"
)

// LockFile under Root makes sure only one daemon uses a root.
const LockFile = "daemon.lock"

// shutdownTimeout bounds the graceful HTTP shutdown.
const shutdownTimeout = 10 * time.Second

// Daemon is a running engine without listeners: tests and embedding
// programs serve Handler themselves.
type Daemon struct {
	cfg     Config
	manager *sandbox.Manager
	api     *httpapi.Server
	network *network.Service
	secrets *secrets.Store
	tunnels *tunnel.Registry
	// agents owns the connections to the boxes' agents: the Manager and
	// the API's data plane reach them through it.
	agents *agentpool.Pool
	// layers and images are the stores; runtimes describes the configured
	// runtimes as decided at start (GET /v1/info).
	layers *overlay.Store
	images *image.Store
	// volumes are the named volumes.
	volumes  *volume.Store
	runtimes []rest.RuntimeInfo
	// boxesLeft is set in Close, before the layer store closes, when a
	// writable layer (a box's, pooled ones too) is left: run_dir's tmpfs
	// and the cgroup_parent directories then stay for the next daemon.
	boxesLeft bool
	// userns is what was decided about user namespaces (decideUserNS).
	userns usernsState
	// obs samples the boxes, raises alerts and keeps the metrics.
	obs *observability
	// restarts reports the boxes' failed agents.
	restarts *agentRestarts
	// audit is the audit trail; nil when [audit] is off.
	audit *audit.Store
	// outputLog keeps the commands' output in files; nil when
	// [output_log] is off.
	outputLog *proclog.Store
	// closers run last first in Close.
	closers closers

	// What a step of New makes for the steps after it.
	db          *meta.DB
	offered     map[string]sandbox.Runtime
	unavailable map[string]sandbox.UnavailableRuntime
	tiers       map[string]sandbox.TierConfig
	agentBin    string
	initBin     string
	idleExit    time.Duration
	guard       *netpolicy.Guard
	activity    *touchHook
	resolvConf  string
}

// closers close what was opened, last first.
type closers []func() error

func (c *closers) add(fn func() error) { *c = append(*c, fn) }

// close runs the closers last first and forgets them.
func (c *closers) close() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		errs = append(errs, (*c)[i]())
	}
	*c = nil
	return errors.Join(errs...)
}

// step is one step of New: it opens or starts something and returns what
// closes it (nil when nothing does), also when it fails halfway.
type step func(ctx context.Context) (closer func() error, err error)

// New starts the engine, one step after another: it locks Root, opens
// the metadata and the stores, finds the runtimes, opens the agent pool
// and the network, recovers the sandboxes of a previous daemon and makes
// the API. On failure, what the steps opened is closed, last first.
func New(ctx context.Context, cfg Config) (_ *Daemon, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg}
	defer func() {
		if retErr != nil {
			d.Close()
		}
	}()
	for _, s := range []step{
		d.prepareRoot,   // directories, the root's lock, run_dir's tmpfs, cgroup_parent
		d.openStores,    // metadata, layers, images
		d.openRuntimes,  // the OCI runtimes offered, cleaners for the others
		d.installAgents, // the agent and init binaries the boxes run
		d.openAgents,    // the pool of connections to the agents
		d.openAudit,     // the audit trail, which the steps after feed
		d.openNetwork,   // egress service, secrets, the boxes' resolv.conf
		d.openManager,   // the sandbox Manager, recovery, old agents pruned
		d.openTunnels,   // exposed ports of the sandboxes that are left
		d.newAPI,        // the HTTP API with the E2B face
		d.startPools,    // warm pools start filling
	} {
		closer, err := s(ctx)
		if closer != nil {
			d.closers.add(closer)
		}
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// prepareRoot makes Root and RunDir, locks Root, mounts a tmpfs on RunDir
// when configured, and removes what is left of both and of cgroup_parent
// at close when no box is left.
func (d *Daemon) prepareRoot(ctx context.Context) (func() error, error) {
	cfg := d.cfg
	var cs closers
	for _, dir := range []string{cfg.Root, cfg.RunDir} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	unlock, err := lock(filepath.Join(cfg.Root, LockFile))
	if err != nil {
		return nil, err
	}
	cs.add(unlock)
	if cfg.RunDirTmpfs {
		if mounted, err := mountRunDir(cfg.RunDir); err != nil {
			log.G(ctx).Warn("run_dir: cannot mount a tmpfs on it", "dir", cfg.RunDir, "error", err)
		} else if mounted {
			log.G(ctx).Info("run_dir: mounted a tmpfs", "dir", cfg.RunDir)
		}
		cs.add(func() error {
			if d.boxesLeft {
				return nil
			}
			return unmountRunDir(ctx, cfg.RunDir)
		})
	}
	// Boxes keep running across a daemon stop, in their cgroups under
	// cgroup_parent: the parent stays for them. Without them it goes, in
	// every hierarchy, as long as it is empty.
	cs.add(func() error {
		if d.boxesLeft {
			return nil
		}
		return cgroups.RemoveEmpty(cgroups.Root, "/"+cfg.CgroupParent)
	})
	if note := runDirNote(cfg.RunDir); note != "" {
		log.G(ctx).Warn(note)
	}
	return cs.close, nil
}

// openStores opens the metadata database, the layer store and the image
// store (with its built-in images). At close it notes whether boxes are
// left (boxesLeft) before the layer store closes.
func (d *Daemon) openStores(ctx context.Context) (func() error, error) {
	cfg := d.cfg
	var cs closers
	db, err := meta.Open(ctx, cfg.Root)
	if err != nil {
		return nil, err
	}
	cs.add(db.Close)
	d.db = db

	vols, err := volume.Open(ctx, volume.Config{Root: filepath.Join(cfg.Root, "volumes"), Records: db})
	if err != nil {
		return cs.close, err
	}
	cs.add(vols.Close)
	d.volumes = vols

	ocfg := overlay.DefaultConfig()
	ocfg.Root = filepath.Join(cfg.Root, "overlay")
	ocfg.DefaultDiskBytes = cfg.Resources.DiskBytes
	ocfg.PoolSize = cfg.DiskPoolSize
	ocfg.DiskVolume = cfg.DiskVolume
	ocfg.DiskFlush = cfg.DiskFlush
	ocfg.DiskDirectIO = cfg.DiskDirectIO
	ocfg.DiskVolumeDirtyBytes = cfg.DiskVolumeDirtyBytes
	if err := ocfg.Validate(); err != nil {
		return cs.close, err
	}
	layers, err := overlay.New(ocfg.Root, append(ocfg.Opts(), overlay.WithLogger(log.G(ctx)))...)
	if err != nil {
		return cs.close, fmt.Errorf("layer store: %w", err)
	}
	cs.add(layers.Close)
	d.layers = layers
	cs.add(func() error {
		active, err := layers.Active(context.WithoutCancel(ctx))
		d.boxesLeft = err != nil || len(active) > 0
		return nil
	})

	images, err := image.New(filepath.Join(cfg.Root, "images"), layers,
		image.WithDebianMirror(cfg.DebianMirror),
		image.WithRegistry(source.RegistryOptions{Insecure: cfg.Registry.Insecure}))
	if err != nil {
		return cs.close, fmt.Errorf("image store: %w", err)
	}
	d.images = images
	if err := images.EnsureBuiltins(ctx); err != nil {
		return cs.close, fmt.Errorf("built-in images: %w", err)
	}
	return cs.close, nil
}

// openRuntimes starts the configured runtimes that are offered (see
// assessRuntime) and records what was decided for GET /v1/info. For each
// one that is not, and for each runtime a sandbox record names that is not
// configured, it makes a cleaner (oci.NewCleaner) so that recovery keeps
// their boxes and rm can still stop and remove them. It fails when the
// default runtime is not offered.
func (d *Daemon) openRuntimes(ctx context.Context) (func() error, error) {
	cfg, err := d.cfg.normalize()
	if err != nil {
		return nil, err
	}
	var cs closers
	d.offered = map[string]sandbox.Runtime{}
	d.unavailable = map[string]sandbox.UnavailableRuntime{}
	ociConfig := func(name, bin string) oci.Config {
		return oci.Config{
			Binary:       bin,
			StateDir:     filepath.Join(cfg.RunDir, name, "state"),
			RunDir:       filepath.Join(cfg.RunDir, name, "sandboxes"),
			CgroupParent: cfg.CgroupParent,
			NoFile:       cfg.Resources.NoFile,
			Runsc:        cfg.runscConfig(name),
		}
	}
	strand := func(name, reason string) error {
		c, err := oci.NewCleaner(ociConfig(name, name))
		if err != nil {
			return fmt.Errorf("runtime %s: %w", name, err)
		}
		cs.add(c.Close)
		d.unavailable[name] = sandbox.UnavailableRuntime{Reason: reason, Cleaner: c}
		return nil
	}
	var dflt rest.RuntimeInfo
	names := slices.Clone(cfg.Runtime.Container.Runtimes)
	if cfg.Runtime.GVisor.Enabled {
		names = append(names, RunscName)
	}
	for _, name := range names {
		ri := assessRuntime(ctx, cfg, name)
		switch ri.Status {
		case rest.RuntimeOK, rest.RuntimeUnsafe:
			if ri.Status == rest.RuntimeUnsafe {
				log.G(ctx).Warn("UNSAFE RUNTIME OFFERED: its version has known vulnerabilities that let a sandbox escape; allow_unsafe_runtimes names it, so it is used anyway",
					"runtime", name, "path", ri.Path, "reason", ri.Reason)
			}
			rt, err := oci.New(ociConfig(name, ri.Path))
			if err != nil {
				return cs.close, fmt.Errorf("runtime %s: %w", name, err)
			}
			cs.add(rt.Close)
			if err := d.decideUserNS(ctx, rt, &ri); err != nil {
				return cs.close, err
			}
			if ri.Status == rest.RuntimeRefused {
				if err := strand(name, ri.Reason); err != nil {
					return cs.close, err
				}
				break
			}
			d.offered[name], ri.Available = rt, true
		default:
			log.G(ctx).Warn("runtime not offered", "runtime", name, "status", ri.Status, "reason", ri.Reason, "fix", refusedHint(ri))
			if err := strand(name, ri.Reason); err != nil {
				return cs.close, err
			}
		}
		if ri.Default {
			dflt = ri
		}
		d.runtimes = append(d.runtimes, ri)
	}
	if !dflt.Available {
		return cs.close, errDefaultRuntime(dflt)
	}
	d.tiers = cfg.tiers(d.runtimes)
	recs, err := d.db.ListSandboxes(ctx)
	if err != nil {
		return cs.close, fmt.Errorf("list sandboxes: %w", err)
	}
	for _, r := range recs {
		if _, ok := d.offered[r.Runtime]; ok || r.Runtime == "" {
			continue
		}
		if _, ok := d.unavailable[r.Runtime]; ok {
			continue
		}
		if err := identifiers.Validate("runtime", r.Runtime); err != nil {
			continue // not a path component: nothing of it can be found
		}
		if err := strand(r.Runtime, fmt.Sprintf("not configured (runtime.container.runtimes = %v)", cfg.Runtime.Container.Runtimes)); err != nil {
			return cs.close, err
		}
	}
	if _, err := exec.LookPath("criu"); err == nil {
		// The runtimes put a tmpfs on their own /run when they can.
		cached := false
		for _, rt := range d.offered {
			if c, ok := rt.(interface{ CRIUCachesProbe() bool }); ok && c.CRIUCachesProbe() {
				cached = true
			}
		}
		if note := criuCacheNote("/run"); note != "" && !cached {
			log.G(ctx).Warn(note)
		}
	}
	return cs.close, nil
}

// installAgents picks the agent binary (agent_binary, else the slim agent
// embedded in this corral, else this binary) and corral-init, which the
// boxes run; without corral-init, agents never exit when idle.
func (d *Daemon) installAgents(ctx context.Context) (func() error, error) {
	cfg := d.cfg
	agentBin := cfg.AgentBinary
	if agentBin == "" {
		var err error
		if agentBin, err = defaultAgent(ctx, agentDir(cfg), agentbin.Embedded()); err != nil {
			return nil, err
		}
	}
	if err := checkStatic(agentBin); err != nil {
		return nil, err
	}
	d.agentBin = agentBin
	d.initBin = defaultInit(ctx, agentDir(cfg), agentbin.EmbeddedInit())
	d.idleExit = cfg.agentIdleExit()
	if d.initBin == "" {
		d.idleExit = 0
	}
	log.G(ctx).Info("sandbox agent", "binary", d.agentBin, "init", d.initBin, "idle_exit", d.idleExit)
	return nil, nil
}

// openAgents makes the pool of connections to the agents, which the
// Manager and the API share; agent_timeout bounds its one-shot calls.
func (d *Daemon) openAgents(context.Context) (func() error, error) {
	d.restarts = newAgentRestarts(func(ctx context.Context, id string, added, total uint64, failure string) {
		d.obs.agentRestarts(ctx, id, added, total, failure)
	})
	d.restarts.reported = d.reportedRestarts
	d.agents = agentpool.New(agentpool.Config{Timeout: d.cfg.agentTimeouts().Wait, Restarts: d.restarts.observe})
	return d.agents.Close, nil
}

// openNetwork starts the egress service and the secret store and writes
// the resolv.conf of boxes with a network namespace.
func (d *Daemon) openNetwork(context.Context) (func() error, error) {
	cfg := d.cfg
	d.activity = &touchHook{}
	d.guard = newGuard(cfg.Network)
	netsvc, secretStore, err := newNetwork(cfg, d.guard, d.activity.touch, d.networkEvents())
	if err != nil {
		return nil, err
	}
	d.network, d.secrets = netsvc, secretStore
	if d.resolvConf, err = writeResolvConf(filepath.Join(cfg.RunDir, "network")); err != nil {
		return netsvc.Close, fmt.Errorf("resolv.conf for sandboxes: %w", err)
	}
	return netsvc.Close, nil
}

// openManager makes the sandbox Manager, recovers the sandboxes of a
// previous daemon and removes the installed agents no sandbox needs.
func (d *Daemon) openManager(ctx context.Context) (func() error, error) {
	cfg := d.cfg
	var idRanges sandbox.IDRanges
	if d.userns.ranges != nil {
		idRanges = d.userns.ranges
	}
	d.obs = newObservability(cfg, d.network, func() *sandbox.Manager { return d.manager })
	m, err := sandbox.NewManager(sandbox.ManagerConfig{
		Observe:          d.obs.metrics.Observe,
		IDRanges:         idRanges,
		NSPoolSize:       cfg.NetNSPoolSize,
		StateDir:         filepath.Join(cfg.Root, "sandboxes"),
		Snapshots:        d.images,
		Agents:           d.agents,
		Network:          d.network,
		Guard:            d.guard,
		RunningProcesses: d.runningProcesses(),
		Secrets:          d.secrets,
		ResolvConf:       d.resolvConf,
		Runtimes:         d.offered,
		Unavailable:      d.unavailable,
		Tiers:            d.tiers,
		DefaultRuntime:   cfg.defaultRuntime(),
		Layers:           d.layers,
		Images:           d.images,
		Store:            d.db,
		Volumes:          d.volumes,
		AgentBinary:      d.agentBin,
		InitBinary:       d.initBin,
		AgentIdleExit:    d.idleExit,
		OutputBuffer:     cfg.outputBuffer(),
		IdleCPUPercent:   cfg.IdleCPUPercent,
		DefaultImage:     cfg.DefaultImage,
		DefaultResources: sandbox.Resources{
			CPUs: cfg.Resources.CPUs, MemoryBytes: cfg.Resources.MemoryBytes,
			DiskBytes: cfg.Resources.DiskBytes, Pids: cfg.Resources.Pids,
		},
		Quota: cfg.Limits.quota(goruntime.NumCPU(), hostMemory()),
	})
	if err != nil {
		return nil, err
	}
	d.manager = m
	d.activity.m.Store(m)
	find := boxByAgentAddr(m)
	d.restarts.find.Store(&find)
	d.followAudit(ctx, m)
	if err := d.followOutput(ctx, m); err != nil {
		return m.Close, err
	}
	if err := m.Recover(ctx); err != nil {
		return m.Close, err
	}
	if recs, err := d.db.ListSandboxes(ctx); err != nil {
		log.G(ctx).Warn("list sandboxes to prune old agents", "error", err)
	} else {
		inUse := map[string]bool{d.agentBin: true, d.initBin: true}
		for _, r := range recs {
			if r.Spec != nil {
				inUse[r.Spec.AgentBinary] = true
				inUse[r.Spec.InitBinary] = true
			}
		}
		pruneAgents(ctx, agentDir(cfg), inUse)
	}
	return m.Close, nil
}

// openTunnels opens the registry of exposed ports and drops those of
// sandboxes that are gone.
func (d *Daemon) openTunnels(ctx context.Context) (func() error, error) {
	var err error
	if d.tunnels, err = tunnel.Open(filepath.Join(d.cfg.Root, "tunnels.json")); err != nil {
		return nil, fmt.Errorf("tunnels: %w", err)
	}
	if err := d.tunnels.Keep(func(id string) bool {
		_, err := d.manager.Get(ctx, id)
		return err == nil
	}); err != nil {
		return nil, fmt.Errorf("tunnels: %w", err)
	}
	return nil, nil
}

// runningProcesses counts the commands a box's agent runs, for the idle
// policy; nil when running commands do not count (idle_processes).
func (d *Daemon) runningProcesses() func(ctx context.Context, addr string) (int, error) {
	if !d.cfg.IdleProcesses {
		return nil
	}
	return d.agents.Running
}

// newAPI makes the HTTP API, with E2B's control plane, and its directory
// of uploads.
func (d *Daemon) newAPI(ctx context.Context) (func() error, error) {
	cfg := d.cfg
	var cs closers
	// Uploads (archives to load, build contexts) wait here while used;
	// what a killed daemon left is removed at start.
	uploads := filepath.Join(cfg.Root, "uploads")
	if err := os.RemoveAll(uploads); err != nil {
		return nil, fmt.Errorf("clean uploads: %w", err)
	}
	if err := os.MkdirAll(uploads, 0o700); err != nil {
		return nil, fmt.Errorf("uploads: %w", err)
	}
	var tunnels *tunnel.Registry
	tunnelBase := cfg.Tunnels.URL
	if cfg.Tunnels.Listen != "" {
		tunnels = d.tunnels
		tunnelBase = cmp.Or(tunnelBase, "http://"+cfg.Tunnels.Listen)
	}
	d.obs.watchers = append(d.obs.watchers, d.restarts)
	stopStats, err := d.obs.start(ctx, cfg, d.manager, d.offered, d.network, d.auditSink()...)
	if err != nil {
		return cs.close, err
	}
	cs.add(stopStats)
	var trail e2bapi.AuditTrail
	if d.audit != nil {
		trail = d.audit
	}
	builder := build.New(d.images, d.manager)
	vols := volumeService{store: d.volumes, manager: d.manager}
	e2b, err := e2bapi.New(e2bapi.Config{
		Manager: d.manager,
		Images:  d.images,
		Secrets: d.secrets,
		Volumes: vols,
		// The volume content API serves the volumes' files from the host.
		VolumeDir: d.volumes.Path,
		Stats:     d.obs.sampler,
		Audit:     trail,
		Domain:    cfg.E2B.Domain,
		// Template builds (Template.build) are corral builds.
		Builder:        builder,
		TemplateImages: d.images,
		TemplateDir:    filepath.Join(cfg.Root, "e2b-templates"),
		Context:        ctx,
		// Templates' start and ready commands run through the agents.
		Commands: d.agents,
		Removed: func(ctx context.Context, id string) {
			if tunnels == nil {
				return
			}
			// The daemon's next start drops what is left (Registry.Keep).
			if err := tunnels.RemoveSandbox(id); err != nil {
				log.G(ctx).Warn("remove the exposed ports of a removed sandbox", "sandbox", id, "error", err)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	d.api, err = httpapi.New(httpapi.Config{
		E2B:           e2b,
		Network:       d.network,
		Secrets:       d.secrets,
		Volumes:       vols,
		Tunnels:       tunnels,
		TunnelBase:    tunnelBase,
		TunnelDomain:  cfg.Tunnels.Domain,
		E2BDomain:     cfg.E2B.Domain,
		Ports:         tunnel.NewForwarder(d.dialPort),
		Manager:       d.manager,
		Agents:        d.agents,
		Images:        d.images,
		Builder:       builder,
		UploadDir:     uploads,
		System:        d,
		Limits:        httpapi.Limits{RequestsPerSecond: cfg.Limits.RequestsPerSecond, Burst: cfg.Limits.RequestBurst},
		AgentTimeouts: cfg.agentTimeouts(),
		// The MCP server on /mcp is a client of this API, reached
		// in-process, like corral mcp is one over the socket (see
		// package mcpserver).
		MCP: func(api http.Handler) http.Handler {
			c, stop := mcpserver.InProcess(api)
			cs.add(stop)
			return mcpserver.HTTPHandler(c, mcpserver.Options{Logger: log.G(ctx).With("component", "mcp")})
		},
		Stats:   d.obs.sampler,
		Metrics: d.obs.metrics.Handler(),
		Observe: d.obs.metrics.Observe,
		Audit:   d.auditLog(),

		OutputLog: d.outputLogAPI(),
		Version: rest.Version{
			Version:   version.Version,
			GoVersion: goruntime.Version(),
			Runtimes:  d.manager.Runtimes(),
			Cgroup:    cgroupMode(),
		},
	})
	return cs.close, err
}

// startPools starts filling the warm pools of the configuration and of the
// API's earlier calls.
func (d *Daemon) startPools(ctx context.Context) (func() error, error) {
	return nil, d.manager.Start(ctx, d.cfg.poolSpecs())
}

// TunnelHandler serves `corral port expose` URLs.
func (d *Daemon) TunnelHandler() http.Handler {
	return tunnel.Handler(tunnel.Config{
		Registry: d.tunnels,
		Domain:   d.cfg.Tunnels.Domain,
		Dial: func(ctx context.Context, id string, port int) (net.Conn, error) {
			// A tunnel request is activity, and resumes a parked box.
			if _, err := d.manager.EnsureRunning(ctx, id); err != nil {
				return nil, err
			}
			_, netns, err := d.manager.NetNS(ctx, id)
			if err != nil {
				return nil, err
			}
			return network.DialInNS(netns, "tcp4", fmt.Sprintf("127.0.0.1:%d", port))
		},
		Resolve: func(idOrName string) (string, error) {
			rec, err := d.manager.Get(context.Background(), idOrName)
			return rec.ID, err
		},
	})
}

// dialPort connects to port in the running box id (E2B's domain mode,
// whose requests resume a paused box only when it asked for that, so
// this does not).
func (d *Daemon) dialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	_, netns, err := d.manager.NetNS(ctx, id)
	if err != nil {
		return nil, err
	}
	return network.DialInNS(netns, "tcp4", fmt.Sprintf("127.0.0.1:%d", port))
}

// Manager returns the sandbox Manager.
func (d *Daemon) Manager() *sandbox.Manager { return d.manager }

// Handler returns the API without authentication.
func (d *Daemon) Handler() http.Handler { return d.api.Handler() }

// Close stops the engine in reverse start order. Sandboxes keep running: the
// next daemon recovers them.
func (d *Daemon) Close() error { return d.closers.close() }

// Run is corral serve: it starts the engine, serves the API on the unix
// socket (and on Listen with a bearer token) until ctx ends or SIGTERM or
// SIGINT arrives, then shuts down gracefully. Started by systemd with
// Type=notify ($NOTIFY_SOCKET), it reports READY=1 once every listener is
// open, after recovery, so that units ordered after it find the API up.
func Run(ctx context.Context, cfg Config) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Before anything is started: the runtimes must not inherit it.
	sd, err := takeNotifySocket()
	if err != nil {
		log.G(ctx).Warn("not notifying the service manager", "error", err)
	}
	d, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.Close()

	cu := cleanup.Cleanup{}
	defer cu.Clean()
	listeners, err := listen(cfg, handlers{api: d.api.Handler, apiToken: d.api.TokenHandler, tunnels: d.TunnelHandler}, &cu)
	if err != nil {
		return err
	}
	servers, errc := serve(ctx, listeners)
	// Every listener is open (a connection made now waits in its backlog
	// until Serve accepts it), so the API answers from here on.
	if err := sd.notify("READY=1"); err != nil {
		log.G(ctx).Warn("tell the service manager the daemon is ready", "error", err)
	}

	var serveErr error
	select {
	case <-ctx.Done():
		log.G(ctx).Info("shutting down")
	case serveErr = <-errc:
	}
	if err := sd.notify("STOPPING=1"); err != nil {
		log.G(ctx).Warn("tell the service manager the daemon is stopping", "error", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close() // streams still open after the grace period
		}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", serveErr)
	}
	return nil
}

// listener is one of the daemon's listeners, with what it serves.
type listener struct {
	l net.Listener
	h http.Handler
	// tls, when set, makes it serve HTTPS.
	tls *tls.Config
	// what is what it serves, for the log: "API" or "tunnels".
	what string
	// attrs describe it further in the log.
	attrs []any
}

// handlers are what the daemon's listeners serve.
type handlers struct {
	// api is the unauthenticated API, apiToken the API for a bearer
	// token (*httpapi.Server's Handler and TokenHandler).
	api      func() http.Handler
	apiToken func(token string) http.Handler
	// tunnels returns the handler of exposed ports.
	tunnels func() http.Handler
}

// listen opens the daemon's listeners: the API on the unix socket and,
// when configured, on TCP (with the bearer token of token_file), and the
// tunnel listener of exposed ports. cu closes them.
func listen(cfg Config, h handlers, cu *cleanup.Cleanup) ([]listener, error) {
	var out []listener
	ul, err := listenUnix(cfg.Socket)
	if err != nil {
		return nil, err
	}
	cu.Add(func() { ul.Close(); os.Remove(cfg.Socket) })
	out = append(out, listener{l: ul, h: h.api(), what: "API", attrs: []any{"auth", "socket file mode"}})
	if cfg.Listen != "" {
		token, err := readToken(cfg.TokenFile)
		if err != nil {
			return nil, err
		}
		var tc *tls.Config
		attrs := []any{"auth", "bearer token"}
		if cfg.TLSCertFile != "" {
			cr, err := loadCert(cfg.TLSCertFile, cfg.TLSKeyFile)
			if err != nil {
				return nil, err
			}
			tc = cr.config()
			attrs = append(attrs, "tls", cfg.TLSCertFile)
		}
		if cfg.E2B.Domain != "" {
			attrs = append(attrs, "e2b_domain", cfg.E2B.Domain)
		}
		tl, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
		}
		cu.Add(func() { tl.Close() })
		out = append(out, listener{l: tl, h: h.apiToken(token), tls: tc, what: "API", attrs: attrs})
	}
	if cfg.Tunnels.Listen != "" {
		tl, err := net.Listen("tcp", cfg.Tunnels.Listen)
		if err != nil {
			return nil, fmt.Errorf("tunnels: listen %s: %w", cfg.Tunnels.Listen, err)
		}
		cu.Add(func() { tl.Close() })
		out = append(out, listener{l: tl, h: h.tunnels(), what: "tunnels", attrs: []any{"domain", cfg.Tunnels.Domain}})
	}
	return out, nil
}

// serve serves each listener with its own http.Server, logging what it
// serves, and returns the servers and the channel of their Serve errors.
func serve(ctx context.Context, listeners []listener) ([]*http.Server, <-chan error) {
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true) // lets clients run bidirectional agent streams
	errc := make(chan error, len(listeners))
	var servers []*http.Server
	for _, ln := range listeners {
		srv := &http.Server{
			Handler:           ln.h,
			Protocols:         &protos,
			ReadHeaderTimeout: 10 * time.Second,
			BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
			// The API's clients on the unix socket are told apart by uid.
			ConnContext: httpapi.ConnContext,
		}
		servers = append(servers, srv)
		if ln.tls != nil {
			// HTTPS: HTTP/1.1 and HTTP/2 (bidirectional agent streams).
			var tp http.Protocols
			tp.SetHTTP1(true)
			tp.SetHTTP2(true)
			srv.Protocols, srv.TLSConfig = &tp, ln.tls
			go func() { errc <- srv.ServeTLS(ln.l, "", "") }()
		} else {
			go func() { errc <- srv.Serve(ln.l) }()
		}
		log.G(ctx).Info("serving "+ln.what, append([]any{"address", ln.l.Addr().String()}, ln.attrs...)...)
	}
	return servers, errc
}

// listenUnix removes a stale socket file (we hold the root lock, so no
// daemon serves it) and listens on path with mode 0660.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("socket %s exists and is not a socket: %w", path, errdefs.ErrFailedPrecondition)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket: %w", err)
		}
	}
	old := unix.Umask(0o117)
	l, err := net.Listen("unix", path)
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	return l, nil
}

// readToken reads the bearer token file; it must hold a non-empty token.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token_file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" || strings.ContainsAny(t, " \t\r\n") {
		return "", fmt.Errorf("token_file %s must hold one non-empty token: %w", path, errdefs.ErrInvalidArgument)
	}
	return t, nil
}

// lock takes an exclusive flock on path, failing at once when another
// daemon holds it.
func lock(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another corral daemon uses %s (lock %s is held): %w", filepath.Dir(path), path, errdefs.ErrUnavailable)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return f.Close, nil
}

// criuCacheNote says why CRIU cannot keep its probe of the kernel between
// runs, or "" when it can. CRIU caches the probe in /run/criu.kdat only when
// /run is a tmpfs (so that a reboot clears it); elsewhere every checkpoint
// and restore probes again.
func criuCacheNote(run string) string {
	if !notTmpfs(run) {
		return ""
	}
	return run + " is not a tmpfs: CRIU cannot cache its kernel probe there, so each suspend, resume and fork --memory-state probes the kernel again (mount a tmpfs on " + run + " at boot, as systemd does)"
}

// runDirNote says why run-time state in dir (run_dir) costs more than it
// should, or "" when it does not. Each create and removal writes and
// deletes a dozen files and directories there (the runtime's state, the
// bundle, the network namespace's bind mount); on a disk file system that
// is journal traffic, which the metadata database's fsyncs then wait for.
func runDirNote(dir string) string {
	if !notTmpfs(dir) {
		return ""
	}
	return "run_dir " + dir + " is not a tmpfs: every create and removal writes its run-time state to disk there, which costs CPU and slows creates and removals (mount a tmpfs on it at boot, as systemd does for /run; the daemon mounts one itself only on an empty run_dir, with run_dir_tmpfs = true)"
}

// notTmpfs reports whether p is on a file system other than a tmpfs
// (false when that cannot be told).
func notTmpfs(p string) bool {
	var st unix.Statfs_t
	return unix.Statfs(p, &st) == nil && st.Type != unix.TMPFS_MAGIC
}

// cgroupMode reports "v2", "hybrid" or "v1".
func cgroupMode() string {
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "v2"
	}
	if unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return "hybrid"
	}
	return "v1"
}

// agentDir holds the installed slim agents.
func agentDir(cfg Config) string { return filepath.Join(cfg.Root, "agent") }

// defaultAgent is the agent binary when the configuration names none: the
// slim agent embedded in this corral (installed under dir), else this very
// binary (`corral agent`). A slim agent from another build than this one is
// not run: the daemon and its agents must speak the same protocol.
func defaultAgent(ctx context.Context, dir string, slim []byte) (string, error) {
	if slim != nil {
		err := agentbin.SameBuild(slim)
		if err == nil {
			var path string
			if path, err = agentbin.Install(dir, slim); err == nil {
				return path, nil
			}
		}
		log.G(ctx).Warn("not using the embedded slim agent; sandboxes run this binary as their agent", "error", err)
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("agent binary: %w", err)
	}
	return self, nil
}

// defaultInit installs the box init embedded in this corral under dir and
// returns its path, or "" when there is none (a plain go build) or it
// cannot be installed: agents then run as PID 1 and never exit when idle.
func defaultInit(ctx context.Context, dir string, bin []byte) string {
	if bin == nil {
		log.G(ctx).Info("no corral-init in this build (scripts/build.sh embeds it): each sandbox's agent is its PID 1 and stays while the box lives")
		return ""
	}
	path, err := agentbin.InstallAs(dir, agentbin.InitPrefix, bin)
	if err == nil {
		err = checkStatic(path)
	}
	if err != nil {
		log.G(ctx).Warn("not using the embedded corral-init; each sandbox's agent is its PID 1 and stays while the box lives", "error", err)
		return ""
	}
	return path
}

// pruneAgents removes the installed agents and inits in dir (earlier
// builds') that no sandbox record refers to: after recovery, a running,
// paused, suspended or pooled box keeps the files its spec names, since a
// suspended box's checkpoint needs those very binaries to resume.
func pruneAgents(ctx context.Context, dir string, inUse map[string]bool) {
	agents, err := filepath.Glob(filepath.Join(dir, agentbin.Prefix+"*"))
	if err != nil {
		return
	}
	inits, err := filepath.Glob(filepath.Join(dir, agentbin.InitPrefix+"*"))
	if err != nil {
		return
	}
	for _, p := range append(agents, inits...) {
		if inUse[p] {
			continue
		}
		if err := os.Remove(p); err != nil {
			log.G(ctx).Warn("remove an unused agent binary", "path", p, "error", err)
			continue
		}
		log.G(ctx).Info("removed an unused agent binary", "path", p)
	}
}

// checkStatic refuses an agent binary that needs a dynamic loader: it runs
// inside sandboxes whose image may have no C library, where its exec
// fails with a bare "no such file or directory".
func checkStatic(p string) error {
	f, err := elf.Open(p)
	if err != nil {
		return fmt.Errorf("agent binary %s: %w", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("agent binary %s is dynamically linked, so it cannot start in a sandbox whose image has no C library: build it with CGO_ENABLED=0 (scripts/build.sh does): %w", p, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
