package build

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/corral-sandbox/corral/internal/image"
	"github.com/corral-sandbox/corral/internal/sandbox"
	"github.com/corral-sandbox/corral/internal/snapshot/overlay"
	"github.com/corral-sandbox/corral/internal/spec"
	"github.com/corral-sandbox/corral/internal/testutil"
)

func TestCacheKey(t *testing.T) {
	base := cacheKey("p", "run x", "", []string{"A=1"})
	for name, other := range map[string]string{
		"parent": cacheKey("q", "run x", "", []string{"A=1"}),
		"step":   cacheKey("p", "run y", "", []string{"A=1"}),
		"inputs": cacheKey("p", "run x", "abc", []string{"A=1"}),
		"env":    cacheKey("p", "run x", "", []string{"A=2"}),
		"split":  cacheKey("p", "run x", "", []string{"A=1", ""}),
	} {
		if other == base {
			t.Errorf("changing the %s does not change the cache key", name)
		}
	}
	if cacheKey("p", "run x", "", []string{"A=1"}) != base {
		t.Error("cacheKey is not deterministic")
	}
	if len(base) != 64 {
		t.Errorf("cache key %q is not 64 hex digits", base)
	}
}

func TestHashCopyInput(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tools", "a.sh")
	must(t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(t, os.WriteFile(p, []byte("v1"), 0o755))
	c := spec.Copy{Src: "tools", Dst: "/opt/tools"}
	h1, err := hashCopyInput(dir, c)
	must(t, err)
	if h, _ := hashCopyInput(dir, c); h != h1 {
		t.Fatal("hashCopyInput is not deterministic")
	}
	must(t, os.WriteFile(p, []byte("v2"), 0o755))
	h2, err := hashCopyInput(dir, c)
	must(t, err)
	if h2 == h1 {
		t.Error("changed content, same hash")
	}
	// A fresh checkout of the same files: new modification times (of the
	// files and of their directories) keep the key.
	later := time.Now().Add(48 * time.Hour)
	must(t, os.Chtimes(p, later, later))
	must(t, os.Chtimes(filepath.Dir(p), later, later))
	if h, _ := hashCopyInput(dir, c); h != h2 {
		t.Error("changed modification times, changed hash; want the same (content, mode and names only)")
	}
	must(t, os.Chmod(p, 0o644))
	if h3, _ := hashCopyInput(dir, c); h3 == h2 {
		t.Error("changed mode, same hash")
	}
	if h4, _ := hashCopyInput(dir, spec.Copy{Src: "tools", Dst: "/opt/tools", Owner: "1000"}); h4 == h2 {
		t.Error("changed owner, same hash")
	}
	must(t, os.WriteFile(filepath.Join(dir, "tools", "b.sh"), []byte("v1"), 0o644))
	if h, _ := hashCopyInput(dir, c); h == h2 {
		t.Error("an added file, same hash")
	}
	must(t, os.Rename(filepath.Join(dir, "tools", "b.sh"), filepath.Join(dir, "tools", "c.sh")))
	h5, _ := hashCopyInput(dir, c)
	must(t, os.Remove(filepath.Join(dir, "tools", "c.sh")))
	if h, _ := hashCopyInput(dir, c); h5 == h2 || h5 == h {
		t.Error("a renamed file, same hash")
	}
	if _, err := hashCopyInput(dir, spec.Copy{Src: "missing", Dst: "/x"}); err == nil {
		t.Error("a missing source hashed")
	}
	// A symlink out of the context is hashed as a link, never followed.
	must(t, os.Symlink("/etc", filepath.Join(dir, "tools", "etc")))
	if _, err := hashCopyInput(dir, c); err != nil {
		t.Errorf("a symlink in the context: %v", err)
	}
}

func TestSetupScript(t *testing.T) {
	if s := setupScript(&spec.Spec{}); s != "" {
		t.Errorf("setup for nothing = %q", s)
	}
	s := setupScript(&spec.Spec{User: "agent", Workdir: "/work space"})
	for _, want := range []string{"id -u 'agent'", "useradd -m", "adduser -D", ">> /etc/passwd", "mkdir -p '/work space'", "chown 'agent' '/work space'"} {
		if !strings.Contains(s, want) {
			t.Errorf("setup script lacks %q:\n%s", want, s)
		}
	}
	// A spec's PATH without sbin (the steps run with the spec's env) still
	// finds useradd.
	prologue, _, _ := strings.Cut(s, "\nif ")
	cmd := exec.Command("sh", "-c", prologue+"\necho \"$PATH\"")
	cmd.Env = []string{"PATH=/opt/tools:/usr/bin:/bin"}
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), ":/usr/sbin:") {
		t.Errorf("the setup script runs with PATH %q, %v; want /usr/sbin in it", out, err)
	}
	if s := setupScript(&spec.Spec{User: "1000"}); strings.Contains(s, "useradd") {
		t.Errorf("a numeric user is created: %s", s)
	}
	if got := shellQuote(`it's`); got != `'it'\''s'` {
		t.Errorf("shellQuote = %s", got)
	}
	if out, err := exec.Command("sh", "-c", "printf %s "+shellQuote(`a'b"$c`)).Output(); err != nil || string(out) != `a'b"$c` {
		t.Errorf("shellQuote through sh = %q, %v", out, err)
	}
}

