//go:build integration

package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// e2bToken is the daemon's token in the E2B SDK tests (E2B_API_KEY).
const e2bToken = "e2b-test-token"

// startE2B installs the SDK (npm ci in integration/e2b) and starts a
// daemon with a TCP listener; it skips without node and npm.
func startE2B(t *testing.T, ctx context.Context) (*daemon, string) {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (scripts/deps.sh installs nodejs and npm)", bin)
		}
	}
	dir, err := filepath.Abs("e2b")
	if err != nil {
		t.Fatal(err)
	}
	ci := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	d := startDaemonWith(t, func(cfg *string, base string) {
		tok := filepath.Join(base, "token")
		if err := os.WriteFile(tok, []byte(e2bToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		*cfg += fmt.Sprintf("listen = %q\ntoken_file = %q\n", "127.0.0.1:0", tok)
	})
	return d, dir
}

// runSDKTests runs a test file of integration/e2b with node --test, the
// SDK configured only by E2B_API_URL, E2B_SANDBOX_URL,
// E2B_VOLUME_API_URL and E2B_API_KEY,
// and checks that it left no sandbox.
func runSDKTests(t *testing.T, ctx context.Context, d *daemon, dir, file string, env ...string) {
	t.Helper()
	url := "http://" + d.tcpAddr()
	cmd := exec.CommandContext(ctx, "npm", "test", "--", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+url, "E2B_SANDBOX_URL="+url, "E2B_VOLUME_API_URL="+url, "E2B_API_KEY="+e2bToken)
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	t.Logf("node --test %s:\n%s", file, out.String())
	if err != nil {
		t.Fatalf("the E2B SDK tests of %s failed: %v", file, err)
	}
	if left := strings.Fields(d.must("ls", "-q")); len(left) != 0 {
		t.Errorf("sandboxes %v left after the SDK tests; want none", left)
	}
}

// TestE2BSDK runs the JavaScript tests in integration/e2b against a daemon
// with a TCP listener: the official E2B SDK (pinned in package-lock.json).
func TestE2BSDK(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, dir := startE2B(t, ctx)
	// The SDK's default template, "base", stands for the host image here
	// (TestE2BBaseTemplate builds the real one).
	d.must("image", "tag", "host", "base")
	runSDKTests(t, ctx, d, dir, "sdk.test.mjs", "CORRAL_E2B_TEMPLATE=base")
}

// TestE2BVolumeContent drives the volume content API
// (integration/e2b/volume.test.mjs) through the SDK's Volume class, with
// a box that mounts the volume on the other side.
func TestE2BVolumeContent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d, dir := startE2B(t, ctx)
	runSDKTests(t, ctx, d, dir, "volume.test.mjs")
	if out := d.must("volume", "ls", "-q"); strings.TrimSpace(out) != "" {
		t.Errorf("volumes left after the SDK tests: %s", out)
	}
}

// TestE2BBaseTemplate builds the built-in template base with corral e2b
// setup, as docs/e2b.md tells a user to, and checks it through the SDK's
// default template and a template built on it. It needs debootstrap and the host's Debian mirror.
func TestE2BBaseTemplate(t *testing.T) {
	requireBootstrap(t, "bookworm")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	d, dir := startE2B(t, ctx)
	out, errOut, err := d.corral("e2b", "setup")
	if err != nil {
		t.Fatalf("corral e2b setup: %v\n%s\n%s", err, tail(out, 30), tail(errOut, 30))
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); lines[len(lines)-1] != "base" {
		t.Errorf("corral e2b setup printed %q last; want the image name base", lines[len(lines)-1])
	}
	// A second run comes from the build cache.
	if out := d.must("e2b", "setup"); strings.Count(out, "CACHED") < 2 {
		t.Errorf("a second corral e2b setup printed\n%s\nwant its steps CACHED", out)
	}
	runSDKTests(t, ctx, d, dir, "base.test.mjs")
}

// TestE2BTemplateBuild builds templates with the SDK's Template builder
// (integration/e2b/template.test.mjs) from the built-in busybox image and
// checks that the builds leave no template behind.
func TestE2BTemplateBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d, dir := startE2B(t, ctx)
	runSDKTests(t, ctx, d, dir, "template.test.mjs")
	if out := d.must("image", "ls"); strings.Contains(out, "it-tpl-") {
		t.Errorf("templates left after the SDK tests:\n%s", out)
	}
}
