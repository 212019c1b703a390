package bench

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// peer does the lifecycle of /bin/true with another tool on the same
// busybox root file system.
type peer struct {
	name string
	// run does one lifecycle; i tells calls apart. It is safe for
	// concurrent use.
	run func(ctx context.Context, i int) error
	// close undoes the setup; nil when there is nothing to undo.
	close func()
}

// errNotInstalled marks a peer whose tool is missing; its rows say so and
// the rest of the run goes on.
var errNotInstalled = errors.New("not installed")

func notInstalled(name, pkg string) error {
	return fmt.Errorf("%s %w (apt-get install %s)", name, errNotInstalled, pkg)
}

// peer returns the named peer, set up on first use.
func (r *run) peer(ctx context.Context, name string) (*peer, error) {
	r.peersMu.Lock()
	defer r.peersMu.Unlock()
	if p, ok := r.peers[name]; ok {
		return p, nil
	}
	var p *peer
	var err error
	switch name {
	case "crun", "runc":
		p, err = r.rawOCI(ctx, name)
	case "bwrap":
		p, err = r.bwrap()
	case "podman":
		p, err = r.podman(ctx)
	case "runsc":
		p, err = r.rawRunsc(ctx)
	default:
		err = fmt.Errorf("unknown peer %q (want crun, runc, runsc, bwrap or podman)", name)
	}
	if err != nil {
		return nil, err
	}
	r.peers[name] = p
	return p, nil
}

// rawOCI runs "<runtime> run" of /bin/true on the runtime's default spec
// (`<runtime> spec`), from the same kind of private mount namespace the
// daemon uses, so crun works on hybrid cgroup hosts too.
func (r *run) rawOCI(ctx context.Context, name string) (*peer, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, notInstalled(name, name)
	}
	ns, err := r.namespace()
	if err != nil {
		return nil, err
	}
	bundle, err := r.bundle(ctx, name, bin, name+"-bundle", []string{"/bin/true"}, 0)
	if err != nil {
		return nil, err
	}
	state := filepath.Join(r.cfg.WorkDir, name+"-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	var seq atomic.Int64
	return &peer{
		name: name,
		run: func(ctx context.Context, _ int) error {
			id := fmt.Sprintf("bench-%s-%d-%d", name, os.Getpid(), seq.Add(1))
			_, err := ns.run(exec.CommandContext(ctx, bin, "--root", state, "run", "--bundle", bundle, id))
			return err
		},
	}, nil
}

// bundle makes an OCI bundle in dir from "<bin> spec", running args on the
// busybox root with a memory limit unless memory is 0.
func (r *run) bundle(ctx context.Context, name, bin, dir string, args []string, memory int64) (string, error) {
	bundle := filepath.Join(r.cfg.WorkDir, dir)
	if err := os.MkdirAll(bundle, 0o755); err != nil {
		return "", err
	}
	_ = os.Remove(filepath.Join(bundle, "config.json"))
	gen := exec.CommandContext(ctx, bin, "spec")
	gen.Dir = bundle
	if out, err := gen.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s spec: %w: %s", name, err, out)
	}
	if err := patchSpecWith(filepath.Join(bundle, "config.json"), r.rootfs, args, memory); err != nil {
		return "", err
	}
	return bundle, nil
}

func (r *run) bwrap() (*peer, error) {
	bin, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, notInstalled("bwrap", "bubblewrap")
	}
	return &peer{
		name: "bwrap",
		run: func(ctx context.Context, _ int) error {
			cmd := exec.CommandContext(ctx, bin, "--ro-bind", r.rootfs, "/", "--proc", "/proc", "--dev", "/dev",
				"--unshare-all", "--die-with-parent", "/bin/true")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("bwrap: %w: %s", err, out)
			}
			return nil
		},
	}, nil
}

// podmanImage is the image the podman peer imports from the busybox root.
const podmanImage = "localhost/corral-bench-busybox:latest"

// podmanHostDirs are made by any rootful podman whatever its --root: the
// netavark state (/run/containers/networks) and the blob info cache
// (/var/lib/containers/cache). The podman peer removes those it made.
var podmanHostDirs = []string{"/run/containers", "/var/lib/containers"}

