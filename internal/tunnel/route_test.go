package tunnel

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"1", 1}, {"8000", 8000}, {"65535", 65535},
		{"", 0}, {"0", 0}, {"08000", 0}, {"65536", 0}, {"+80", 0}, {"-1", 0}, {"8o", 0}, {"123456", 0}, {" 80", 0},
	} {
		got, ok := parsePort(tc.in)
		if got != tc.want || ok != (tc.want != 0) {
			t.Errorf("parsePort(%q) = %d, %v; want %d", tc.in, got, ok, tc.want)
		}
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		in        string
		want      route
		slash, ok bool
	}{
		{"/t/sb1/8000/a/b", route{"sb1", 8000, "/a/b", "/t/sb1/8000/"}, false, true},
		{"/t/sb1/8000/", route{"sb1", 8000, "/", "/t/sb1/8000/"}, false, true},
		{"/t/sb1/8000//x", route{"sb1", 8000, "//x", "/t/sb1/8000/"}, false, true},
		{"/t/s%62/80/a%2Fb", route{"sb", 80, "/a%2Fb", "/t/s%62/80/"}, false, true},
		{"/t/sb1/8000", route{"sb1", 8000, "/", "/t/sb1/8000/"}, true, false},
		{"/t/sb1/", route{}, false, false},
		{"/t/sb1", route{}, false, false},
		{"/t//8000/", route{}, false, false},
		{"/t/a%2Fb/8000/", route{}, false, false},
		{"/t/a%zz/8000/", route{}, false, false},
		{"/t/sb1/0/", route{}, false, false},
		{"/t/sb1/x/", route{}, false, false},
		{"/u/sb1/8000/", route{}, false, false},
		{"", route{}, false, false},
	} {
		got, slash, ok := parsePath(tc.in)
		if slash != tc.slash || ok != tc.ok || (ok || slash) && got != tc.want {
			t.Errorf("parsePath(%q) = %+v, %v, %v; want %+v, %v, %v", tc.in, got, slash, ok, tc.want, tc.slash, tc.ok)
		}
	}
}

func TestParseHost(t *testing.T) {
	const domain = "tunnel.example"
	for _, tc := range []struct {
		host string
		id   string
		port int
	}{
		{"8000-sb1.tunnel.example", "sb1", 8000},
		{"8000-sb1.tunnel.example:443", "sb1", 8000},
		{"8000-sb1.TUNNEL.example.", "sb1", 8000},
		{"3000-my-box.tunnel.example", "my-box", 3000},
		{"tunnel.example", "", 0},
		{".tunnel.example", "", 0},
		{"8000-.tunnel.example", "", 0},
		{"-sb1.tunnel.example", "", 0},
		{"8000sb1.tunnel.example", "", 0},
		{"08000-sb1.tunnel.example", "", 0},
		{"8000-sb1.xtunnel.example", "", 0},
		{"8000-sb1xtunnel.example", "", 0},
		{"8000-a.b.tunnel.example", "", 0},
		{"8000-sb1.tunnel.example.evil", "", 0},
		{"[::1]:80", "", 0},
		{"", "", 0},
	} {
		id, port, ok := parseHost(tc.host, domain)
		if id != tc.id || port != tc.port || ok != (tc.id != "") {
			t.Errorf("parseHost(%q) = %q, %d, %v; want %q, %d", tc.host, id, port, ok, tc.id, tc.port)
		}
	}
	if _, _, ok := parseHost("8000-sb1.tunnel.example", ""); ok {
		t.Error("parseHost with no domain matched; want no host routing")
	}
}

