//go:build integration

package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/corral-sandbox/corral/client"
)

// git runs git in dir with a fixed identity and no user configuration.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestDiffExportApply makes a project in a box, snapshots it as the base,
// lets a box from the base change it, and checks corral diff, export and
// apply against host copies of the base.
func TestDiffExportApply(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")
	d := startDaemon(t)
	seed := d.create("--image", "busybox")
	d.must("exec", seed, "--", "sh", "-c", `mkdir -p /work/app/src /work/app/old &&
		printf 'a\nb\nc\n' > /work/app/src/main.txt &&
		echo gone > /work/app/old/gone.txt &&
		echo keep > /work/app/keep.txt &&
		printf 'bin\000\001' > /work/app/blob.bin`)
	d.must("snapshot", seed, "--name", "review-base")
	t.Cleanup(func() { _, _, _ = d.corral("snapshot", "rm", "review-base") })

	// Host copies of the base: a git checkout and a plain directory.
	host := t.TempDir()
	repo, plain := filepath.Join(host, "repo"), filepath.Join(host, "plain")
	for _, dir := range []string{repo, plain} {
		d.must("cp", seed+":/work/app/.", dir)
	}
	git(t, repo, "init", "-q", "-b", "main")
	git(t, repo, "add", "-A")
	git(t, repo, "commit", "-qm", "base")
	d.must("rm", seed)

	box := d.create("--from", "review-base")
	d.must("exec", box, "--", "sh", "-c", `cd /work/app &&
		printf 'a\nB\nc\n' > src/main.txt &&
		echo new > src/new.txt &&
		rm -r old &&
		printf 'bin\000\002\003' > blob.bin &&
		printf 'x\ny\n' > 'we ird.txt'`)

	// Against its own image (the snapshot), exactly what the box did;
	// against busybox, the snapshot's files too, but never the runtime's
	// mount points (the agent, /etc/resolv.conf).
	if got := d.must("diff", box); got != `C /work/app/blob.bin
D /work/app/old
D /work/app/old/gone.txt
C /work/app/src/main.txt
A /work/app/src/new.txt
A /work/app/we ird.txt
` {
		t.Errorf("corral diff =\n%s", got)
	}
	if got := d.must("diff", box, "--from", "busybox"); got != `A /work
A /work/app
A /work/app/blob.bin
A /work/app/keep.txt
A /work/app/src
A /work/app/src/main.txt
A /work/app/src/new.txt
A /work/app/we ird.txt
` {
		t.Errorf("corral diff --from busybox =\n%s", got)
	}
	if s := d.boxState(box); s != "running" {
		t.Errorf("box state after diff = %q; want running", s)
	}
	if got := d.must("diff", box, "--dir", "/work/app", "--", "*.txt"); got != "D /work/app/old/gone.txt\nC /work/app/src/main.txt\nA /work/app/src/new.txt\nA /work/app/we ird.txt\n" {
		t.Errorf("corral diff -- '*.txt' =\n%s", got)
	}
	stat := d.must("diff", box, "--stat", "--dir", "/work/app")
	if !strings.Contains(stat, "5 files changed, 4 insertions(+), 2 deletions(-)") || !strings.Contains(stat, "blob.bin") {
		t.Errorf("corral diff --stat =\n%s", stat)
	}

	// A patch with its stat (one pass, the stat in a trailer) gives what
	// a patch and a stat request give.
	c, err := client.New(client.WithHost("unix://" + d.socket))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.DiffOptions{{Dir: "/work/app"}, {Dir: "/work/app", MaxBytes: 200}} {
		var one, two bytes.Buffer
		res, err := c.PatchWithStat(t.Context(), box, o, &one)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Patch(t.Context(), box, o, &two); err != nil {
			t.Fatal(err)
		}
		want, err := c.DiffStat(t.Context(), box, o)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(res.Stat, want) || one.String() != two.String() {
			t.Errorf("PatchWithStat(%+v): stat %+v and a patch of %d bytes; want %+v and the patch's %d bytes", o, res.Stat, one.Len(), want, two.Len())
		}
	}

	// export --patch: git apply takes it on the checkout of the base.
	pf := filepath.Join(host, "change.patch")
	d.must("export", box, "--patch", pf, "--dir", "/work/app")
	git(t, repo, "apply", "--check", pf)

	// apply --git: a commit on a new branch; the checkout is untouched.
	out := d.must("apply", box, "--dir", "/work/app", "--to", repo, "--git", "--branch", "agent", "-m", "agent work")
	if !strings.Contains(out, "on branch agent (5 files)") {
		t.Errorf("corral apply --git printed %q", out)
	}
	if got := git(t, repo, "show", "agent:src/main.txt"); got != "a\nB\nc\n" {
		t.Errorf("agent:src/main.txt = %q", got)
	}
	if got := git(t, repo, "log", "-1", "--format=%s", "agent"); got != "agent work\n" {
		t.Errorf("commit message = %q", got)
	}
	if got := git(t, repo, "status", "--porcelain"); got != "" {
		t.Errorf("the checkout changed:\n%s", got)
	}
	if got := git(t, repo, "diff", "--name-status", "main", "agent"); got != "M\tblob.bin\nD\told/gone.txt\nM\tsrc/main.txt\nA\tsrc/new.txt\nA\twe ird.txt\n" {
		t.Errorf("git diff main agent =\n%s", got)
	}

	// A conflicting change in the target is refused, naming the file,
	// and nothing is applied.
	if err := os.WriteFile(filepath.Join(plain, "src", "main.txt"), []byte("a\nZ\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, errOut, err := d.corral("apply", box, "--dir", "/work/app", "--to", plain)
	if err == nil || !strings.Contains(errOut, "conflicts in src/main.txt") {
		t.Errorf("apply onto a conflicting dir: err %v, stderr %q; want a refusal naming src/main.txt", err, errOut)
	}
	if _, err := os.Stat(filepath.Join(plain, "src", "new.txt")); err == nil {
		t.Errorf("a refused apply wrote src/new.txt")
	}
	// Without the conflict, the plain directory takes the change.
	if err := os.WriteFile(filepath.Join(plain, "src", "main.txt"), []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.must("apply", box, "--dir", "/work/app", "--to", plain)
	if b, err := os.ReadFile(filepath.Join(plain, "blob.bin")); err != nil || string(b) != "bin\x00\x02\x03" {
		t.Errorf("blob.bin after apply = %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(plain, "old")); err == nil {
		t.Errorf("old/ survived the apply")
	}

	// Bad input: a clear error, nothing left behind.
	for _, args := range [][]string{
		{"diff", box, "--from", "no-such-image"},
		{"diff", box, "--dir", "/no/such/dir"},
		{"diff", box, "--dir", "/work/../etc"},
		{"apply", box, "--to", repo, "--git", "--branch", "main"},
	} {
		if _, errOut, err := d.corral(args...); err == nil || errOut == "" {
			t.Errorf("corral %s: err %v, stderr %q; want an error", strings.Join(args, " "), err, errOut)
		}
	}
	d.must("rm", box)
	d.must("snapshot", "rm", "review-base")
	d.requireNoLeftovers()
}

// TestReviewDocExample runs the example at the top of docs/review.md.
func TestReviewDocExample(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	d := startDaemon(t)
	dir := t.TempDir()
	d.must("create", "--image", "busybox", "--name", "web")
	d.must("exec", "web", "--", "sh", "-c", "mkdir -p /work && echo hello > /work/greeting && rm /bin/ls")
	if got := d.must("diff", "web"); got != "D /bin/ls\nA /work\nA /work/greeting\n" {
		t.Errorf("corral diff web =\n%s", got)
	}
	d.must("diff", "web", "--stat")
	d.must("diff", "web", "--patch", "--dir", "/work")
	d.must("export", "web", "--patch", filepath.Join(dir, "agent.patch"), "--dir", "/work")
	app, repo := filepath.Join(dir, "app"), filepath.Join(dir, "repo")
	if err := os.Mkdir(app, 0o755); err != nil {
		t.Fatal(err)
	}
	d.must("apply", "web", "--dir", "/work", "--to", app)
	if b, err := os.ReadFile(filepath.Join(app, "greeting")); err != nil || string(b) != "hello\n" {
		t.Errorf("app/greeting = %q, %v", b, err)
	}
	git(t, dir, "init", "-q", repo)
	git(t, repo, "commit", "-q", "--allow-empty", "-m", "base")
	t.Setenv("GIT_AUTHOR_NAME", "t")
	t.Setenv("GIT_AUTHOR_EMAIL", "t@example.com")
	t.Setenv("GIT_COMMITTER_NAME", "t")
	t.Setenv("GIT_COMMITTER_EMAIL", "t@example.com")
	d.must("apply", "web", "--dir", "/work", "--to", repo, "--git", "--branch", "agent", "-m", "Agent: greeting")
	if got := git(t, repo, "show", "agent:greeting"); got != "hello\n" {
		t.Errorf("agent:greeting = %q", got)
	}
	d.must("rm", "web")
	d.requireNoLeftovers()
}
