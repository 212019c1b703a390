//go:build integration

// Package integration runs end-to-end tests against the built corral binary:
// a real daemon on temporary directories, real sandboxes made with crun or
// runc, driven through the CLI exactly as a user would.
package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/testutil"
)

// corralBin is the static binary built once by TestMain.
var corralBin string

func TestMain(m *testing.M) {
	if reason := testutil.RequiresRootM(); reason != "" {
		fmt.Println("skipping integration tests:", reason)
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "corral-integration-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	corralBin = filepath.Join(dir, "corral")
	// scripts/build.sh, as a user builds corral: with the slim agent
	// embedded, which the daemons under test then run in every box.
	build := exec.Command("bash", "../scripts/build.sh", corralBin)
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build corral: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// daemon is one `corral serve` under test.
type daemon struct {
	t       *testing.T
	root    string // state dir
	run     string // runtime dir
	socket  string
	config  string
	cgroup  string // cgroup parent name, unique per test
	cmd     *exec.Cmd
	logFile string
	net     netState // before the daemon started
}

// startDaemon starts a daemon on fresh temporary directories and stops it
// (gracefully) at the end of the test.
func startDaemon(t *testing.T) *daemon {
	t.Helper()
	return startDaemonWith(t, nil)
}

// startDaemonWith is startDaemon with a hook that may add configuration
// lines (and files in the test's directory) before the daemon starts.
func startDaemonWith(t *testing.T, extra func(cfg *string, dir string)) *daemon {
	t.Helper()
	base, err := os.MkdirTemp("", "corral-it-")
	if err != nil {
		t.Fatal(err)
	}
	d := &daemon{
		t:      t,
		root:   filepath.Join(base, "root"),
		run:    filepath.Join(base, "run"),
		cgroup: "corral-it-" + strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())),
	}
	d.socket = filepath.Join(d.run, "corral.sock")
	d.config = filepath.Join(base, "corral.toml")
	d.logFile = filepath.Join(base, "daemon.log")
	cfg := fmt.Sprintf(`version = 1
root = %q
run_dir = %q
socket = %q
cgroup_parent = %q
disk_pool_size = 2
# Debian's runc (1.1.15) has the November 2025 runc advisories unfixed: the
# daemon refuses it unless told otherwise (TestRuntimeRefusedForVersion).
allow_unsafe_runtimes = ["runc"]
`, d.root, d.run, d.socket, d.cgroup)
	if extra != nil {
		extra(&cfg, base)
	}
	if err := os.WriteFile(d.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	d.net = snapshotNet()
	// Registered before the start, so that a daemon that fails to become
	// ready is still stopped and its directory removed.
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			if b, err := os.ReadFile(d.logFile); err == nil {
				t.Logf("daemon log:\n%s", tail(string(b), 60))
			}
		}
		// A failed test may leave sandboxes, and with them the daemon's own
		// mounts (the store's disk volume, the tmpfs on run_dir), behind:
		// never delete files under a mount.
		mountinfo := readFile("/proc/self/mountinfo")
		for what, mp := range map[string]string{"disk volume": d.diskVolume(), "run_dir": d.run} {
			if strings.Contains(mountinfo, " "+mp+" ") {
				t.Errorf("%s %s still mounted after the daemon stopped; unmounting it", what, mp)
				_ = syscall.Unmount(mp, syscall.MNT_DETACH)
			}
		}
		// The volume store's shared root outlives a killed daemon, as
		// the volumes under it do (a stopped one without volumes takes it
		// away).
		_ = syscall.Unmount(filepath.Join(d.root, "volumes"), syscall.MNT_DETACH)
		os.RemoveAll(base)
		d.removeCgroupParent()
	})
	d.start()
	return d
}

// removeCgroupParent removes the daemon's parent cgroup, unique to the test,
// from every hierarchy once the daemon has stopped (a daemon keeps it, as
// its boxes may outlive it). A sandbox's cgroup still under it is a leak.
func (d *daemon) removeCgroupParent() {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + d.cgroup)
	dirs = append(dirs, "/sys/fs/cgroup/"+d.cgroup)
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				d.t.Errorf("cgroup %s left under %s after the test", e.Name(), dir)
			}
		}
		_ = os.Remove(dir)
	}
}

func (d *daemon) start() {
	d.t.Helper()
	logf, err := os.OpenFile(d.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(corralBin, "serve", "--config", d.config, "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.cmd = cmd
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, _, err := d.corral("version"); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	b, _ := os.ReadFile(d.logFile)
	d.t.Fatalf("daemon did not become ready in 20s; log:\n%s", tail(string(b), 40))
}

// stop terminates the daemon with SIGTERM and waits for it.
func (d *daemon) stop() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
		d.t.Errorf("daemon did not stop within 15s of SIGTERM")
	}
	d.cmd = nil
}

// tcpAddr returns the TCP address the daemon listens on, from its log.
func (d *daemon) tcpAddr() string {
	d.t.Helper()
	b, _ := os.ReadFile(d.logFile)
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, "serving API") {
			continue
		}
		for _, f := range strings.Fields(l) {
			if a, ok := strings.CutPrefix(f, "address="); ok && strings.HasPrefix(a, "127.0.0.1:") {
				return a
			}
		}
	}
	d.t.Fatalf("no TCP address in the daemon log")
	return ""
}

// kill SIGKILLs the daemon, as a crash would.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	_ = d.cmd.Wait()
	d.cmd = nil
}

// corral runs the CLI against this daemon and returns stdout, stderr and
// the error (an *exec.ExitError for a non-zero exit).
func (d *daemon) corral(args ...string) (string, string, error) {
	return d.corralIn(nil, args...)
}

func (d *daemon) corralIn(stdin []byte, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, corralBin, append([]string{"--host", "unix://" + d.socket}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	return out.String(), errb.String(), err
}

// must runs the CLI and fails the test on a non-zero exit.
func (d *daemon) must(args ...string) string {
	d.t.Helper()
	out, errOut, err := d.corral(args...)
	if err != nil {
		d.t.Fatalf("corral %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// create makes a sandbox and removes it at the end of the test.
func (d *daemon) create(args ...string) string {
	d.t.Helper()
	id := strings.TrimSpace(d.must(append([]string{"create"}, args...)...))
	if id == "" {
		d.t.Fatal("corral create printed no ID")
	}
	d.t.Cleanup(func() { _, _, _ = d.corral("rm", "-f", id) })
	return id
}

// exitCode returns the process exit code carried by err (0 for nil).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}
