package agentbin

import (
	"bytes"
	"debug/buildinfo"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
)

func TestInstall(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "agent")
	bin := []byte("\x7fELF pretend agent")
	path, err := Install(dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(path) != dir || !strings.HasPrefix(filepath.Base(path), Prefix) || len(filepath.Base(path)) != len(Prefix)+16 {
		t.Fatalf("installed as %s, want %s/%s<16 hex digits>", path, dir, Prefix)
	}
	if got, err := os.ReadFile(path); err != nil || !bytes.Equal(got, bin) {
		t.Fatalf("content %q, %v; want %q", got, err, bin)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o555 {
		t.Errorf("mode %v, want 0555", st.Mode().Perm())
	}

	// The same content again: the file is kept, not rewritten (a running
	// box has it mounted).
	again, err := Install(dir, bin)
	if err != nil || again != path {
		t.Fatalf("second install: %s, %v; want %s", again, err, path)
	}
	st2, _ := os.Stat(path)
	if st.Sys().(*syscall.Stat_t).Ino != st2.Sys().(*syscall.Stat_t).Ino {
		t.Error("second install replaced the file")
	}

	// Another build gets another file; the first stays for the boxes and
	// checkpoints that refer to it.
	other, err := Install(dir, []byte("\x7fELF another agent"))
	if err != nil || other == path {
		t.Fatalf("other build: %s, %v", other, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("first build's file: %v", err)
	}

	// A damaged file under the right name is replaced.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("truncat"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fixed, err := Install(dir, bin); err != nil || fixed != path {
		t.Fatalf("repair: %s, %v", fixed, err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, bin) {
		t.Errorf("after repair: %q", got)
	}

	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("dir holds %v, want the two agents and no temporary file", names)
	}
}

func TestInstallAsInit(t *testing.T) {
	dir := t.TempDir()
	bin := []byte("\x7fELF pretend init")
	a, err := Install(dir, bin)
	if err != nil {
		t.Fatal(err)
	}
	i, err := InstallAs(dir, InitPrefix, bin)
	if err != nil {
		t.Fatal(err)
	}
	if a == i || !strings.HasPrefix(filepath.Base(i), InitPrefix) || strings.TrimPrefix(filepath.Base(i), InitPrefix) != strings.TrimPrefix(filepath.Base(a), Prefix) {
		t.Errorf("agent %s and init %s: want one file per prefix, with the same hash", a, i)
	}
	if _, err := InstallAs(dir, InitPrefix, nil); err == nil || !strings.Contains(err.Error(), "empty corral-init binary") {
		t.Errorf("empty init: %v, want a clear error", err)
	}
}

func TestInstallErrors(t *testing.T) {
	if _, err := Install(t.TempDir(), nil); err == nil {
		t.Error("empty binary: no error")
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(filepath.Join(file, "agent"), []byte("x")); err == nil || !strings.Contains(err.Error(), "agentbin") {
		t.Errorf("dir under a file: %v, want an agentbin error", err)
	}
}

func TestSameBuild(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	self, err := buildinfo.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := sameBuild(self, bin); err != nil {
		t.Fatalf("a binary against its own build information: %v", err)
	}
	if err := SameBuild(bin); err != nil {
		t.Fatalf("SameBuild of the running program: %v", err)
	}

	for name, change := range map[string]func(bi *buildinfo.BuildInfo){
		"go version":   func(bi *buildinfo.BuildInfo) { bi.GoVersion = "go1.1" },
		"module":       func(bi *buildinfo.BuildInfo) { bi.Main.Path = "example.com/other" },
		"vcs.revision": func(bi *buildinfo.BuildInfo) { set(bi, "vcs.revision", "0123456789abcdef") },
		"-ldflags":     func(bi *buildinfo.BuildInfo) { set(bi, "-ldflags", "-X main.version=other") },
	} {
		other := *self
		other.Settings = append([]debug.BuildSetting(nil), self.Settings...)
		change(&other)
		err := sameBuild(&other, bin)
		if err == nil || !strings.Contains(err.Error(), "another build") {
			t.Errorf("%s differs: %v, want an error", name, err)
		}
	}

	if err := SameBuild([]byte("#!/bin/sh\necho not a Go program\n")); err == nil || !strings.Contains(err.Error(), "build information") {
		t.Errorf("not a Go binary: %v", err)
	}
}

func set(bi *buildinfo.BuildInfo, key, value string) {
	for i := range bi.Settings {
		if bi.Settings[i].Key == key {
			bi.Settings[i].Value = value
			return
		}
	}
	bi.Settings = append(bi.Settings, debug.BuildSetting{Key: key, Value: value})
}
