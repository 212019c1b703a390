package secrets

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("sb-test")
	if err != nil {
		t.Fatalf("NewCA = %v", err)
	}
	return ca
}

func rootsOf(t *testing.T, ca *CA) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CertPEM() is not a PEM certificate")
	}
	return pool
}

// loopbackPair returns the two ends of a loopback TCP connection. (A
// net.Pipe would deadlock when both sides write at once, as a client
// sending an alert and a server sending its flight do.)
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		client.Close()
		t.Fatal("accept on loopback failed")
	}
	return client, server
}

// handshake runs a TLS handshake over loopback TCP between a server using
// ca.TLSConfig and a client trusting roots and asking for serverName, then
// sends one line from the server to the client. It returns the client's
// error.
func handshake(t *testing.T, ca *CA, roots *x509.CertPool, serverName string) (tls.ConnectionState, error) {
	t.Helper()
	c, s := loopbackPair(t)
	server := tls.Server(s, ca.TLSConfig())
	done := make(chan error, 1)
	go func() {
		defer server.Close()
		if err := server.Handshake(); err != nil {
			done <- err
			return
		}
		_, err := io.WriteString(server, "hello\n")
		done <- err
	}()
	client := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: serverName, NextProtos: []string{"http/1.1"}})
	defer client.Close()
	err := client.Handshake()
	var state tls.ConnectionState
	if err == nil {
		state = client.ConnectionState()
		buf := make([]byte, 6)
		if _, err = io.ReadFull(client, buf); err == nil && string(buf) != "hello\n" {
			err = fmt.Errorf("read %q from the server; want %q", buf, "hello\n")
		}
	}
	client.Close()
	serverErr := <-done
	if err == nil && serverErr != nil {
		t.Errorf("server side: %v", serverErr)
	}
	return state, err
}

func TestCAHandshake(t *testing.T) {
	ca := newTestCA(t)
	state, err := handshake(t, ca, rootsOf(t, ca), "api.example.com")
	if err != nil {
		t.Fatalf("handshake with a client that trusts the CA = %v; want success", err)
	}
	if got := state.PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != "api.example.com" {
		t.Errorf("leaf DNSNames = %v; want [api.example.com]", got)
	}
	if state.NegotiatedProtocol != "http/1.1" {
		t.Errorf("NegotiatedProtocol = %q; want http/1.1", state.NegotiatedProtocol)
	}

	// A client that trusts no roots (not even the system's) refuses it.
	if _, err := handshake(t, ca, x509.NewCertPool(), "api.example.com"); err == nil {
		t.Error("handshake with a client that does not trust the CA succeeded; want a verification error")
	} else if !errors.As(err, new(*tls.CertificateVerificationError)) {
		t.Errorf("handshake error = %v; want a certificate verification error", err)
	}

	// So does one that trusts another sandbox's CA.
	if _, err := handshake(t, ca, rootsOf(t, newTestCA(t)), "api.example.com"); err == nil {
		t.Error("handshake with a client that trusts another CA succeeded; want an error")
	}
}

func TestCAHandshakeNoSNI(t *testing.T) {
	ca := newTestCA(t)
	c, s := loopbackPair(t)
	server := tls.Server(s, ca.TLSConfig())
	done := make(chan error, 1)
	go func() {
		defer server.Close()
		done <- server.Handshake()
	}()
	client := tls.Client(c, &tls.Config{RootCAs: rootsOf(t, ca), InsecureSkipVerify: true}) //nolint:gosec // testing the server's refusal, not the client's verification
	err := client.Handshake()
	client.Close()
	if serverErr := <-done; serverErr == nil || err == nil {
		t.Errorf("handshake without SNI: client %v, server %v; want both to fail", err, serverErr)
	}
}