// TestPlanNames checks the names the build shows its steps under: the
// step that makes the user and workdir as the spec writes them, not the
// shell script that does it.
func TestPlanNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		sp   spec.Spec
		want []string
	}{
		{"user and workdir", spec.Spec{User: "agent", Workdir: "/workspace", Run: []string{"echo  a\n  b"}},
			[]string{"user agent, workdir /workspace", "run echo a b"}},
		{"workdir", spec.Spec{Workdir: "/app", User: "1000"}, []string{"workdir /app"}},
		{"user", spec.Spec{User: "agent", Workdir: "/"}, []string{"user agent"}},
		{"neither", spec.Spec{Copy: []spec.Copy{{Src: "a", Dst: "/b"}}}, []string{"copy a /b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range plan(&tc.sp) {
				got = append(got, s.name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan(%s) names = %q; want %q", tc.name, got, tc.want)
			}
		})
	}
}

// TestCopyStep makes a copy layer directly (no sandbox): files land at the
// destination with the requested owner and mode, parent directories take
// their mode from the image beneath (a sticky /tmp stays sticky), and a
// symlink in the context is copied as a link.
func TestCopyStep(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := context.Background()
	fake, _ := exec.LookPath("true")
	layers, err := overlay.New(t.TempDir(), overlay.WithPoolSize(0), overlay.WithMkfs(fake))
	must(t, err)
	t.Cleanup(func() { layers.Close() })
	images, err := image.New(t.TempDir(), layers)
	must(t, err)
	base, err := images.AddLayer(ctx, "", func(dir string) error {
		must(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
		must(t, os.Mkdir(filepath.Join(dir, "tmp"), 0o755))
		must(t, os.Chmod(filepath.Join(dir, "tmp"), 0o777|fs.ModeSticky))
		return os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nagent:x:1000:1001::/home/agent:/bin/sh\n"), 0o644)
	})
	must(t, err)
	ctxDir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(ctxDir, "src/sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(ctxDir, "src/sub/f"), []byte("data"), 0o600))
	must(t, os.Symlink("/etc/shadow", filepath.Join(ctxDir, "src/link")))
	// The context's files belong to another user (a checkout by a user,
	// a context extracted by another daemon): neither the key nor the
	// copied files depend on it.
	keyBefore, err := hashCopyInput(ctxDir, spec.Copy{Src: "src", Dst: "/opt/src"})
	must(t, err)
	must(t, os.Lchown(filepath.Join(ctxDir, "src/sub/f"), 1234, 1234))
	must(t, os.Lchown(filepath.Join(ctxDir, "src/sub"), 1234, 1234))
	if k, _ := hashCopyInput(ctxDir, spec.Copy{Src: "src", Dst: "/opt/src"}); k != keyBefore {
		t.Error("the owner of a file in the context changed the copy step's cache key")
	}
	st := &state{b: New(images, nil), sp: &spec.Spec{Dir: ctxDir}, base: sandbox.Image{TopLayer: base}, parent: base}
	plain, err := st.copy(ctx, spec.Copy{Src: "src", Dst: "/opt/src"})
	if err != nil {
		t.Fatalf("copy = %v", err)
	}
	plainDirs, err := images.LayerDirs(plain)
	must(t, err)
	for _, name := range []string{"opt/src/sub", "opt/src/sub/f"} {
		fi, err := os.Lstat(filepath.Join(plainDirs[0], name))
		must(t, err)
		if uid, gid := owner(fi); uid != 0 || gid != 0 {
			t.Errorf("/%s copied without owner: belongs to %d:%d; want root's 0:0 (as docker's COPY)", name, uid, gid)
		}
	}
	key, err := st.copy(ctx, spec.Copy{Src: "src", Dst: "/tmp/app", Owner: "agent", Mode: "0640"})
	if err != nil {
		t.Fatalf("copy = %v", err)
	}
	dirs, err := images.LayerDirs(key)
	must(t, err)
	top := dirs[0]
	fi, err := os.Stat(filepath.Join(top, "tmp"))
	must(t, err)
	if fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp in the copy layer has mode %v; want the lower layer's 1777", fi.Mode())
	}
	f := filepath.Join(top, "tmp/app/sub/f")
	fi, err = os.Stat(f)
	must(t, err)
	if fi.Mode().Perm() != 0o640 || fi.Sys().(interface{}) == nil {
		t.Errorf("copied file mode %v; want 0640", fi.Mode())
	}
	if uid, gid := owner(fi); uid != 1000 || gid != 1001 {
		t.Errorf("copied file owner %d:%d; want agent's 1000:1001", uid, gid)
	}
	if l, err := os.Readlink(filepath.Join(top, "tmp/app/link")); err != nil || l != "/etc/shadow" {
		t.Errorf("symlink copied as %q, %v; want the link itself", l, err)
	}
	if _, err := st.copy(ctx, spec.Copy{Src: "src", Dst: "/x", Owner: "nobody"}); err == nil || !strings.Contains(err.Error(), "nobody") {
		t.Errorf("copy with an unknown owner = %v; want an error naming it", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fakeSandboxes records the create requests of a build and refuses them.
type fakeSandboxes struct{ reqs []sandbox.CreateRequest }

func (f *fakeSandboxes) Create(_ context.Context, req sandbox.CreateRequest) (sandbox.Record, error) {
	f.reqs = append(f.reqs, req)
	return sandbox.Record{}, errFakeCreate
}

func (f *fakeSandboxes) Commit(context.Context, string, func(context.Context, string) error) error {
	return nil
}
func (f *fakeSandboxes) Delete(context.Context, string, bool) error { return nil }

var errFakeCreate = errors.New("fake create")

// TestRunStepTier: a build step's box is in the container tier whatever
// the daemon's default_tier, with the host's network or without.
func TestRunStepTier(t *testing.T) {
	for _, network := range []string{"", "none"} {
		f := &fakeSandboxes{}
		sp := &spec.Spec{}
		sp.Build.Network = network
		st := &state{b: &Builder{sandboxes: f, StepTimeout: time.Minute}, sp: sp, base: sandbox.Image{Name: "busybox"}}
		if _, err := st.run(testutil.Context(t), 1, "run", "true", "", ""); !errors.Is(err, errFakeCreate) {
			t.Fatalf("run() = %v; want the fake's refusal", err)
		}
		if len(f.reqs) != 1 || f.reqs[0].Tier != sandbox.TierContainer {
			t.Errorf("build network %q: create requests %+v; want one in tier %s", network, f.reqs, sandbox.TierContainer)
		}
	}
}
