package tunnel

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
)

func openTemp(t *testing.T) (*Registry, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "sub", "tunnels.json")
	r, err := Open(p)
	if err != nil {
		t.Fatalf("Open(%q) = %v", p, err)
	}
	return r, p
}

func mustExpose(t *testing.T, r *Registry, sandbox string, port int) Exposure {
	t.Helper()
	e, err := r.Expose(sandbox, port)
	if err != nil {
		t.Fatalf("Expose(%q, %d) = %v", sandbox, port, err)
	}
	return e
}

func TestExposeToken(t *testing.T) {
	r, _ := openTemp(t)
	e := mustExpose(t, r, "sb1", 8000)
	if e.Sandbox != "sb1" || e.Port != 8000 || e.Created.IsZero() {
		t.Errorf("Expose = %+v; want sandbox sb1, port 8000, a creation time", e)
	}
	b, err := base64.RawURLEncoding.DecodeString(e.Token)
	if err != nil || len(b) != 32 {
		t.Errorf("token %q decodes to %d bytes, %v; want 32 bytes of base64url without padding", e.Token, len(b), err)
	}
	other := mustExpose(t, r, "sb1", 8001)
	if other.Token == e.Token {
		t.Errorf("two exposures share token %q", e.Token)
	}
}

func TestExposeIdempotent(t *testing.T) {
	r, _ := openTemp(t)
	first := mustExpose(t, r, "sb1", 8000)
	again := mustExpose(t, r, "sb1", 8000)
	if diff := cmp.Diff(first, again); diff != "" {
		t.Errorf("second Expose differs (-first +second):\n%s", diff)
	}
	if got := len(r.List("")); got != 1 {
		t.Errorf("List after two Expose of one port has %d entries; want 1", got)
	}
}

func TestExposeInvalid(t *testing.T) {
	r, _ := openTemp(t)
	for _, tc := range []struct {
		sandbox string
		port    int
	}{
		{"sb1", 0},
		{"sb1", -1},
		{"sb1", 65536},
		{"", 8000},
		{"../x", 8000},
	} {
		if _, err := r.Expose(tc.sandbox, tc.port); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Expose(%q, %d) = %v; want ErrInvalidArgument", tc.sandbox, tc.port, err)
		}
	}
	if _, err := r.Expose("sb1", 65535); err != nil {
		t.Errorf("Expose(sb1, 65535) = %v; want nil", err)
	}
	if _, err := r.Expose("sb1", 1); err != nil {
		t.Errorf("Expose(sb1, 1) = %v; want nil", err)
	}
}

func TestPersistence(t *testing.T) {
	r, p := openTemp(t)
	mustExpose(t, r, "sb2", 9000)
	b := mustExpose(t, r, "sb1", 8000)
	c := mustExpose(t, r, "sb1", 3000)
	if err := r.Unexpose("sb2", 9000); err != nil {
		t.Fatalf("Unexpose = %v", err)
	}

	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("registry file mode = %v; want 0600", fi.Mode().Perm())
	}
	ents, err := os.ReadDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries; want only the registry file (no temp files left)", len(ents))
	}

	r2, err := Open(p)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	want := []Exposure{c, b}
	if diff := cmp.Diff(want, r2.List("")); diff != "" {
		t.Errorf("List after reopen (-want +got):\n%s", diff)
	}
	// The reopened registry keeps the tokens: Expose returns the old one.
	if e := mustExpose(t, r2, "sb1", 8000); e.Token != b.Token {
		t.Errorf("Expose after reopen gave token %q; want the persisted %q", e.Token, b.Token)
	}
}