func TestWithoutParam(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"corral_token=x", ""},
		{"a=1&corral_token=x&b=2", "a=1&b=2"},
		{"corral%5Ftoken=x&b=%20", "b=%20"},
		{"corral_token&corral_token=y&c", "c"},
		{"a=corral_token&corral_tokens=1", "a=corral_token&corral_tokens=1"},
	} {
		if got := withoutParam(tc.in, TokenParam); got != tc.want {
			t.Errorf("withoutParam(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestParamValues(t *testing.T) {
	got := paramValues("a=1&corral_token=x%2By&corral%5Ftoken=z&corral_token=%zz", TokenParam)
	if diff := cmp.Diff([]string{"x+y", "z"}, got); diff != "" {
		t.Errorf("paramValues (-want +got):\n%s", diff)
	}
}

func TestStripCookies(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{nil, nil},
		{[]string{"a=1; b=2"}, []string{"a=1; b=2"}},
		{[]string{"corral_tunnel_80=x"}, nil},
		{[]string{"a=1; corral_tunnel_80=x; b=2", "corral_tunnel_81=y; c=3"}, []string{"a=1; b=2; c=3"}},
	} {
		h := http.Header{}
		for _, v := range tc.in {
			h.Add("Cookie", v)
		}
		stripCookies(h, CookiePrefix)
		if diff := cmp.Diff(tc.want, h.Values("Cookie")); diff != "" {
			t.Errorf("stripCookies(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"8000-sb1.tunnel.example", "8000-sb1.tunnel.example:80", "[::1]:80", "1-a.TUNNEL.EXAMPLE.", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		id, port, ok := parseHost(host, "tunnel.example")
		if !ok {
			return
		}
		if port < 1 || port > 65535 || id == "" || strings.ContainsAny(id, ".:[]") {
			t.Fatalf("parseHost(%q) = %q, %d", host, id, port)
		}
		// The host names exactly what was parsed.
		want := strconv.Itoa(port) + "-" + id + ".tunnel.example"
		if h := strings.TrimSuffix(trimPort(host), "."); !strings.EqualFold(h, want) {
			t.Fatalf("parseHost(%q) = %q, %d; host is not %q", host, id, port, want)
		}
	})
}

func trimPort(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		return host[:i]
	}
	return host
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/t/sb1/8000/a/b", "/t/sb1/8000", "/t/a%2Fb/80/", "/t/x/0/", "/t//1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		rt, slash, ok := parsePath(p)
		if !ok && !slash {
			return
		}
		if slash && ok {
			t.Fatalf("parsePath(%q): both slash and ok", p)
		}
		if rt.port < 1 || rt.port > 65535 || rt.idOrName == "" || strings.Contains(rt.idOrName, "/") {
			t.Fatalf("parsePath(%q) = %+v", p, rt)
		}
		if !strings.HasPrefix(rt.path, "/") || !strings.HasPrefix(rt.cookiePath, pathPrefix) || !strings.HasSuffix(rt.cookiePath, "/") {
			t.Fatalf("parsePath(%q) = %+v", p, rt)
		}
		if ok && rt.cookiePath+rt.path[1:] != p {
			t.Fatalf("parsePath(%q) = %+v: prefix and rest do not rebuild the path", p, rt)
		}
	})
}

func FuzzWithoutParam(f *testing.F) {
	for _, s := range []string{"a=1&corral_token=x&b=2", "corral%5Ftoken=x", "&&=", "%zz=1&corral_token"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		out := withoutParam(q, TokenParam)
		if vs := paramValues(out, TokenParam); len(vs) != 0 {
			t.Fatalf("withoutParam(%q) = %q still carries %v", q, out, vs)
		}
		if v, err := url.ParseQuery(out); err == nil && v.Has(TokenParam) {
			t.Fatalf("withoutParam(%q) = %q still carries the parameter for url.ParseQuery", q, out)
		}
		if len(out) > len(q) {
			t.Fatalf("withoutParam(%q) = %q grew", q, out)
		}
	})
}

func TestParseHostDomainWithPort(t *testing.T) {
	for _, tc := range []struct {
		host, domain string
		id           string
		port         int
		ok           bool
	}{
		{"49983-abc.e2b.test:8443", "e2b.test:8443", "abc", 49983, true},
		{"3000-abc.E2B.test", "e2b.test:8443", "abc", 3000, true},
		{"3000-abc.e2b.test", "E2B.Test.", "abc", 3000, true},
		{"api.e2b.test:8443", "e2b.test:8443", "", 0, false},
		{"3000-abc.other.test", "e2b.test:8443", "", 0, false},
	} {
		id, port, ok := ParseHost(tc.host, tc.domain)
		if id != tc.id || port != tc.port || ok != tc.ok {
			t.Errorf("ParseHost(%q, %q) = %q, %d, %v; want %q, %d, %v", tc.host, tc.domain, id, port, ok, tc.id, tc.port, tc.ok)
		}
	}
}
