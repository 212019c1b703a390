package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFreezerFiles checks the freezer's files on fake cgroup directories
// of both versions (the privileged TestPause drives the host's).
func TestFreezerFiles(t *testing.T) {
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	t.Run("v1", func(t *testing.T) {
		f := freezer{dir: t.TempDir(), v1: true}
		state := filepath.Join(f.dir, "freezer.state")
		write(t, state, "THAWED\n")
		if f.requested() {
			t.Errorf("requested() of THAWED = true")
		}
		if err := f.set(true); err != nil || read(state) != "FROZEN" {
			t.Errorf("set(true) = %v, state %q; want FROZEN", err, read(state))
		}
		write(t, state, "FREEZING\n")
		if done, err := f.frozen(); !f.requested() || done || err != nil {
			t.Errorf("FREEZING: requested() = %v, frozen() = %v, %v; want true, false", f.requested(), done, err)
		}
		write(t, state, "FROZEN\n")
		if done, err := f.frozen(); !done || err != nil {
			t.Errorf("frozen() of FROZEN = %v, %v", done, err)
		}
		if err := f.set(false); err != nil || read(state) != "THAWED" {
			t.Errorf("set(false) = %v, state %q; want THAWED", err, read(state))
		}
	})
	t.Run("v2", func(t *testing.T) {
		f := freezer{dir: t.TempDir()}
		freeze, events := filepath.Join(f.dir, "cgroup.freeze"), filepath.Join(f.dir, "cgroup.events")
		write(t, freeze, "0\n")
		write(t, events, "populated 1\nfrozen 0\n")
		if f.requested() {
			t.Errorf("requested() of cgroup.freeze 0 = true")
		}
		if err := f.set(true); err != nil || read(freeze) != "1" || !f.requested() {
			t.Errorf("set(true) = %v, cgroup.freeze %q; want 1", err, read(freeze))
		}
		if done, err := f.frozen(); done || err != nil {
			t.Errorf("frozen() with events frozen 0 = %v, %v; want false", done, err)
		}
		write(t, events, "populated 1\nfrozen 1\n")
		if done, err := f.frozen(); !done || err != nil {
			t.Errorf("frozen() with events frozen 1 = %v, %v; want true", done, err)
		}
		if err := f.set(false); err != nil || read(freeze) != "0" {
			t.Errorf("set(false) = %v, cgroup.freeze %q; want 0", err, read(freeze))
		}
	})
	t.Run("missing", func(t *testing.T) {
		f := freezer{dir: filepath.Join(t.TempDir(), "gone"), v1: true}
		if f.requested() {
			t.Errorf("requested() of a missing cgroup = true")
		}
		if err := f.set(false); err != nil {
			t.Errorf("set(false) of a missing cgroup = %v; want nil (nothing to thaw)", err)
		}
		if err := f.set(true); err == nil {
			t.Errorf("set(true) of a missing cgroup = nil; want an error")
		}
	})
}
