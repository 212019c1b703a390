//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// e2bDomainHost is the domain of the domain-mode tests; its names resolve
// to 127.0.0.1 in the test's clients only (no DNS server).
const e2bDomainHost = "e2b.test"

// selfSigned writes a certificate for *.e2b.test, e2b.test and 127.0.0.1,
// and its key, into dir; it returns their files and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "*." + e2bDomainHost},
		DNSNames:    []string{"*." + e2bDomainHost, e2bDomainHost},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	return certFile, keyFile, pool
}

// freePort returns a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startE2BDomain starts a daemon serving HTTPS on a loopback port with a
// self-signed certificate and [e2b] domain = "e2b.test:PORT"; it returns
// the daemon, the domain, the certificate file and a client that trusts
// it and sends every e2b.test name to the daemon.
func startE2BDomain(t *testing.T) (*daemon, string, string, *http.Client) {
	t.Helper()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	port := freePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	domain := fmt.Sprintf("%s:%d", e2bDomainHost, port)
	d := startDaemonWith(t, func(cfg *string, base string) {
		tok := filepath.Join(base, "token")
		if err := os.WriteFile(tok, []byte(e2bToken+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		*cfg += fmt.Sprintf("listen = %q\ntoken_file = %q\ntls_cert_file = %q\ntls_key_file = %q\n[e2b]\ndomain = %q\n",
			addr, tok, certFile, keyFile, domain)
	})
	tr := &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool},
		ForceAttemptHTTP2: true,
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			if h, _, err := net.SplitHostPort(a); err == nil && (h == e2bDomainHost || strings.HasSuffix(h, "."+e2bDomainHost)) {
				a = addr
			}
			var dl net.Dialer
			return dl.DialContext(ctx, network, a)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return d, domain, certFile, &http.Client{Transport: tr}
}

// call sends a request and returns the status, the body and the protocol.
func call(t *testing.T, c *http.Client, method, url, body string, hdr ...string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Proto
}

// TestE2BDomainMode drives E2B's domain mode with Go's HTTP client: the
// control plane over HTTPS, envd at 49983-{id}.{domain} with the access
// token, a port of the box at 8000-{id}.{domain}, public or behind the
// traffic token.
func TestE2BDomainMode(t *testing.T) {
	d, domain, _, c := startE2BDomain(t)
	api := "https://127.0.0.1:" + strings.TrimPrefix(domain, e2bDomainHost+":")
	key := []string{"X-API-KEY", e2bToken}

	type created struct {
		SandboxID          string `json:"sandboxID"`
		EnvdAccessToken    string `json:"envdAccessToken"`
		TrafficAccessToken string `json:"trafficAccessToken"`
		Domain             string `json:"domain"`
	}
	create := func(body string) created {
		t.Helper()
		code, out, proto := call(t, c, "POST", api+"/v2/sandboxes", body, append(key, "Content-Type", "application/json")...)
		var sb created
		if err := json.Unmarshal([]byte(out), &sb); err != nil || code != http.StatusCreated {
			t.Fatalf("POST /v2/sandboxes %s = %d %s; want 201", body, code, out)
		}
		if proto != "HTTP/2.0" {
			t.Errorf("the API answered over %s; want HTTP/2 over TLS", proto)
		}
		t.Cleanup(func() { _, _, _ = d.corral("rm", "-f", sb.SandboxID) })
		return sb
	}
	pub := create(`{"templateID":"host","timeout":300}`)
	if pub.Domain != domain {
		t.Errorf("create answered domain %q; want %q", pub.Domain, domain)
	}
	envd := "https://49983-" + pub.SandboxID + "." + domain
	tok := []string{"X-Access-Token", pub.EnvdAccessToken}

	// envd by host name: write a file, read it back.
	if code, out, _ := call(t, c, "POST", envd+"/files?path=/tmp/www/index.html", "hello by host name", append(tok, "Content-Type", "application/octet-stream")...); code != http.StatusOK {
		t.Fatalf("POST /files at %s = %d %s; want 200", envd, code, out)
	}
	if code, out, _ := call(t, c, "GET", envd+"/files?path=/tmp/www/index.html", "", tok...); code != http.StatusOK || out != "hello by host name" {
		t.Fatalf("GET /files at %s = %d %q; want the file", envd, code, out)
	}
	if code, out, _ := call(t, c, "GET", envd+"/health", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /health at %s without the access token = %d %s; want 401", envd, code, out)
	}

	// A port of the box: a web server started with the CLI.
	d.must("exec", "-d", pub.SandboxID, "python3", "-m", "http.server", "--bind", "127.0.0.1", "--directory", "/tmp/www", "8000")
	page := "https://8000-" + pub.SandboxID + "." + domain + "/index.html"
	var code int
	var out string
	// Until the server listens (502 before); the bound only ends a hung run.
	for end := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if code, out, _ = call(t, c, "GET", page, ""); code != http.StatusBadGateway || time.Now().After(end) {
			break
		}
	}
	if code != http.StatusOK || out != "hello by host name" {
		t.Fatalf("GET %s = %d %q; want the page, public", page, code, out)
	}

	// envd's /init by host name adds to the commands' environment.
	if code, out, _ := call(t, c, "POST", envd+"/init", `{"envVars":{"FROM_INIT":"yes"},"accessToken":"ignored"}`, append(tok, "Content-Type", "application/json")...); code != http.StatusNoContent {
		t.Errorf("POST /init at %s = %d %s; want 204", envd, code, out)
	}
	if out := d.must("exec", pub.SandboxID, "sh", "-c", "echo $FROM_INIT"); strings.TrimSpace(out) != "yes" {
		t.Errorf("a command after envd's /init printed %q; want yes", out)
	}

	// The sandbox's log: its audit trail.
	code, out, _ = call(t, c, "GET", api+"/v2/sandboxes/"+pub.SandboxID+"/logs?search=/tmp/www/index.html", "", key...)
	var logs struct {
		Logs []struct {
			Level   string `json:"level"`
			Message string `json:"message"`
		} `json:"logs"`
	}
	if err := json.Unmarshal([]byte(out), &logs); err != nil || code != http.StatusOK || len(logs.Logs) == 0 ||
		logs.Logs[0].Message != "file write /tmp/www/index.html" {
		t.Errorf("GET /v2/sandboxes/%s/logs = %d %s; want the file write first", pub.SandboxID, code, out)
	}

	// A box whose ports are not public.
	priv := create(`{"templateID":"host","timeout":300,"network":{"allowPublicTraffic":false}}`)
	if priv.TrafficAccessToken == "" {
		t.Fatal("create with allowPublicTraffic false answered no trafficAccessToken")
	}
	port := "https://8000-" + priv.SandboxID + "." + domain + "/"
	if code, out, _ := call(t, c, "GET", port, ""); code != http.StatusForbidden {
		t.Errorf("GET %s without the traffic token = %d %s; want 403", port, code, out)
	}
	if code, out, _ := call(t, c, "GET", port, "", "E2B-Traffic-Access-Token", priv.TrafficAccessToken); code != http.StatusBadGateway || !strings.Contains(out, "nothing is listening") {
		t.Errorf("GET %s with the traffic token = %d %s; want 502, nothing listening on the port", port, code, out)
	}
}

