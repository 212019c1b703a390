package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"

	"github.com/containerd/errdefs"
)

const (
	placeholderPrefix = "corral-secret-"
	placeholderLength = len(placeholderPrefix) + 32
)

// Placeholder returns a fresh opaque placeholder for a secret:
// "corral-secret-" followed by 32 lower-case hex digits from crypto/rand. It
// is independent of the secret's name and value, so it reveals nothing about
// either.
func Placeholder() string {
	var b [16]byte
	// crypto/rand.Read never returns an error; it crashes the program
	// irrecoverably instead.
	_, _ = rand.Read(b[:])
	return placeholderPrefix + hex.EncodeToString(b[:])
}

// validPlaceholder reports whether p has the form Placeholder returns.
// ReplaceHeaders insists on it so that a binding can never turn ordinary
// header text (say "Bearer") into a secret.
func validPlaceholder(p string) bool {
	if len(p) != placeholderLength || !strings.HasPrefix(p, placeholderPrefix) {
		return false
	}
	for _, c := range []byte(p[len(placeholderPrefix):]) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Binding ties a secret to the placeholder a sandbox sees in its place and
// to the hosts the real value may be sent to.
//
// Hosts holds allowlist-style patterns: "api.example.com" matches that host
// only and "*.example.com" matches any host with one or more labels before
// "example.com", but not "example.com" itself. Matching is per DNS label,
// ignores ASCII case and a trailing dot, and never matches a non-ASCII host.
// An IP address pattern matches that address only; wildcards never match an
// IP address. Patterns carry no port. Any other use of '*' (a lone "*",
// "a.*.com", "*foo.com") matches nothing, so a secret is never sent to every
// host by accident; so does a host with characters other than ASCII letters,
// digits, '-', '_' and '.'.
type Binding struct {
	// Name is the secret's name in the Store.
	Name string
	// Placeholder is what the sandbox sees in place of the value; it must
	// have the form Placeholder returns.
	Placeholder string
	// Hosts are the patterns of the hosts the value may be sent to.
	Hosts []string
}

// allows reports whether b lets its secret go to host.
func (b *Binding) allows(host string) bool {
	h, ok := normalizeHost(host)
	if !ok {
		return false
	}
	for _, p := range b.Hosts {
		if matchHost(p, h) {
			return true
		}
	}
	return false
}

// Wants reports whether any binding allows host, that is whether the proxy
// must intercept TLS to host to be able to replace placeholders.
func Wants(bindings []Binding, host string) bool {
	for i := range bindings {
		if bindings[i].allows(host) {
			return true
		}
	}
	return false
}

// ReplaceHeaders replaces, in every header value of h and in nothing else,
// each placeholder whose binding allows host with the secret's value, fetched
// through get (Store.Get in production). Header names are never changed.
// Replacement is a single pass: a value that happens to contain another
// placeholder is not expanded further.
//
// It returns the sorted names of the secrets it put in (used) and of those
// whose placeholder it found but left as it was because their binding does
// not allow host (refused), so that the proxy can log "secret X not sent to
// host Y"; such a request goes out with the useless placeholder.
//
// On error h is left unchanged. Errors are an errdefs.ErrInvalidArgument
// error for a binding whose placeholder is malformed or a value that cannot
// be sent in a header (a control character such as CR or LF, which would
// split the header), or whatever get returns, wrapped with the secret's
// name. Error messages never contain values.
func ReplaceHeaders(h http.Header, host string, bindings []Binding, get func(name string) ([]byte, error)) (used, refused []string, err error) {
	var pairs []string
	for i := range bindings {
		b := &bindings[i]
		if !validPlaceholder(b.Placeholder) {
			return nil, nil, fmt.Errorf("secret %s: malformed placeholder: %w", b.Name, errdefs.ErrInvalidArgument)
		}
		if !headerContains(h, b.Placeholder) {
			continue
		}
		if !b.allows(host) {
			refused = append(refused, b.Name)
			continue
		}
		value, err := get(b.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("secret %s: %w", b.Name, err)
		}
		if !validHeaderValue(value) {
			return nil, nil, fmt.Errorf("secret %s: value contains a control character and cannot be sent in an HTTP header: %w", b.Name, errdefs.ErrInvalidArgument)
		}
		pairs = append(pairs, b.Placeholder, string(value))
		used = append(used, b.Name)
	}
	if len(pairs) > 0 {
		r := strings.NewReplacer(pairs...)
		for _, vs := range h {
			for i, v := range vs {
				vs[i] = r.Replace(v)
			}
		}
	}
	return sortedUnique(used), sortedUnique(refused), nil
}

func headerContains(h http.Header, s string) bool {
	for _, vs := range h {
		for _, v := range vs {
			if strings.Contains(v, s) {
				return true
			}
		}
	}
	return false
}

// validHeaderValue reports whether b may appear in an HTTP header field
// value: no control characters other than horizontal tab (RFC 9110 5.5).
func validHeaderValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func sortedUnique(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	sort.Strings(s)
	out := s[:1]
	for _, v := range s[1:] {
		if v != out[len(out)-1] {
			out = append(out, v)
		}
	}
	return out
}

// normalizeHost turns host (a TLS server name, or an HTTP Host with an
// optional port, an IPv6 address possibly in brackets) into the form
// matchHost compares; see normalizeName.
func normalizeHost(host string) (string, bool) {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return normalizeName(host)
}

// normalizeName turns a host name or IP address (IPv6 possibly in
// brackets) into lower-case ASCII without a trailing dot, or a canonical IP
// address. It reports false for a name that must match nothing: empty, with
// a character other than ASCII letters, digits, '-', '_' and '.', with an
// empty label, or an IP address with a zone.
func normalizeName(name string) (string, bool) {
	bracketed := strings.HasPrefix(name, "[") && strings.HasSuffix(name, "]")
	if bracketed {
		name = name[1 : len(name)-1]
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		if ip.Zone() != "" {
			return "", false
		}
		return ip.Unmap().String(), true
	}
	if bracketed {
		return "", false
	}
	name = strings.TrimSuffix(name, ".")
	if name == "" || len(name) > 253 {
		return "", false
	}
	for i := 0; i < len(name); i++ {
		// Only ASCII: strings.ToLower would fold, say, the Kelvin sign
		// into 'k' and let "\u212aey.com" match "key.com".
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return "", false
		}
	}
	if name[0] == '.' || strings.Contains(name, "..") {
		return "", false
	}
	return asciiLower(name), true
}

// matchHost reports whether pattern matches host, which normalizeHost has
// already normalized.
func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		suffix, ok := normalizeName(suffix)
		if !ok || isIP(suffix) || isIP(host) {
			return false
		}
		return len(host) > len(suffix)+1 && strings.HasSuffix(host, "."+suffix)
	}
	p, ok := normalizeName(pattern)
	return ok && p == host
}

func isIP(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
