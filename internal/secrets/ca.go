package secrets

import (
	"bytes"
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/corral-sandbox/corral/internal/atomicfile"
	"github.com/corral-sandbox/corral/internal/identifiers"
)

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 7 * 24 * time.Hour
	// backdate covers clocks that run behind, in the box or upstream.
	backdate = time.Hour
	// leafRenew is how long before it expires a cached leaf is replaced.
	leafRenew = 24 * time.Hour
	// leafCacheSize is how many leaf certificates a CA keeps.
	leafCacheSize = 256
	// maxCAFileSize bounds what LoadCA reads.
	maxCAFileSize = 64 << 10
)

// CA is a per-sandbox certificate authority with which the egress proxy
// intercepts TLS to the hosts a sandbox's secrets are bound to. Its
// certificate (CertPEM) is installed into the sandbox's trust store; its key
// stays on the host (see Save) and never enters the box.
//
// The CA is ECDSA P-256, valid for 10 years from 1 hour ago, with the common
// name "Corral sandbox <id> CA" and MaxPathLen 0. It carries no X.509 name
// constraints: the hosts a sandbox's secrets are bound to may change while it
// runs, and the certificate is trusted by that one sandbox only, so a
// constraint would buy little. What stops it from being used for other hosts
// is the proxy, which intercepts only the hosts for which Wants is true.
//
// Leaf certificates are minted on demand, valid for 7 days from 1 hour ago
// (never past the CA's own expiry), and the 256 most recently used are
// cached; a cached leaf is replaced a day before it expires. A CA is safe for
// concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	now     func() time.Time

	mu sync.Mutex
	// leaves indexes lru by host; guarded by mu.
	leaves map[string]*list.Element
	// lru holds *leafEntry, most recently used first; guarded by mu.
	lru *list.List
}

type leafEntry struct {
	host string
	cert *tls.Certificate
}

// NewCA creates a certificate authority for the sandbox sandboxID.
func NewCA(sandboxID string) (*CA, error) {
	if err := identifiers.Validate("sandbox id", sandboxID); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Corral sandbox " + sandboxID + " CA", Organization: []string{"Corral"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	return newCA(cert, key), nil
}

func newCA(cert *x509.Certificate, key *ecdsa.PrivateKey) *CA {
	return &CA{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		now:     time.Now,
		leaves:  make(map[string]*list.Element),
		lru:     list.New(),
	}
}

// LoadCA reads a CA that Save wrote to path. It returns an
// errdefs.ErrNotFound error when path does not exist, an
// errdefs.ErrFailedPrecondition error when others can read it, and an
// errdefs.ErrDataLoss error when it does not hold a CA certificate and its
// matching key.
func LoadCA(path string) (*CA, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("load CA: %s does not exist: %w", path, errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load CA: %s has mode %#o; want 0600: %w", path, perm, errdefs.ErrFailedPrecondition)
	}
	b, err := readLimited(path, maxCAFileSize)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	var cert *x509.Certificate
	var key *ecdsa.PrivateKey
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		switch block.Type {
		case "CERTIFICATE":
			if cert != nil {
				return nil, fmt.Errorf("load CA: %s holds more than one certificate: %w", path, errdefs.ErrDataLoss)
			}
			if cert, err = x509.ParseCertificate(block.Bytes); err != nil {
				return nil, fmt.Errorf("load CA: %s: %w: %w", path, err, errdefs.ErrDataLoss)
			}
		case "PRIVATE KEY":
			if key != nil {
				return nil, fmt.Errorf("load CA: %s holds more than one key: %w", path, errdefs.ErrDataLoss)
			}
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("load CA: %s: %w: %w", path, err, errdefs.ErrDataLoss)
			}
			var ok bool
			if key, ok = k.(*ecdsa.PrivateKey); !ok {
				return nil, fmt.Errorf("load CA: %s: key is %T, not ECDSA: %w", path, k, errdefs.ErrDataLoss)
			}
		default:
			return nil, fmt.Errorf("load CA: %s: unexpected PEM block %q: %w", path, block.Type, errdefs.ErrDataLoss)
		}
	}
	switch {
	case cert == nil || key == nil:
		return nil, fmt.Errorf("load CA: %s lacks a certificate or a key: %w", path, errdefs.ErrDataLoss)
	case !cert.IsCA:
		return nil, fmt.Errorf("load CA: certificate in %s is not a CA: %w", path, errdefs.ErrDataLoss)
	case !key.PublicKey.Equal(cert.PublicKey):
		return nil, fmt.Errorf("load CA: key in %s does not match its certificate: %w", path, errdefs.ErrDataLoss)
	}
	return newCA(cert, key), nil
}