// TestE2BSDKDomainMode runs integration/e2b/domain.test.mjs: the official
// SDK configured by E2B_DOMAIN and E2B_API_KEY only, reaching the control
// plane at api.{domain} and sandboxes by host name, over HTTPS.
func TestE2BSDKDomainMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (scripts/deps.sh installs nodejs and npm)", bin)
		}
	}
	dir, err := filepath.Abs("e2b")
	if err != nil {
		t.Fatal(err)
	}
	ci := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	ci.Dir = dir
	if out, err := ci.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
	}
	d, domain, certFile, _ := startE2BDomain(t)
	d.must("image", "tag", "host", "base")
	cmd := exec.CommandContext(ctx, "npm", "test", "--", "domain.test.mjs")
	cmd.Dir = dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			env = append(env, kv)
		}
	}
	// As an E2B user would: the domain and the key, nothing else (the
	// SDK's control plane is then https://api.{domain}).
	cmd.Env = append(env, "E2B_DOMAIN="+domain, "E2B_API_KEY="+e2bToken,
		"NODE_EXTRA_CA_CERTS="+certFile, "CORRAL_E2B_RESOLVE="+e2bDomainHost, "CORRAL_E2B_DOMAIN="+domain, "CORRAL_E2B_TEMPLATE=base")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err = cmd.Run()
	t.Logf("node --test domain.test.mjs:\n%s", buf.String())
	if err != nil {
		t.Fatalf("the E2B SDK domain-mode tests failed: %v", err)
	}
	if left := strings.Fields(d.must("ls", "-q")); len(left) != 0 {
		t.Errorf("sandboxes %v left after the SDK tests; want none", left)
	}
}
