package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/cgroups"
	"github.com/corral-sandbox/corral/internal/mount"
	"github.com/corral-sandbox/corral/internal/runtime/runtimetest"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
	"github.com/corral-sandbox/corral/internal/testutil"
)

const testCgroupParent = "corraltest"

// busyboxRootfs returns a directory holding /bin/busybox, applet links and
// the mount points the runtime needs.
func busyboxRootfs(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "proc", "dev", "sys", "tmp", "etc", ".corral"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src, err := os.Open("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(filepath.Join(root, "bin/busybox"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	for _, a := range []string{"sh", "sleep", "cat", "ls", "ps", "grep", "wc", "echo", "true", "seq", "mkdir", "touch", "id", "ip", "nc", "head", "unshare", "mount"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, ".corral/corral"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// newTestRuntime returns a Runtime with short private directories (agent
// socket paths must fit sun_path) and removes everything at cleanup.
func newTestRuntime(t testing.TB, binary string, opts ...Opt) *Runtime {
	t.Helper()
	testutil.RequiresRoot(t)
	testutil.RequiresBinary(t, binary)
	base, err := os.MkdirTemp("/run", "co") // tmpfs, like production
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	r, err := New(Config{
		Binary:       binary,
		StateDir:     filepath.Join(base, "s"),
		RunDir:       filepath.Join(base, "r"),
		CgroupParent: testCgroupParent,
	}, opts...)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() {
		r.Close()
		_ = cgroups.Remove(cgroups.Root, "/"+testCgroupParent)
	})
	return r
}

func testSpec(t testing.TB, res sandbox.Resources) *sandbox.Spec {
	return &sandbox.Spec{
		Rootfs:      []mount.Mount{{Type: "bind", Source: busyboxRootfs(t), Options: []string{"rbind"}}},
		Env:         []string{"HOME=/root"},
		Hostname:    "box",
		Resources:   res,
		AgentBinary: "/bin/busybox",
	}
}

// withRunsc runs the binary as runsc (the gvisor tier).
func withRunsc(r *Runtime) { r.runsc = &RunscConfig{Platform: DefaultRunscPlatform} }

var defaultResources = sandbox.Resources{CPUs: 1, MemoryBytes: 256 << 20, Pids: 64}

func TestConformance(t *testing.T) {
	// runsc is the gvisor tier's dialect of the same Runtime.
	for _, bin := range []string{"crun", "runc", "runsc"} {
		t.Run(bin, func(t *testing.T) {
			testutil.RequiresRoot(t)
			testutil.RequiresBinary(t, bin)
			opts := []Opt{WithProcessArgs("/bin/sleep", "1000000")}
			if bin == "runsc" {
				opts = append(opts, withRunsc)
			}
			runtimetest.Run(t, func(t *testing.T) (sandbox.Runtime, runtimetest.Env) {
				r := newTestRuntime(t, bin, opts...)
				return r, runtimetest.Env{
					Spec:      func(t *testing.T) *sandbox.Spec { return testSpec(t, defaultResources) },
					MountInfo: r.MountInfoPath(),
					RunDir:    r.cfg.RunDir,
					PID1Comm:  "sleep",
					CgroupDirs: func(id string) []string {
						d, _ := cgroups.Dirs(cgroups.Root, r.CgroupPath(id))
						return d
					},
					Disk: diskSpec,
					Exec: r.testExec,
				}
			})
		})
	}
}

// diskSpec is testSpec on a writable layer of the overlay store limited to
// limit bytes (see runtimetest.Env.Disk).
func diskSpec(t *testing.T, limit int64) *sandbox.Spec {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 not installed (apt-get install e2fsprogs)")
	}
	ctx := testutil.Context(t)
	store, err := overlay.New(t.TempDir(), overlay.WithPoolSize(0), overlay.WithDiskVolume(overlay.DiskVolumeOff))
	if err != nil {
		t.Fatalf("overlay.New() = %v", err)
	}
	t.Cleanup(func() { store.Close() })
	base := busyboxRootfs(t)
	if err := store.CreateLayer(ctx, "busybox", "", func(dir string) error {
		return exec.Command("cp", "-a", base+"/.", dir).Run()
	}); err != nil {
		t.Fatalf("CreateLayer() = %v", err)
	}
	ms, err := store.Prepare(ctx, "disk", "busybox", sandbox.PrepareOpts{DiskBytes: limit})
	if err != nil {
		t.Fatalf("Prepare(%d bytes) = %v", limit, err)
	}
	t.Cleanup(func() {
		if err := store.Remove(context.WithoutCancel(ctx), "disk"); err != nil {
			t.Errorf("cleanup: Remove(disk) = %v", err)
		}
	})
	spec := testSpec(t, defaultResources)
	spec.Rootfs = ms
	spec.Resources.DiskBytes = limit
	return spec
}

