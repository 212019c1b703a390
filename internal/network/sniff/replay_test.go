package sniff

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// selfSigned returns a certificate for name and a pool that trusts it.
func selfSigned(t *testing.T, name string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// TestReplayTLS sniffs a real TLS client, hands the connection to
// crypto/tls through Replay and completes the handshake.
func TestReplayTLS(t *testing.T) {
	cert, pool := selfSigned(t, "sniff.test")
	c, s := net.Pipe()
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: "sniff.test", RootCAs: pool, NextProtos: []string{"h2"}})
		if _, err := tc.Write([]byte("ping")); err != nil { // handshakes first
			done <- err
			return
		}
		_, err := io.ReadFull(tc, make([]byte, 4))
		done <- err
	}()
	res, prefix, err := Sniff(s, 0)
	if err != nil || res.Kind != TLS || res.Name != "sniff.test" || len(res.ALPN) != 1 {
		t.Fatalf("Sniff() = %+v, %v; want TLS sniff.test [h2]", res, err)
	}
	ts := tls.Server(Replay(s, prefix), &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
	buf := make([]byte, 4)
	if _, err := io.ReadFull(ts, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read through Replay = %q, %v; want ping", buf, err)
	}
	if got := ts.ConnectionState().ServerName; got != "sniff.test" {
		t.Errorf("crypto/tls saw server name %q; want sniff.test", got)
	}
	if _, err := ts.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("client: %v", err)
	}
}

func TestReplayHTTP(t *testing.T) {
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		defer c.Close()
		req, _ := http.NewRequest(http.MethodPost, "http://api.example:8080/v1?q=1", strings.NewReader("body"))
		_ = req.Write(c)
	}()
	res, prefix, err := Sniff(s, 0)
	if err != nil || res.Kind != HTTP || res.Name != "api.example" || res.Port != 8080 || res.Method != "POST" || res.Target != "/v1?q=1" {
		t.Fatalf("Sniff() = %+v, %v; want POST /v1?q=1 to api.example:8080", res, err)
	}
	req, err := http.ReadRequest(bufio.NewReader(Replay(s, prefix)))
	if err != nil {
		t.Fatalf("http.ReadRequest through Replay: %v", err)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil || req.Host != "api.example:8080" || string(body) != "body" {
		t.Fatalf("request through Replay: host %q, body %q, %v; want api.example:8080, body", req.Host, body, err)
	}
}

func TestReplayPrefixThenConn(t *testing.T) {
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		defer c.Close()
		_, _ = c.Write([]byte("world"))
	}()
	rc := Replay(s, []byte("hello "))
	small := make([]byte, 4)
	// A read never mixes the prefix with fresh bytes, so it cannot block
	// while prefix bytes are pending.
	if n, err := rc.Read(small); err != nil || string(small[:n]) != "hell" {
		t.Fatalf("Read = %q, %v; want hell", small[:n], err)
	}
	rest, err := io.ReadAll(rc)
	if err != nil || string(rest) != "o world" {
		t.Fatalf("ReadAll = %q, %v; want \"o world\"", rest, err)
	}
	if _, ok := rc.(interface{ CloseWrite() error }); ok {
		t.Errorf("Replay(net.Pipe) has CloseWrite; net.Pipe has none")
	}
	if Replay(s, nil) != s {
		t.Errorf("Replay(c, nil) != c")
	}
}

func TestReplayCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	a := <-ch
	if a.err != nil {
		t.Fatal(a.err)
	}
	defer a.c.Close()

	rc := Replay(a.c, []byte("x"))
	cw, ok := rc.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("Replay(*net.TCPConn) has no CloseWrite")
	}
	if err := cw.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite: %v", err)
	}
	// The client sees EOF while the read side stays open.
	if n, err := client.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("client Read after CloseWrite = %d, %v; want EOF", n, err)
	}
	if _, err := client.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.LimitReader(rc, 2))
	if err != nil || string(got) != "xy" {
		t.Fatalf("read = %q, %v; want xy", got, err)
	}
}
