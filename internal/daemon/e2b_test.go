package daemon

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeCert writes a self-signed certificate for name and its key to
// dir/cert.pem and dir/key.pem.
func writeCert(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestCertReloader checks that the listener's certificate is read at
// start (a bad pair is an error naming the keys) and again once its files
// change.
func TestCertReloader(t *testing.T) {
	dir := t.TempDir()
	if _, err := loadCert(filepath.Join(dir, "none.pem"), filepath.Join(dir, "none.key")); err == nil {
		t.Error("loadCert of missing files succeeded; want an error")
	}
	certFile, keyFile := writeCert(t, dir, "a.example")
	if err := os.WriteFile(filepath.Join(dir, "other.pem"), []byte("junk"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadCert(filepath.Join(dir, "other.pem"), keyFile); err == nil {
		t.Error("loadCert of a bad certificate succeeded; want an error")
	}
	r, err := loadCert(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.config()
	name := func() string {
		t.Helper()
		c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		x, err := x509.ParseCertificate(c.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.Subject.CommonName
	}
	if got := name(); got != "a.example" {
		t.Fatalf("certificate = %s; want a.example", got)
	}
	writeCert(t, dir, "b.example")
	later := time.Now().Add(time.Minute)
	for _, p := range []string{certFile, keyFile} {
		if err := os.Chtimes(p, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if got := name(); got != "b.example" {
		t.Errorf("certificate after the files changed = %s; want b.example", got)
	}
}
