package daemon

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/api/gen/process"
	"github.com/corral-sandbox/corral/api/rest"
	"github.com/corral-sandbox/corral/internal/agentclient"
	"github.com/corral-sandbox/corral/internal/testutil"
)

// buildAgent builds the slim agent (cmd/corral-agent), statically.
func buildAgent(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "corral")
	gobin := filepath.Join(goruntime.GOROOT(), "bin", "go")
	cmd := exec.Command(gobin, "build", "-o", out, "../../cmd/corral-agent")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build agent: %v\n%s", err, b)
	}
	return out
}

func TestDaemonEndToEnd(t *testing.T) {
	testutil.RequiresRoot(t)
	agentBin := buildAgent(t)
	for _, rt := range []string{"runc", "crun"} {
		t.Run(rt, func(t *testing.T) {
			testutil.RequiresBinary(t, rt)
			ctx := testutil.Context(t)
			cfg := DefaultConfig()
			cfg.Root = t.TempDir()
			cfg.RunDir = t.TempDir()
			cfg.Socket = filepath.Join(cfg.RunDir, "corral.sock")
			cfg.Runtimes = []string{rt}
			cfg.DefaultRuntime = rt
			// The end-to-end path is what is tested here, also with a
			// runtime this host only has in a version with known
			// vulnerabilities (Debian's runc); TestAssessRuntime checks
			// that it is refused without this.
			cfg.AllowUnsafeRuntimes = []string{rt}
			cfg.CgroupParent = "corraltest" + rt
			t.Cleanup(func() { // the runtime keeps the shared parent cgroup; this one is ours
				dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + cfg.CgroupParent)
				dirs2, _ := filepath.Glob("/sys/fs/cgroup/" + cfg.CgroupParent)
				for _, d := range append(dirs, dirs2...) {
					os.Remove(d)
				}
			})
			cfg.AgentBinary = agentBin
			cfg.DiskPoolSize = -1
			cfg.Resources.DiskBytes = 64 << 20
			d, err := New(ctx, cfg)
			if err != nil {
				t.Fatalf("New() = %v", err)
			}
			defer d.Close()
			srv := httptest.NewUnstartedServer(d.Handler())
			var protos http.Protocols
			protos.SetHTTP1(true)
			protos.SetUnencryptedHTTP2(true)
			srv.Config.Protocols = &protos
			srv.Start()
			defer srv.Close()

			resp, err := http.Post(srv.URL+"/v1/sandboxes", "application/json", strings.NewReader(`{"image":"busybox","name":"e2e"}`))
			if err != nil {
				t.Fatal(err)
			}
			var sb rest.Sandbox
			json.NewDecoder(resp.Body).Decode(&sb)
			resp.Body.Close()
			if resp.StatusCode != 201 {
				t.Fatalf("POST /v1/sandboxes = %d", resp.StatusCode)
			}
			t.Cleanup(func() { d.Manager().Delete(ctx, sb.ID, true) })

			c, err := agentclient.New(srv.URL + sb.AgentPath)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			stream, err := c.Process.Start(ctx, connect.NewRequest(&process.StartRequest{
				Process: &process.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo hello from $(hostname)"}},
			}))
			if err != nil {
				t.Fatalf("Start() through the proxy = %v", err)
			}
			var out bytes.Buffer
			exit := int32(-1)
			for stream.Receive() {
				ev := stream.Msg().GetEvent()
				out.Write(ev.GetData().GetStdout())
				if e := ev.GetEnd(); e != nil {
					exit = e.GetExitCode()
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatalf("stream = %v", err)
			}
			if got := out.String(); got != "hello from e2e\n" || exit != 0 {
				t.Errorf("exec output = %q exit %d; want \"hello from e2e\\n\" exit 0", got, exit)
			}

			// A restarted daemon recovers the running sandbox.
			srv.Close()
			c.Close()
			if err := d.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			d, err = New(ctx, cfg)
			if err != nil {
				t.Fatalf("New() after restart = %v", err)
			}
			defer d.Close()
			if rec, err := d.Manager().Get(ctx, "e2e"); err != nil || rec.ID != sb.ID || rec.State != "running" {
				t.Fatalf("Get(e2e) after restart = %+v, %v; want %s running", rec, err, sb.ID)
			}
			srv = httptest.NewServer(d.Handler())
			defer srv.Close()
			resp, err = http.Get(srv.URL + sb.AgentPath + "/health")
			if err != nil || resp.StatusCode/100 != 2 {
				t.Fatalf("agent health after restart = %v, %v; want 2xx", resp, err)
			}
			resp.Body.Close()

			req, _ := http.NewRequest("DELETE", srv.URL+"/v1/sandboxes/e2e", nil)
			resp, err = http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 204 {
				t.Fatalf("DELETE = %v %v; want 204", resp.StatusCode, err)
			}
			// The daemon's own made-ahead namespaces (netns_pool_size) live
			// until it stops: check the host once it has.
			if err := d.Close(); err != nil {
				t.Fatalf("Close() = %v", err)
			}
			assertNothingLeft(t, cfg, sb.ID)
		})
	}
}