// Save writes the CA's certificate and private key, both PEM, to the file
// path (mode 0600) through a temporary file and a rename. The daemon keeps
// it in the sandbox's state directory, so that a restarted daemon can go on
// intercepting for a running sandbox; it must never be written into the box.
func (c *CA) Save(path string) error {
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	var b bytes.Buffer
	b.Write(c.certPEM)
	if err := pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	if err := atomicfile.WriteDurable(path, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("save CA: %w", err)
	}
	return nil
}

// CertPEM returns the CA certificate, PEM-encoded, without its key: what is
// installed into the sandbox's trust store.
func (c *CA) CertPEM() []byte {
	return bytes.Clone(c.certPEM)
}

// Leaf returns a certificate for host, a DNS name or an IP address, signed
// by the CA, for use as tls.Config.GetCertificate. Host names are matched
// without regard to ASCII case or a trailing dot. It returns an
// errdefs.ErrInvalidArgument error for a host that is neither, and an
// errdefs.ErrFailedPrecondition error once the CA has expired.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	name, ok := normalizeName(host)
	if !ok {
		return nil, fmt.Errorf("leaf certificate for %q: not a host name or IP address: %w", host, errdefs.ErrInvalidArgument)
	}
	if cert := c.cached(name); cert != nil {
		return cert, nil
	}
	cert, err := c.mint(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.leaves[name]; ok {
		le := e.Value.(*leafEntry)
		if c.fresh(le.cert) {
			// Another caller minted one meanwhile; keep handing out one.
			c.lru.MoveToFront(e)
			return le.cert, nil
		}
		le.cert = cert
		c.lru.MoveToFront(e)
		return cert, nil
	}
	c.leaves[name] = c.lru.PushFront(&leafEntry{host: name, cert: cert})
	if c.lru.Len() > leafCacheSize {
		oldest := c.lru.Back()
		c.lru.Remove(oldest)
		delete(c.leaves, oldest.Value.(*leafEntry).host)
	}
	return cert, nil
}

// cached returns the cached leaf for name when there is a fresh one.
func (c *CA) cached(name string) *tls.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.leaves[name]
	if !ok {
		return nil
	}
	le := e.Value.(*leafEntry)
	if !c.fresh(le.cert) {
		return nil
	}
	c.lru.MoveToFront(e)
	return le.cert
}

// fresh reports whether cert has more than leafRenew left to live.
func (c *CA) fresh(cert *tls.Certificate) bool {
	return c.now().Add(leafRenew).Before(cert.Leaf.NotAfter)
}

// mint creates a leaf certificate for the normalized name.
func (c *CA) mint(name string) (*tls.Certificate, error) {
	now := c.now()
	notAfter := now.Add(leafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	if !now.Before(notAfter) {
		return nil, fmt.Errorf("leaf certificate for %s: CA expired at %s: %w", name, c.cert.NotAfter.UTC().Format(time.RFC3339), errdefs.ErrFailedPrecondition)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// TLSConfig returns a server configuration that presents, for the server
// name (SNI) a client asks for, a leaf certificate from Leaf; it speaks
// HTTP/1.1 only and TLS 1.2 or later. A client that sends no server name
// fails the handshake; the proxy, which knows the address the client
// dialled, can call Leaf itself for those.
func (c *CA) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName == "" {
				return nil, fmt.Errorf("client sent no server name: %w", errdefs.ErrInvalidArgument)
			}
			return c.Leaf(hello.ServerName)
		},
	}
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certificate serial number: %w", err)
	}
	return serial, nil
}