// testExec runs args in running sandbox id with the runtime's exec (see
// runtimetest.Env.Exec).
func (r *Runtime) testExec(ctx context.Context, id string, args ...string) ([]byte, error) {
	cmd := r.command(ctx, r.globalArgs(append([]string{"exec", id}, args...)...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := r.ns.Do(cmd.Start); err != nil {
		return nil, err
	}
	err := cmd.Wait()
	return out.Bytes(), err
}

// runScript runs script as the box's PID 1 until it exits and returns its
// output.
func runScript(t *testing.T, r *Runtime, res sandbox.Resources, script string) string {
	t.Helper()
	return runScriptSpec(t, r, testSpec(t, res), script)
}

// runScriptSpec is runScript in a box made from spec.
func runScriptSpec(t *testing.T, r *Runtime, spec *sandbox.Spec, script string) string {
	t.Helper()
	ctx := testutil.Context(t)
	id := runtimetest.ID(t)
	r.processArgs = []string{"/bin/sh", "-c", script}
	if err := r.Create(ctx, id, spec); err != nil {
		t.Fatalf("Create(%q) = %v", id, err)
	}
	t.Cleanup(func() {
		if err := r.Delete(context.WithoutCancel(ctx), id); err != nil {
			t.Errorf("Delete(%q) = %v", id, err)
		}
	})
	if err := r.Start(ctx, id); err != nil {
		t.Fatalf("Start(%q) = %v", id, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := r.State(ctx, id)
		if err != nil {
			t.Fatalf("State(%q) = %v", id, err)
		}
		if st.Status == sandbox.StatusStopped {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("script in %q still running after 30s", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir(id), agentLog))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestIsolation(t *testing.T) {
	for _, bin := range []string{"crun", "runc"} {
		t.Run(bin, func(t *testing.T) {
			r := newTestRuntime(t, bin)
			tests := []struct {
				name   string
				script string
				check  func(out string) error
			}{
				{"pid namespace", "ls /proc | grep -c '^[0-9]'", func(out string) error {
					if n := strings.TrimSpace(out); n != "1" && n != "2" && n != "3" {
						return fmt.Errorf("%s pids visible", n)
					}
					return nil
				}},
				{"pid 1", "echo $$", wantLine("1")},
				{"no sys_admin", "grep CapEff /proc/self/status", func(out string) error {
					var eff uint64
					if _, err := fmt.Sscanf(strings.TrimSpace(out), "CapEff:\t%x", &eff); err != nil {
						return err
					}
					const sysAdmin, netRaw, mknod, chown = 21, 13, 27, 0
					if eff&(1<<sysAdmin|1<<netRaw|1<<mknod) != 0 || eff&(1<<chown) == 0 {
						return fmt.Errorf("CapEff %x", eff)
					}
					return nil
				}},
				{"no_new_privs", "grep NoNewPrivs /proc/self/status", wantLine("NoNewPrivs:\t1")},
				{"seccomp", "grep '^Seccomp:' /proc/self/status", wantLine("Seccomp:\t2")},
				{"only loopback", "ls /sys/class/net", wantLine("lo")},
				{"loopback up", "cat /sys/class/net/lo/operstate /sys/class/net/lo/flags", func(out string) error {
					if !strings.Contains(out, "0x9") { // IFF_UP|IFF_LOOPBACK
						return fmt.Errorf("lo flags %q", out)
					}
					return nil
				}},
				{"masked paths", "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do [ -e $f ] && echo $f $(wc -c < $f); done", func(out string) error {
					lines := strings.Split(strings.TrimSpace(out), "\n")
					if len(lines) == 0 || lines[0] == "" {
						return errors.New("no masked file to check")
					}
					for _, l := range lines {
						if !strings.HasSuffix(l, " 0") {
							return fmt.Errorf("%q is not empty", l)
						}
					}
					return nil
				}},
				{"sys read-only", "touch /sys/kernel/x 2>&1 || echo denied", contains("denied")},
				{"proc sys read-only", "echo 1 > /proc/sys/kernel/domainname 2>&1 || echo denied", contains("denied")},
				{"mount denied", "mkdir -p /tmp/m; mount -t tmpfs x /tmp/m 2>&1 || echo denied", contains("denied")},
				{"unshare denied", "unshare -U true 2>&1 || echo denied", contains("denied")},
				{"hostname", "cat /proc/sys/kernel/hostname", wantLine("box")},
				{"agent binary read-only", "echo x > /.corral/corral 2>&1 || echo denied", contains("denied")},
				{"listen fd", "ls -l /proc/self/fd/3", contains("socket:")},
				{"nofile", "ulimit -n; ulimit -Hn", wantLine(fmt.Sprintf("%d\n%d", min(DefaultNoFile, softNoFile), DefaultNoFile))},
				{"memory limit", "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max", wantLine(fmt.Sprint(defaultResources.MemoryBytes))},
				{"dev nodes", "ls /dev | sort | tr '\\n' ' '", func(out string) error {
					for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty", "pts", "shm", "mqueue"} {
						if !strings.Contains(out, n) {
							return fmt.Errorf("/dev lacks %s: %q", n, out)
						}
					}
					return nil
				}},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					out := runScript(t, r, defaultResources, tc.script)
					if err := tc.check(out); err != nil {
						t.Errorf("box output of %q = %q: %v", tc.script, out, err)
					}
				})
			}
		})
	}
}

func wantLine(want string) func(string) error {
	return func(out string) error {
		if got := strings.TrimSpace(out); got != want {
			return fmt.Errorf("want %q", want)
		}
		return nil
	}
}

func contains(want string) func(string) error {
	return func(out string) error {
		if !strings.Contains(out, want) {
			return fmt.Errorf("want it to contain %q", want)
		}
		return nil
	}
}

func TestPidsLimit(t *testing.T) {
	r := newTestRuntime(t, "crun")
	res := sandbox.Resources{CPUs: 1, MemoryBytes: 256 << 20, Pids: 16}
	// Start 40 sleepers; the pids limit lets at most 16 tasks exist.
	out := runScript(t, r, res, `i=0; while [ $i -lt 40 ]; do (sleep 100 &) 2>/dev/null; i=$((i+1)); done; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo count $n`)
	var n int
	if _, err := fmt.Sscanf(out[strings.Index(out, "count"):], "count %d", &n); err != nil {
		t.Fatalf("box output = %q: %v", out, err)
	}
	if n > 16 || n < 2 {
		t.Errorf("tasks in a box limited to 16 pids = %d; want 2..16", n)
	}
}

func TestUsage(t *testing.T) {
	ctx := testutil.Context(t)
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sleep", "1000000"))
	id := runtimetest.ID(t)
	if _, err := r.Usage(ctx, id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Usage(%q) of unknown = %v; want ErrNotFound", id, err)
	}
	if err := r.Create(ctx, id, testSpec(t, defaultResources)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), id) })
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	u, err := r.Usage(ctx, id)
	if err != nil {
		t.Fatalf("Usage(%q) = %v", id, err)
	}
	if u.MemoryLimitBytes != uint64(defaultResources.MemoryBytes) || u.PidsLimit != uint64(defaultResources.Pids) || u.Pids < 1 || u.MemoryBytes == 0 {
		t.Errorf("Usage(%q) = %+v; want memory limit %d, pids limit %d, pids >= 1", id, u, defaultResources.MemoryBytes, defaultResources.Pids)
	}
	ids, err := r.List(ctx)
	if err != nil || len(ids) != 1 || ids[0] != id {
		t.Errorf("List() = %q, %v; want [%q]", ids, err, id)
	}
}