// assertNothingLeft checks mounts, cgroups, run-time files and processes of
// sandbox id are gone.
func assertNothingLeft(t *testing.T, cfg Config, id string) {
	t.Helper()
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(mi), "\n") {
		if f := strings.Fields(l); len(f) > 4 && f[4] == cfg.RunDir {
			continue // the daemon's own tmpfs on run_dir (mountRunDir), not the sandbox's
		}
		if strings.Contains(l, id) || strings.Contains(l, cfg.RunDir) {
			t.Errorf("mount left: %s", l)
		}
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/" + cfg.CgroupParent + "/" + id)
	cg2, _ := filepath.Glob("/sys/fs/cgroup/" + cfg.CgroupParent + "/" + id)
	if left := append(cg, cg2...); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	filepath.WalkDir(cfg.RunDir, func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.Contains(p, id) {
			t.Errorf("run-time file left: %s", p)
		}
		return nil
	})
	filepath.WalkDir(filepath.Join(cfg.Root, "overlay"), func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.Contains(p, id) {
			t.Errorf("layer file left: %s", p)
		}
		return nil
	})
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), cfg.AgentBinary) || strings.Contains(string(b), "/.corral/corral") {
			t.Errorf("process left: %s %q", p, fmt.Sprint(strings.ReplaceAll(string(b), "\x00", " ")))
		}
	}
}

// TestCRIUCacheNote: a tmpfs needs no note; another file system gets one
// that names it.
func TestCRIUCacheNote(t *testing.T) {
	if note := criuCacheNote("/dev/shm"); note != "" {
		var st unix.Statfs_t
		if err := unix.Statfs("/dev/shm", &st); err == nil && st.Type == unix.TMPFS_MAGIC {
			t.Errorf("criuCacheNote(/dev/shm, a tmpfs) = %q; want none", note)
		}
	}
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Skipf("%s is a tmpfs (or statfs failed: %v): no other file system to try", dir, err)
	}
	if note := criuCacheNote(dir); !strings.Contains(note, dir+" is not a tmpfs") {
		t.Errorf("criuCacheNote(%s) = %q; want a note naming it", dir, note)
	}
	if note := runDirNote(dir); !strings.Contains(note, "run_dir "+dir+" is not a tmpfs") {
		t.Errorf("runDirNote(%s) = %q; want a note naming it", dir, note)
	}
	if note := runDirNote(filepath.Join(dir, "missing")); note != "" {
		t.Errorf("runDirNote(a missing directory) = %q; want none", note)
	}
}

// TestRunDirNoteTmpfs: a run_dir on a tmpfs gets no note.
func TestRunDirNoteTmpfs(t *testing.T) {
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Skip("/dev/shm is not a tmpfs here")
	}
	if note := runDirNote("/dev/shm"); note != "" {
		t.Errorf("runDirNote(/dev/shm) = %q; want none", note)
	}
}

// TestMountRunDir: an empty run_dir on a disk file system gets the daemon's
// tmpfs once (a second start finds it), a run_dir that holds a file gets
// none, and unmountRunDir removes the daemon's tmpfs but never a tmpfs that
// someone else mounted there.
func TestMountRunDir(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	if !notTmpfs(dir) {
		t.Skip("the test's directory is on a tmpfs already")
	}
	ctx := testutil.Context(t)
	isTmpfs := func() bool { return !notTmpfs(dir) }
	t.Cleanup(func() {
		for isTmpfs() {
			if unix.Unmount(dir, unix.MNT_DETACH) != nil {
				return
			}
		}
	})

	if mounted, err := mountRunDir(dir); err != nil || !mounted || !isTmpfs() {
		t.Fatalf("mountRunDir(empty dir) = %v, %v (tmpfs %v); want a tmpfs", mounted, err, isTmpfs())
	}
	if err := os.WriteFile(filepath.Join(dir, "state"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if mounted, err := mountRunDir(dir); err != nil || mounted {
		t.Fatalf("mountRunDir(its own tmpfs) = %v, %v; want nothing to do", mounted, err)
	}
	if err := unmountRunDir(ctx, dir); err != nil || isTmpfs() {
		t.Fatalf("unmountRunDir = %v (tmpfs left %v)", err, isTmpfs())
	}

	if err := os.WriteFile(filepath.Join(dir, "left"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if mounted, err := mountRunDir(dir); err != nil || mounted || isTmpfs() {
		t.Fatalf("mountRunDir(dir with a file) = %v, %v; want no mount", mounted, err)
	}
	if err := unix.Mount("someone-else", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := unmountRunDir(ctx, dir); err != nil || !isTmpfs() {
		t.Fatalf("unmountRunDir(a tmpfs of another source) = %v, still mounted %v; want it left alone", err, isTmpfs())
	}
}

// TestCheckStatic: the daemon refuses a dynamically linked agent binary
// with a message that says how to build one, and takes a static one.
func TestCheckStatic(t *testing.T) {
	dynamic := ""
	for _, p := range []string{"/bin/true", "/usr/bin/true", "/bin/sh"} {
		if f, err := elf.Open(p); err == nil {
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP {
					dynamic = p
				}
			}
			f.Close()
		}
		if dynamic != "" {
			break
		}
	}
	if dynamic == "" {
		t.Skip("no dynamically linked binary found in /bin or /usr/bin")
	}
	if err := checkStatic(dynamic); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("checkStatic(%s) = %v; want an error saying to build with CGO_ENABLED=0", dynamic, err)
	}
	static := filepath.Join(t.TempDir(), "static")
	build := exec.Command("go", "build", "-o", static, "./testdata/static")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build a static binary: %v\n%s", err, out)
	}
	if err := checkStatic(static); err != nil {
		t.Errorf("checkStatic(static binary) = %v", err)
	}
	if err := checkStatic(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("checkStatic(missing file) = nil")
	}
}