func TestCACertificate(t *testing.T) {
	ca := newTestCA(t)
	block, rest := pem.Decode(ca.CertPEM())
	if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("CertPEM() = %q; want exactly one CERTIFICATE block", ca.CertPEM())
	}
	if bytes.Contains(ca.CertPEM(), []byte("PRIVATE")) {
		t.Error("CertPEM() contains a private key")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Corral sandbox sb-test CA"; cert.Subject.CommonName != want {
		t.Errorf("CommonName = %q; want %q", cert.Subject.CommonName, want)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("IsCA=%v MaxPathLen=%d MaxPathLenZero=%v; want a CA with MaxPathLen 0", cert.IsCA, cert.MaxPathLen, cert.MaxPathLenZero)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key = %T; want ECDSA P-256", cert.PublicKey)
	}
	now := time.Now()
	if !cert.NotBefore.Before(now.Add(-50*time.Minute)) || cert.NotAfter.Before(now.AddDate(9, 11, 0)) {
		t.Errorf("validity %s .. %s; want from about 1 hour ago for 10 years", cert.NotBefore, cert.NotAfter)
	}

	// Mutating the returned slice does not change the CA.
	p := ca.CertPEM()
	p[0] = 'X'
	if ca.CertPEM()[0] != '-' {
		t.Error("CertPEM() returned the CA's own buffer")
	}

	if _, err := NewCA("../bad"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("NewCA(%q) = %v; want ErrInvalidArgument", "../bad", err)
	}
}

func TestCALeaf(t *testing.T) {
	ca := newTestCA(t)
	roots := rootsOf(t, ca)
	for _, host := range []string{"api.example.com", "127.0.0.1", "::1", "under_score.example"} {
		leaf, err := ca.Leaf(host)
		if err != nil {
			t.Fatalf("Leaf(%q) = %v", host, err)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: roots}); err != nil {
			t.Errorf("Leaf(%q) does not verify: %v", host, err)
		}
		if d := leaf.Leaf.NotAfter.Sub(leaf.Leaf.NotBefore); d != 7*24*time.Hour+time.Hour {
			t.Errorf("Leaf(%q) lives %s; want 7 days plus 1 hour back-dated", host, d)
		}
		if len(leaf.Leaf.ExtKeyUsage) != 1 || leaf.Leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
			t.Errorf("Leaf(%q) ExtKeyUsage = %v; want server auth", host, leaf.Leaf.ExtKeyUsage)
		}
	}
	leaf, err := ca.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.Leaf.IPAddresses) != 1 || len(leaf.Leaf.DNSNames) != 0 {
		t.Errorf("Leaf(127.0.0.1): IPAddresses %v, DNSNames %v; want one IP and no name", leaf.Leaf.IPAddresses, leaf.Leaf.DNSNames)
	}

	for _, bad := range []string{"", ".", "a..b", "*.example.com", "bad host", "\u212aey.com", "fe80::1%eth0"} {
		if _, err := ca.Leaf(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Leaf(%q) = %v; want ErrInvalidArgument", bad, err)
		}
	}
}

