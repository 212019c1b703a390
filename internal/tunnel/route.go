package tunnel

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// pathPrefix starts every path-form tunnel URL.
const pathPrefix = "/t/"

// route is where a request goes, as parsed from its URL or Host.
type route struct {
	idOrName string // as written in the URL, unescaped
	port     int
	// path is the escaped path to forward, starting with "/".
	path string
	// cookiePath scopes the token cookie: "/t/{id}/{port}/" or "/".
	cookiePath string
}

// parsePort parses a port written in canonical decimal (no sign, no leading
// zero) in 1..65535, so that one port has one spelling.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 || s[0] == '0' {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, false
	}
	return p, true
}

// parsePath parses the escaped path of a path-form URL,
// /t/{id}/{port}/{rest...}. slash reports a URL that lacks only the slash
// after the port (/t/{id}/{port}); ok is false for anything else that is not
// a tunnel path.
func parsePath(escaped string) (rt route, slash, ok bool) {
	s, found := strings.CutPrefix(escaped, pathPrefix)
	if !found {
		return route{}, false, false
	}
	seg, s, found := strings.Cut(s, "/")
	if !found || seg == "" {
		return route{}, false, false
	}
	id, err := url.PathUnescape(seg)
	if err != nil || id == "" || strings.Contains(id, "/") {
		return route{}, false, false
	}
	portSeg, rest, found := strings.Cut(s, "/")
	port, portOK := parsePort(portSeg)
	if !portOK {
		return route{}, false, false
	}
	rt = route{
		idOrName:   id,
		port:       port,
		path:       "/" + rest,
		cookiePath: pathPrefix + seg + "/" + portSeg + "/",
	}
	return rt, !found, found
}

// parseHost parses a host-form Host header, "{port}-{id}.{domain}" with an
// optional ":port" suffix and trailing dot, against domain (already
// normalized by normDomain). The domain matches without regard to case; the
// first label must be exactly one port and one ID joined by "-".
func parseHost(host, domain string) (id string, port int, ok bool) {
	if domain == "" {
		return "", 0, false
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	if len(host) <= len(domain)+1 {
		return "", 0, false
	}
	label, suffix := host[:len(host)-len(domain)-1], host[len(host)-len(domain)-1:]
	if suffix[0] != '.' || !strings.EqualFold(suffix[1:], domain) {
		return "", 0, false
	}
	portSeg, id, found := strings.Cut(label, "-")
	if !found || id == "" || strings.ContainsAny(id, ".[]:") {
		return "", 0, false
	}
	port, ok = parsePort(portSeg)
	if !ok {
		return "", 0, false
	}
	return id, port, true
}

// normDomain lowercases domain and drops leading and trailing dots.
func normDomain(domain string) string {
	return strings.ToLower(strings.Trim(domain, "."))
}

// withoutParam returns rawQuery without any name=value pair whose name
// decodes to name, leaving every other pair exactly as written.
func withoutParam(rawQuery, name string) string {
	if rawQuery == "" {
		return ""
	}
	parts := strings.Split(rawQuery, "&")
	kept := parts[:0]
	for _, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err == nil && dk == name {
			continue
		}
		kept = append(kept, p)
	}
	return strings.Join(kept, "&")
}

// paramValues returns the values of name in rawQuery, in order.
func paramValues(rawQuery, name string) []string {
	var vs []string
	for p := range strings.SplitSeq(rawQuery, "&") {
		k, v, _ := strings.Cut(p, "=")
		if dk, err := url.QueryUnescape(k); err != nil || dk != name {
			continue
		}
		if dv, err := url.QueryUnescape(v); err == nil {
			vs = append(vs, dv)
		}
	}
	return vs
}

// stripCookies removes every cookie whose name starts with prefix from the
// Cookie headers of h, leaving the other cookies exactly as sent.
func stripCookies(h http.Header, prefix string) {
	var out []string
	changed := false
	for _, line := range h.Values("Cookie") {
		var kept []string
		for c := range strings.SplitSeq(line, ";") {
			c = strings.TrimSpace(c)
			if c == "" {
				continue
			}
			if strings.HasPrefix(c, prefix) {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, "; "))
		}
	}
	if !changed {
		return
	}
	h.Del("Cookie")
	if len(out) > 0 {
		// RFC 6265 wants one Cookie header on HTTP/1.1.
		h.Set("Cookie", strings.Join(out, "; "))
	}
}
