package secrets

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"github.com/google/go-cmp/cmp"
)

func TestPlaceholder(t *testing.T) {
	re := regexp.MustCompile(`^corral-secret-[0-9a-f]{32}$`)
	seen := make(map[string]bool)
	for range 1000 {
		p := Placeholder()
		if !re.MatchString(p) {
			t.Fatalf("Placeholder() = %q; want it to match %s", p, re)
		}
		if !validPlaceholder(p) {
			t.Fatalf("validPlaceholder(%q) = false; want true", p)
		}
		if seen[p] {
			t.Fatalf("Placeholder() returned %q twice", p)
		}
		seen[p] = true
	}
	for _, p := range []string{
		"",
		"corral-secret-",
		"corral-secret-0123456789ABCDEF0123456789abcdef",
		"corral-secret-0123456789abcdef0123456789abcde",
		"corral-secret-0123456789abcdef0123456789abcdef0",
		"corral-secreX-0123456789abcdef0123456789abcdef",
		"Bearer",
	} {
		if validPlaceholder(p) {
			t.Errorf("validPlaceholder(%q) = true; want false", p)
		}
	}
}

func TestMatchHost(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"api.example.com", "api.example.com", true},
		{"api.example.com", "API.Example.COM", true},
		{"api.example.com", "api.example.com.", true},
		{"api.example.com.", "api.example.com", true},
		{"API.EXAMPLE.COM", "api.example.com", true},
		{"api.example.com", "api.example.com:443", true},
		{"api.example.com", "example.com", false},
		{"api.example.com", "x.api.example.com", false},
		{"api.example.com", "api.example.com.evil.net", false},
		{"api.example.com", "apiexample.com", false},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "a.b.example.com", true},
		{"*.example.com", "A.B.EXAMPLE.COM.", true},
		{"*.example.com", "example.com", false},
		{"*.example.com", "badexample.com", false},
		{"*.example.com", ".example.com", false},
		{"*.example.com", "a..example.com", false},
		{"*.example.com", "example.com.evil.net", false},
		{"*", "example.com", false},
		{"*.", "example.com", false},
		{"*.*.com", "a.b.com", false},
		{"a.*.com", "a.b.com", false},
		{"*example.com", "badexample.com", false},
		{"*.com.", "example.com", true},
		{"1.2.3.4", "1.2.3.4", true},
		{"1.2.3.4", "1.2.3.4:8443", true},
		{"1.2.3.4", "1.2.3.5", false},
		{"*.2.3.4", "1.2.3.4", false},
		{"*.3.4", "1.2.3.4", false},
		{"::1", "[::1]:443", true},
		{"[::1]", "::1", true},
		{"2001:db8::1", "2001:DB8:0::1", true},
		{"1.2.3.4", "::ffff:1.2.3.4", true},
		{"api.example.com:443", "api.example.com", false},
		{"[api.example.com]", "api.example.com", false},
		// Non-ASCII never matches: the Kelvin sign lower-cases to 'k'
		// with strings.ToLower.
		{"key.example.com", "\u212aey.example.com", false},
		{"*.example.com", "\u212a.example.com", false},
		{"api.example.com", "api.example.com\x00", false},
		{"*.example.com", "a/b.example.com", false},
		{"*.example.com", "a b.example.com", false},
		{"*.example.com", "*.example.com", false},
		{"", "", false},
		{"example.com", "", false},
	} {
		b := Binding{Name: "X", Placeholder: Placeholder(), Hosts: []string{tc.pattern}}
		if got := b.allows(tc.host); got != tc.want {
			t.Errorf("pattern %q allows(%q) = %v; want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}

func TestWants(t *testing.T) {
	bindings := []Binding{
		{Name: "A", Placeholder: Placeholder(), Hosts: []string{"api.github.com"}},
		{Name: "B", Placeholder: Placeholder(), Hosts: []string{"*.openai.com", "10.0.0.1"}},
		{Name: "C", Placeholder: Placeholder()},
	}
	for host, want := range map[string]bool{
		"api.github.com":   true,
		"github.com":       false,
		"api.openai.com":   true,
		"openai.com":       false,
		"10.0.0.1":         true,
		"example.org":      false,
		"":                 false,
		"API.GITHUB.COM.":  true,
		"api.github.com:1": true,
	} {
		if got := Wants(bindings, host); got != want {
			t.Errorf("Wants(%q) = %v; want %v", host, got, want)
		}
	}
	if Wants(nil, "api.github.com") {
		t.Error("Wants(no bindings) = true; want false")
	}
}

// fakeGet serves values from m and counts calls.
type fakeGet struct {
	m     map[string]string
	calls []string
}

func (f *fakeGet) get(name string) ([]byte, error) {
	f.calls = append(f.calls, name)
	v, ok := f.m[name]
	if !ok {
		return nil, errdefs.ErrNotFound
	}
	return []byte(v), nil
}

func TestReplaceHeaders(t *testing.T) {
	gh, oa, internal := Placeholder(), Placeholder(), Placeholder()
	stray := Placeholder() // bound to nothing
	bindings := []Binding{
		{Name: "GITHUB_TOKEN", Placeholder: gh, Hosts: []string{"api.github.com"}},
		{Name: "OPENAI_KEY", Placeholder: oa, Hosts: []string{"*.openai.com"}},
		{Name: "INTERNAL", Placeholder: internal, Hosts: []string{"internal.corp"}},
	}
	values := map[string]string{"GITHUB_TOKEN": "ghp_real", "OPENAI_KEY": "sk-real", "INTERNAL": "int-real"}

	for _, tc := range []struct {
		name        string
		host        string
		in, want    http.Header
		used, refus []string
	}{
		{
			name: "bearer to the allowed host",
			host: "api.github.com",
			in:   http.Header{"Authorization": {"Bearer " + gh}},
			want: http.Header{"Authorization": {"Bearer ghp_real"}},
			used: []string{"GITHUB_TOKEN"},
		},
		{
			name:  "bearer to another host stays and is reported",
			host:  "evil.example.com",
			in:    http.Header{"Authorization": {"Bearer " + gh}},
			want:  http.Header{"Authorization": {"Bearer " + gh}},
			refus: []string{"GITHUB_TOKEN"},
		},
		{
			name: "several headers and values",
			host: "api.github.com",
			in: http.Header{
				"Authorization": {"token " + gh},
				"X-Api-Key":     {gh, "plain", gh + "," + gh},
				"Accept":        {"application/json"},
			},
			want: http.Header{
				"Authorization": {"token ghp_real"},
				"X-Api-Key":     {"ghp_real", "plain", "ghp_real,ghp_real"},
				"Accept":        {"application/json"},
			},
			used: []string{"GITHUB_TOKEN"},
		},
		{
			name: "several secrets, some refused",
			host: "API.OpenAI.com.",
			in: http.Header{
				"Authorization":  {"Bearer " + oa},
				"X-Github":       {gh},
				"X-Internal":     {internal},
				"X-Both-In-One":  {oa + ":" + gh},
				"X-Unrelated-Ph": {stray},
			},
			want: http.Header{
				"Authorization":  {"Bearer sk-real"},
				"X-Github":       {gh},
				"X-Internal":     {internal},
				"X-Both-In-One":  {"sk-real:" + gh},
				"X-Unrelated-Ph": {stray},
			},
			used:  []string{"OPENAI_KEY"},
			refus: []string{"GITHUB_TOKEN", "INTERNAL"},
		},
		{
			name:  "wildcard does not match the apex",
			host:  "openai.com",
			in:    http.Header{"Authorization": {"Bearer " + oa}},
			want:  http.Header{"Authorization": {"Bearer " + oa}},
			refus: []string{"OPENAI_KEY"},
		},
		{
			name: "wildcard matches deeper names",
			host: "eu.api.openai.com:443",
			in:   http.Header{"Authorization": {"Bearer " + oa}},
			want: http.Header{"Authorization": {"Bearer sk-real"}},
			used: []string{"OPENAI_KEY"},
		},
		{
			name: "no placeholder",
			host: "api.github.com",
			in:   http.Header{"Authorization": {"Bearer abc"}},
			want: http.Header{"Authorization": {"Bearer abc"}},
		},
		{
			name: "placeholder in a header name is left alone",
			host: "api.github.com",
			in:   http.Header{gh: {"v"}},
			want: http.Header{gh: {"v"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeGet{m: values}
			used, refused, err := ReplaceHeaders(tc.in, tc.host, bindings, f.get)
			if err != nil {
				t.Fatalf("ReplaceHeaders = %v", err)
			}
			if diff := cmp.Diff(tc.want, tc.in); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.used, used); diff != "" {
				t.Errorf("used (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.refus, refused); diff != "" {
				t.Errorf("refused (-want +got):\n%s", diff)
			}
			// Values are fetched only for the secrets that are sent.
			if diff := cmp.Diff(tc.used, f.calls); diff != "" {
				t.Errorf("get calls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReplaceHeadersSinglePass(t *testing.T) {
	a, b := Placeholder(), Placeholder()
	bindings := []Binding{
		{Name: "A", Placeholder: a, Hosts: []string{"x.test"}},
		{Name: "B", Placeholder: b, Hosts: []string{"x.test"}},
	}
	// A's value contains B's placeholder: it must not be expanded.
	f := &fakeGet{m: map[string]string{"A": "pre-" + b, "B": "bee"}}
	h := http.Header{"X": {a}}
	used, _, err := ReplaceHeaders(h, "x.test", bindings, f.get)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get("X"), "pre-"+b; got != want {
		t.Errorf("X = %q; want %q", got, want)
	}
	if diff := cmp.Diff([]string{"A"}, used); diff != "" {
		t.Errorf("used (-want +got):\n%s", diff)
	}
}

func TestReplaceHeadersErrors(t *testing.T) {
	ph := Placeholder()
	for _, tc := range []struct {
		name     string
		bindings []Binding
		values   map[string]string
		want     error
	}{
		{
			name:     "malformed placeholder",
			bindings: []Binding{{Name: "A", Placeholder: "Bearer", Hosts: []string{"x.test"}}},
			want:     errdefs.ErrInvalidArgument,
		},
		{
			name:     "empty placeholder",
			bindings: []Binding{{Name: "A", Hosts: []string{"x.test"}}},
			want:     errdefs.ErrInvalidArgument,
		},
		{
			name:     "unknown secret",
			bindings: []Binding{{Name: "A", Placeholder: ph, Hosts: []string{"x.test"}}},
			values:   map[string]string{},
			want:     errdefs.ErrNotFound,
		},
		{
			name:     "value would split the header",
			bindings: []Binding{{Name: "A", Placeholder: ph, Hosts: []string{"x.test"}}},
			values:   map[string]string{"A": "tok\r\nX-Injected: 1"},
			want:     errdefs.ErrInvalidArgument,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			orig := http.Header{"Authorization": {"Bearer " + ph}, "Other": {ph}}
			h := orig.Clone()
			f := &fakeGet{m: tc.values}
			_, _, err := ReplaceHeaders(h, "x.test", tc.bindings, f.get)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ReplaceHeaders = %v; want %v", err, tc.want)
			}
			if diff := cmp.Diff(orig, h); diff != "" {
				t.Errorf("headers changed on error (-want +got):\n%s", diff)
			}
			for _, v := range tc.values {
				if strings.Contains(err.Error(), v) {
					t.Errorf("error %q contains the secret value", err)
				}
			}
		})
	}
}