func TestOpenCorrupt(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tunnels.json")
	for _, tc := range []struct {
		name, data string
	}{
		{"not json", "{"},
		{"newer version", `{"version":2,"exposures":[]}`},
		{"bad port", `{"version":1,"exposures":[{"sandbox":"sb1","port":0,"token":"x"}]}`},
		{"bad sandbox", `{"version":1,"exposures":[{"sandbox":"a/b","port":80,"token":"x"}]}`},
		{"no token", `{"version":1,"exposures":[{"sandbox":"sb1","port":80}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(p, []byte(tc.data), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(p); err == nil {
				t.Errorf("Open(%s) = nil; want an error", tc.data)
			}
		})
	}
}

func TestUnexposeNotFound(t *testing.T) {
	r, _ := openTemp(t)
	mustExpose(t, r, "sb1", 8000)
	for _, tc := range []struct {
		sandbox string
		port    int
	}{
		{"sb1", 8001},
		{"sb2", 8000},
	} {
		if err := r.Unexpose(tc.sandbox, tc.port); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Unexpose(%q, %d) = %v; want ErrNotFound", tc.sandbox, tc.port, err)
		}
	}
	if err := r.Unexpose("sb1", 8000); err != nil {
		t.Fatalf("Unexpose(sb1, 8000) = %v", err)
	}
	if err := r.Unexpose("sb1", 8000); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Unexpose(sb1, 8000) = %v; want ErrNotFound", err)
	}
}

func TestListFilterAndOrder(t *testing.T) {
	r, _ := openTemp(t)
	mustExpose(t, r, "b", 80)
	mustExpose(t, r, "a", 9000)
	mustExpose(t, r, "b", 443)
	mustExpose(t, r, "a", 80)
	type sp struct {
		S string
		P int
	}
	pairs := func(es []Exposure) []sp {
		var out []sp
		for _, e := range es {
			out = append(out, sp{e.Sandbox, e.Port})
		}
		return out
	}
	if diff := cmp.Diff([]sp{{"a", 80}, {"a", 9000}, {"b", 80}, {"b", 443}}, pairs(r.List(""))); diff != "" {
		t.Errorf("List(\"\") (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]sp{{"b", 80}, {"b", 443}}, pairs(r.List("b"))); diff != "" {
		t.Errorf("List(b) (-want +got):\n%s", diff)
	}
	if got := r.List("c"); len(got) != 0 {
		t.Errorf("List(c) = %v; want none", got)
	}
}

func TestRemoveSandboxAndKeep(t *testing.T) {
	r, p := openTemp(t)
	mustExpose(t, r, "gone", 80)
	mustExpose(t, r, "gone", 81)
	live := mustExpose(t, r, "live", 80)
	mustExpose(t, r, "removed", 80)

	if err := r.RemoveSandbox("removed"); err != nil {
		t.Fatalf("RemoveSandbox = %v", err)
	}
	if err := r.RemoveSandbox("never-exposed"); err != nil {
		t.Errorf("RemoveSandbox(never-exposed) = %v; want nil", err)
	}
	calls := map[string]int{}
	if err := r.Keep(func(s string) bool {
		calls[s]++
		return s == "live"
	}); err != nil {
		t.Fatalf("Keep = %v", err)
	}
	if diff := cmp.Diff(map[string]int{"gone": 1, "live": 1}, calls); diff != "" {
		t.Errorf("Keep calls alive once per remaining sandbox (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Exposure{live}, r.List("")); diff != "" {
		t.Errorf("List after Keep (-want +got):\n%s", diff)
	}
	r2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Exposure{live}, r2.List("")); diff != "" {
		t.Errorf("List after Keep and reopen (-want +got):\n%s", diff)
	}
}

func TestExposeConcurrent(t *testing.T) {
	r, p := openTemp(t)
	var wg sync.WaitGroup
	tokens := make([]string, 16)
	for i := range tokens {
		wg.Go(func() {
			e, err := r.Expose("sb1", 8000+i%4)
			if err != nil {
				t.Errorf("Expose = %v", err)
				return
			}
			tokens[i] = e.Token
		})
	}
	wg.Wait()
	for i := range tokens {
		if tokens[i] != tokens[i%4] {
			t.Errorf("concurrent Expose of one port gave tokens %q and %q", tokens[i%4], tokens[i])
		}
	}
	r2, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(r2.List("sb1")); got != 4 {
		t.Errorf("reopened registry has %d exposures; want 4", got)
	}
}
