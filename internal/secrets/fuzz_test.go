package secrets

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// FuzzMatchHost checks host matching against untrusted hosts (SNI and Host
// headers come from the sandbox) and arbitrary patterns.
func FuzzMatchHost(f *testing.F) {
	for _, seed := range [][2]string{
		{"api.example.com", "api.example.com"},
		{"*.example.com", "a.b.example.com"},
		{"*.example.com", "example.com"},
		{"*.example.com", ".example.com"},
		{"*", "x"},
		{"1.2.3.4", "1.2.3.4:443"},
		{"::1", "[::1]:443"},
		{"key.example.com", "\u212aey.example.com"},
		{"*.example.com", "a..example.com"},
		{"a.example.com.", "A.EXAMPLE.COM."},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		b := Binding{Name: "X", Placeholder: Placeholder(), Hosts: []string{pattern}}
		got := b.allows(host)
		if !got {
			return
		}
		h, ok := normalizeHost(host)
		if !ok {
			t.Fatalf("pattern %q allows %q, which does not normalize", pattern, host)
		}
		for i := 0; i < len(h); i++ {
			if h[i] >= 0x80 || ('A' <= h[i] && h[i] <= 'Z') {
				t.Fatalf("pattern %q allows %q, normalized to %q with a non-ASCII or upper-case byte", pattern, host, h)
			}
		}
		if strings.Contains(h, "..") || strings.HasPrefix(h, ".") || strings.Contains(h, "*") {
			t.Fatalf("pattern %q allows %q (normalized %q) with an empty label or a '*'", pattern, host, h)
		}
		if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
			suffix = strings.ToLower(strings.TrimSuffix(suffix, "."))
			if !strings.HasSuffix(h, "."+suffix) {
				t.Fatalf("wildcard %q allows %q (normalized %q), which is not below %q", pattern, host, h, suffix)
			}
		} else if p, _ := normalizeName(pattern); p != h {
			t.Fatalf("pattern %q (normalized %q) allows %q (normalized %q)", pattern, p, host, h)
		}
		// Case and a trailing dot do not matter.
		if !b.allows(strings.ToUpper(h)) || (!isIP(h) && !b.allows(h+".")) {
			t.Fatalf("pattern %q allows %q but not its upper-case or dotted form", pattern, h)
		}
	})
}

// FuzzReplaceHeaders checks that a secret reaches only its allowed host,
// whatever the header value and host the sandbox sends.
func FuzzReplaceHeaders(f *testing.F) {
	const ph = "corral-secret-0123456789abcdef0123456789abcdef"
	const value = "VALUE-of-the-secret"
	f.Add("Bearer "+ph, "api.example.com")
	f.Add("Bearer "+ph, "evil.example.net")
	f.Add(ph+ph+"x", "API.EXAMPLE.COM.")
	f.Add("no placeholder", "api.example.com")
	f.Add("corral-secret-"+ph, "api.example.com:443")
	f.Fuzz(func(t *testing.T, v, host string) {
		bindings := []Binding{{Name: "TOKEN", Placeholder: ph, Hosts: []string{"api.example.com"}}}
		h := http.Header{"Authorization": {v}}
		get := func(string) ([]byte, error) { return []byte(value), nil }
		used, refused, err := ReplaceHeaders(h, host, bindings, get)
		if err != nil {
			t.Fatalf("ReplaceHeaders(%q, %q) = %v", v, host, err)
		}
		got := h.Get("Authorization")
		allowed := Wants(bindings, host)
		has := strings.Contains(v, ph)
		switch {
		case allowed && has:
			if want := strings.ReplaceAll(v, ph, value); got != want || len(used) != 1 || len(refused) != 0 {
				t.Fatalf("ReplaceHeaders(%q, %q) = %q, used %v, refused %v; want %q, used [TOKEN]", v, host, got, used, refused, want)
			}
		case has:
			if got != v || len(used) != 0 || len(refused) != 1 {
				t.Fatalf("ReplaceHeaders(%q, disallowed %q) = %q, used %v, refused %v; want it unchanged and refused", v, host, got, used, refused)
			}
		default:
			if got != v || used != nil || refused != nil {
				t.Fatalf("ReplaceHeaders(%q, %q) without placeholder = %q, %v, %v; want it unchanged", v, host, got, used, refused)
			}
		}
	})
}

// FuzzLeaf checks that the server names a sandbox sends yield either an
// ErrInvalidArgument error or a certificate for exactly that name.
func FuzzLeaf(f *testing.F) {
	ca, err := NewCA("fuzz")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{"api.example.com", "API.example.com.", "127.0.0.1", "::1", "", "*.x", "a..b", "\u212a.com"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, host string) {
		leaf, err := ca.Leaf(host)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Leaf(%q) = %v; want ErrInvalidArgument", host, err)
			}
			return
		}
		name, _ := normalizeName(host)
		sans := append([]string(nil), leaf.Leaf.DNSNames...)
		for _, ip := range leaf.Leaf.IPAddresses {
			sans = append(sans, ip.String())
		}
		if len(sans) != 1 || sans[0] != name {
			t.Fatalf("Leaf(%q) names %v; want only %q", host, sans, name)
		}
	})
}