// PodmanGlobalFlags are the podman flags the peer runs with: storage of its
// own under the bench's work directory (never the host's podman storage),
// crun's state and seccomp cache there too (else /run/crun/.cache),
// cgroupfs because the cgroup-v1 hybrid hosts we run on have no systemd
// cgroup manager to talk to, and file events because there may be no
// journald. podman itself runs from the private mount namespace the daemon
// uses, where crun accepts a hybrid cgroup host.
func PodmanGlobalFlags(dir string) []string {
	return []string{
		"--root", filepath.Join(dir, "root"),
		"--runroot", filepath.Join(dir, "runroot"),
		"--tmpdir", filepath.Join(dir, "tmp"),
		"--runtime-flag", "root=" + filepath.Join(dir, "crun"),
		"--storage-driver", "overlay",
		"--cgroup-manager", "cgroupfs",
		"--events-backend", "file",
	}
}

// PodmanRunFlags are the flags of the timed `podman run` under the cgroup
// parent cgroup: no network, like a Corral sandbox by default, and never a
// pull. The cgroup parent (podman's default is libpod_parent, which it
// leaves behind) holds conmon's and the containers' cgroups and is removed
// at the end.
func PodmanRunFlags(cgroup string) []string {
	return []string{"run", "--rm", "--pull", "never", "--network", "none", "--cgroup-parent", "/" + cgroup}
}

// podman runs `podman run --rm` of /bin/true in an image imported from
// the busybox root, with storage of its own under the work directory.
func (r *run) podman(ctx context.Context) (*peer, error) {
	bin, err := exec.LookPath("podman")
	if err != nil {
		return nil, notInstalled("podman", "podman")
	}
	ns, err := r.namespace()
	if err != nil {
		return nil, err
	}
	var made []string
	for _, d := range podmanHostDirs {
		if _, err := os.Lstat(d); errors.Is(err, fs.ErrNotExist) {
			made = append(made, d)
		}
	}
	dir := filepath.Join(r.cfg.WorkDir, "podman")
	global := PodmanGlobalFlags(dir)
	cgroup := "corral-bench-podman-" + r.id
	runFlags := PodmanRunFlags(cgroup)
	cmd := func(ctx context.Context, args ...string) *exec.Cmd {
		c := exec.CommandContext(ctx, bin, append(global[:len(global):len(global)], args...)...)
		c.Env = append(os.Environ(), "PODMAN_IGNORE_CGROUPSV1_WARNING=1")
		return c
	}
	// Never "podman system reset": it would also remove the host's
	// network definitions.
	cleanup := func() {
		_, _ = ns.run(cmd(context.Background(), "rmi", "--force", podmanImage))
		_ = os.RemoveAll(dir)
		for _, d := range made {
			_ = os.RemoveAll(d)
		}
		removeCgroups(cgroupRoot, cgroup)
	}
	tarball := filepath.Join(r.cfg.WorkDir, "rootfs.tar")
	if err := tarDir(r.rootfs, tarball); err != nil {
		return nil, err
	}
	if _, err := ns.run(cmd(ctx, "import", "--quiet", tarball, podmanImage)); err != nil {
		cleanup()
		return nil, fmt.Errorf("podman import: %w", err)
	}
	return &peer{
		name: "podman",
		run: func(ctx context.Context, _ int) error {
			_, err := ns.run(cmd(ctx, append(runFlags[:len(runFlags):len(runFlags)], podmanImage, "/bin/true")...))
			return err
		},
		close: cleanup,
	}, nil
}

// cgroupRoot is where the cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// removeCgroups removes the cgroup name and every cgroup below it in each
// hierarchy mounted under root (v1: root/<controller>/name; v2:
// root/name), deepest first. Only empty cgroups can go: a cgroup that
// still has processes stays.
func removeCgroups(root, name string) {
	tops, _ := filepath.Glob(filepath.Join(root, "*", name))
	if fi, err := os.Stat(filepath.Join(root, name)); err == nil && fi.IsDir() {
		tops = append(tops, filepath.Join(root, name))
	}
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	}
}

// tarDir writes the tree at root as a tar archive at dst.
func tarDir(root, dst string) (retErr error) {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if err := f.Close(); retErr == nil {
			retErr = err
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return nil
		}
		src, err := os.Open(p)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		return fmt.Errorf("tar %s: %w", root, err)
	}
	return tw.Close()
}