// BenchmarkLifecycle measures Create+Start+Delete of a box whose PID 1 is
// /bin/true; compare with BenchmarkRawRun.
func BenchmarkLifecycle(b *testing.B) {
	r := newTestRuntime(b, "crun", WithProcessArgs("/bin/true"))
	ctx := context.Background()
	spec := testSpec(b, defaultResources)
	for i := 0; b.Loop(); i++ {
		id := fmt.Sprintf("bench-%d", i)
		if err := r.Create(ctx, id, spec); err != nil {
			b.Fatal(err)
		}
		if err := r.Start(ctx, id); err != nil {
			b.Fatal(err)
		}
		if err := r.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawRun measures a plain "crun run" of /bin/true (which creates,
// runs and deletes the container in one exec) from the runtime's thread,
// with the same bundle as BenchmarkLifecycle.
func BenchmarkRawRun(b *testing.B) {
	r := newTestRuntime(b, "crun", WithProcessArgs("/bin/true"))
	ctx := context.Background()
	if err := r.Create(ctx, "raw", testSpec(b, defaultResources)); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = r.Delete(ctx, "raw") })
	bundle := filepath.Join(r.Dir("raw"), bundleDir)
	for i := 0; b.Loop(); i++ {
		cmd := exec.Command(r.binary, "--root", r.cfg.StateDir, "run", "--bundle", bundle, fmt.Sprintf("raw-%d", i))
		if err := r.ns.Do(cmd.Start); err != nil {
			b.Fatal(err)
		}
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHostToolsUnderSeccomp runs the host's bash, coreutils, python and a Go
// binary (the go tool) inside a box, with the host's /usr bound read-only,
// to check that the seccomp profile and the dropped capabilities do not
// break ordinary programs.
func TestHostToolsUnderSeccomp(t *testing.T) {
	for _, bin := range []string{"crun", "runc"} {
		t.Run(bin, func(t *testing.T) {
			r := newTestRuntime(t, bin)
			ctx := testutil.Context(t)
			id := runtimetest.ID(t)
			spec := testSpec(t, defaultResources)
			root := spec.Rootfs[0].Source
			for _, l := range []string{"lib", "lib64"} {
				if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
					t.Fatal(err)
				}
			}
			spec.Binds = []sandbox.Bind{{Source: "/usr", Target: "/usr", Readonly: true}}
			script := `set -e
/usr/bin/bash -c 'echo bash-ok; sleep 0.01 & wait'
/usr/bin/ls / > /dev/null && echo ls-ok
/usr/bin/python3 -c 'import os, subprocess, threading; subprocess.run(["true"]); print("python-ok")'
GOCACHE=/tmp/gocache HOME=/tmp /usr/local/go/bin/go version > /dev/null && echo go-ok`
			r.processArgs = []string{"/bin/sh", "-c", script}
			if err := r.Create(ctx, id, spec); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), id) })
			if err := r.Start(ctx, id); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				st, err := r.State(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if st.Status == sandbox.StatusStopped {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("tools still running after 60s")
				}
			}
			b, _ := os.ReadFile(filepath.Join(r.Dir(id), agentLog))
			for _, want := range []string{"bash-ok", "ls-ok", "python-ok", "go-ok"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("box output = %q; want it to contain %q", b, want)
				}
			}
		})
	}
}

