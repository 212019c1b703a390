package oci

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSealedCopy checks that each runtime runs from a sealed copy of its
// binary that the runtimes recognise as a clone (exactly runtimeSeals),
// that nobody can write to, and that behaves as the binary.
func TestSealedCopy(t *testing.T) {
	for _, bin := range []string{"crun", "runc"} {
		t.Run(bin, func(t *testing.T) {
			r := newTestRuntime(t, bin)
			if r.sealed == nil {
				t.Fatal("no sealed copy of the runtime")
			}
			seals, err := unix.FcntlInt(r.sealed.Fd(), unix.F_GET_SEALS, 0)
			if err != nil || seals != runtimeSeals {
				t.Errorf("F_GET_SEALS = %#x, %v; want %#x", seals, err, runtimeSeals)
			}
			want, err := os.ReadFile(r.binary)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(io.NewSectionReader(r.sealed, 0, int64(len(want))+1))
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("sealed copy: %d bytes, %v; want the %d bytes of %s", len(got), err, len(want), r.binary)
			}
			if _, err := r.sealed.WriteAt([]byte("x"), 0); err == nil {
				t.Error("WriteAt on the sealed copy succeeded")
			}
			// It runs as the binary does.
			out, err := r.command(context.Background(), "--version").Output()
			direct, derr := exec.Command(r.binary, "--version").Output()
			if err != nil || derr != nil || !bytes.Equal(out, direct) {
				t.Errorf("sealed %s --version = %q, %v; the binary says %q, %v", bin, out, err, direct, derr)
			}
		})
	}
}

// TestSealedCopyFallback checks that a copy that cannot run is dropped:
// the runtime then runs its binary from disk.
func TestSealedCopyFallback(t *testing.T) {
	data := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(data, []byte("plain data, no ELF header\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runtime{binary: data}
	if err := r.useSealedCopy(); err == nil || r.sealed != nil {
		t.Fatalf("useSealedCopy(data file) = %v, sealed %v; want an error and no copy", err, r.sealed)
	}
	if got := r.command(context.Background(), "x").Path; got != data {
		t.Errorf("command path without a copy = %q; want the binary %q", got, data)
	}
}