func TestCALeafCache(t *testing.T) {
	ca := newTestCA(t)
	a, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ca.Leaf("API.example.com.")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("Leaf twice for one host (modulo case and trailing dot) minted two certificates; want the cached one")
	}

	// Near its expiry the cached leaf is replaced.
	now := time.Now()
	ca.now = func() time.Time { return now.Add(6*24*time.Hour + time.Minute) }
	c, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if c == a {
		t.Error("Leaf returned a cached certificate with less than a day left; want a new one")
	}
	if !c.Leaf.NotAfter.After(a.Leaf.NotAfter) {
		t.Errorf("renewed leaf expires %s, not after the old %s", c.Leaf.NotAfter, a.Leaf.NotAfter)
	}
	ca.now = time.Now

	// The cache holds the 256 most recently used hosts.
	first, err := ca.Leaf("h0.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 256; i++ {
		if _, err := ca.Leaf(fmt.Sprintf("h%d.example.com", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := ca.lru.Len(); n != 256 || len(ca.leaves) != 256 {
		t.Errorf("cache holds %d (%d indexed); want 256", n, len(ca.leaves))
	}
	again, err := ca.Leaf("h0.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if again == first {
		t.Error("the least recently used leaf survived 256 newer ones; want it evicted")
	}
	last, err := ca.Leaf("h256.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if again2, _ := ca.Leaf("h256.example.com"); again2 != last {
		t.Error("a recently used leaf was not cached")
	}
}

func TestCAExpired(t *testing.T) {
	ca := newTestCA(t)
	ca.now = func() time.Time { return time.Now().AddDate(11, 0, 0) }
	if _, err := ca.Leaf("api.example.com"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Leaf after the CA expired = %v; want ErrFailedPrecondition", err)
	}
	// Shortly before, the leaf is cut to the CA's expiry.
	ca.now = func() time.Time { return ca.cert.NotAfter.Add(-2 * time.Hour) }
	leaf, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if !leaf.Leaf.NotAfter.Equal(ca.cert.NotAfter) {
		t.Errorf("leaf NotAfter = %s; want the CA's %s", leaf.Leaf.NotAfter, ca.cert.NotAfter)
	}
}

func TestCASaveLoad(t *testing.T) {
	ca := newTestCA(t)
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := ca.Save(path); err != nil {
		t.Fatalf("Save = %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o600 {
		t.Errorf("mode of saved CA = %#o; want 0600", got)
	}
	loaded, err := LoadCA(path)
	if err != nil {
		t.Fatalf("LoadCA = %v", err)
	}
	if !bytes.Equal(loaded.CertPEM(), ca.CertPEM()) {
		t.Error("LoadCA(Save) has another certificate")
	}
	// A box that trusts the old CA accepts leaves minted by the loaded one.
	if _, err := handshake(t, loaded, rootsOf(t, ca), "api.example.com"); err != nil {
		t.Errorf("handshake against the loaded CA = %v; want success", err)
	}
	// Saving again replaces the file and leaves no temporary file behind.
	if err := loaded.Save(path); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("dir holds %d entries after two saves; want 1", len(entries))
	}
}

func TestLoadCAErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadCA(filepath.Join(dir, "missing.pem")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("LoadCA(missing) = %v; want ErrNotFound", err)
	}

	ca := newTestCA(t)
	good := filepath.Join(dir, "ca.pem")
	if err := ca.Save(good); err != nil {
		t.Fatal(err)
	}
	saved, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t)
	otherPath := filepath.Join(dir, "other.pem")
	if err := other.Save(otherPath); err != nil {
		t.Fatal(err)
	}
	otherSaved, err := os.ReadFile(otherPath)
	if err != nil {
		t.Fatal(err)
	}
	keyOf := func(b []byte) []byte { return b[bytes.Index(b, []byte("-----BEGIN PRIVATE KEY")):] }
	certOf := func(b []byte) []byte { return b[:bytes.Index(b, []byte("-----BEGIN PRIVATE KEY"))] }
	leaf, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
	leafKey, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	leafKeyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: leafKey})

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"certificate only", ca.CertPEM()},
		{"key only", keyOf(saved)},
		{"mismatched key", append(certOf(saved), keyOf(otherSaved)...)},
		{"two certificates", append(append([]byte(nil), saved...), ca.CertPEM()...)},
		{"not a CA", append(leafPEM, leafKeyPEM...)},
		{"garbage certificate", []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")},
		{"unexpected block", append(append([]byte(nil), saved...), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: []byte{1}})...)},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := os.WriteFile(p, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadCA(p); !errors.Is(err, errdefs.ErrDataLoss) {
			t.Errorf("LoadCA(%s) = %v; want ErrDataLoss", tc.name, err)
		}
	}

	if err := os.Chmod(good, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCA(good); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("LoadCA(0644 file) = %v; want ErrFailedPrecondition", err)
	}
}