// TestDeleteWithDamagedMountRecord: a sandbox directory whose mounts.json is
// truncated (as a crash could leave it before writes became atomic, or a disk
// error can) is still unmounted and removed, from what mountinfo shows.
func TestDeleteWithDamagedMountRecord(t *testing.T) {
	r := newTestRuntime(t, "crun")
	const id = "damaged0"
	dir := r.Dir(id)
	rootfs := filepath.Join(dir, rootfsDir)
	if err := os.MkdirAll(rootfs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, mountsFile), []byte(`["`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.ns.Do(func() error { return unix.Mount("tmpfs", rootfs, "tmpfs", 0, "size=1m") }); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete(context.Background(), id); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("sandbox directory after Delete: %v, want it gone", err)
	}
	left, err := mount.Under(r.MountInfoPath(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("mounts left after Delete: %q", left)
	}
}

// TestDeleteKillsStrayProcess checks that Delete kills a process in the
// box's cgroups that is not in its pid namespace (such as what a restore
// cut short leaves) and still removes the cgroups.
func TestDeleteKillsStrayProcess(t *testing.T) {
	ctx := testutil.Context(t)
	r := newTestRuntime(t, "crun", WithProcessArgs("/bin/sleep", "1000000"))
	id := runtimetest.ID(t)
	if err := r.Create(ctx, id, testSpec(t, defaultResources)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), id) })
	if err := r.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	stray := exec.Command("sleep", "1000")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stray.Process.Kill() })
	dirs, err := cgroups.Dirs(cgroups.Root, r.CgroupPath(id))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("cgroup dirs = %v, %v", dirs, err)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(stray.Process.Pid)), 0); err != nil {
			t.Fatalf("move the stray process into %s: %v", d, err)
		}
	}
	if err := r.Delete(ctx, id); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- stray.Wait() }()
	select {
	case err := <-waited:
		if ws, ok := stray.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Errorf("stray process ended with %v; want killed by SIGKILL", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stray process still runs after Delete")
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("cgroup %s after Delete: %v; want it gone", d, err)
		}
	}
}
