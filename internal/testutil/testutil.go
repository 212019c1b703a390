// Package testutil holds the guards and helpers shared by Corral's tests.
//
// Privileged tests call RequiresRoot (and RequiresBinary, RequiresKVM...) at
// their top. They run only when CORRAL_TEST_PRIVILEGED=1 is set, and then they
// fail instead of skipping when the process is not root, so an opted-in run
// cannot pass by skipping.
package testutil

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/corral-sandbox/corral/internal/log"
)

// PrivilegedEnv is the variable that opts a run into privileged tests.
const PrivilegedEnv = "CORRAL_TEST_PRIVILEGED"

// Privileged reports whether privileged tests were asked for.
func Privileged() bool { return os.Getenv(PrivilegedEnv) == "1" }

// RequiresRoot skips t unless CORRAL_TEST_PRIVILEGED=1, and fails it when that
// is set but the test does not run as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if !Privileged() {
		t.Skipf("privileged test: set %s=1 and run as root", PrivilegedEnv)
	}
	if os.Geteuid() != 0 {
		t.Fatalf("%s=1 but euid is %d; privileged tests need root", PrivilegedEnv, os.Geteuid())
	}
}

// RequiresRootM is RequiresRoot for TestMain: it returns a non-empty reason
// to skip the whole package, or exits 1 when opted in without root.
func RequiresRootM() string {
	if !Privileged() {
		return fmt.Sprintf("privileged tests: set %s=1 and run as root", PrivilegedEnv)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "%s=1 but euid is %d; privileged tests need root\n", PrivilegedEnv, os.Geteuid())
		os.Exit(1)
	}
	return ""
}

// RequiresBinary skips t when name is not on PATH, and returns its path.
func RequiresBinary(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found on PATH (install it: apt-get install -y %s)", name, name)
	}
	return p
}

// RequiresKVM skips t when /dev/kvm is not writable.
func RequiresKVM(t testing.TB) {
	t.Helper()
	if err := unix.Access("/dev/kvm", unix.W_OK); err != nil {
		t.Skipf("/dev/kvm is not writable by uid %d: %v", os.Getuid(), err)
	}
}

// Context returns t.Context() carrying a logger that writes to the test's
// output.
func Context(t testing.TB) context.Context {
	h := slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})
	return log.WithLogger(t.Context(), slog.New(h))
}
