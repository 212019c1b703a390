package daemon

import (
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
)

// E2B configures E2B's API ([e2b]).
type E2B struct {
	// Domain serves E2B's domain mode: create reports it as each
	// sandbox's domain, and the API listener routes requests for
	// "{port}-{id}.{domain}" to the box's agent (port 49983) or to that
	// port in the box. It may carry a ":port" when the listener is not on
	// 443 ("sandbox.example.com:8443"). A wildcard DNS record for
	// *.{domain} must reach the daemon, and the SDK needs HTTPS
	// (tls_cert_file, or a TLS proxy in front). Empty: off.
	Domain string `toml:"domain"`
}

func (e E2B) validate() error {
	if e.Domain == "" {
		return nil
	}
	bad := fmt.Errorf("e2b.domain %q must be a DNS name with an optional :port, such as \"sandbox.example.com\" or \"sandbox.example.com:8443\" (no scheme or path): %w",
		e.Domain, errdefs.ErrInvalidArgument)
	host := e.Domain
	if h, p, err := net.SplitHostPort(e.Domain); err == nil {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return bad
		}
		host = h
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return bad
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return bad
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return bad
			}
		}
	}
	return nil
}

// validateTLS checks tls_cert_file and tls_key_file: both or neither, and
// only with listen.
func (c Config) validateTLS() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return bad("tls_key_file is required when tls_cert_file (%q) is set: name the certificate's private key (PEM)", c.TLSCertFile)
	case c.TLSKeyFile != "" && c.TLSCertFile == "":
		return bad("tls_cert_file is required when tls_key_file (%q) is set: name the certificate chain (PEM)", c.TLSKeyFile)
	case c.TLSCertFile != "" && c.Listen == "":
		return bad("listen is required when tls_cert_file is set: TLS is served on the TCP listener")
	}
	return nil
}

// certReloader serves a certificate and key from files, read again when
// either file changes (a renewed certificate is served from the next
// handshake without restarting the daemon).
type certReloader struct {
	certFile, keyFile string

	mu   sync.Mutex
	cert *tls.Certificate
	// mtimes are the files' modification times when cert was read.
	mtimes [2]time.Time
}

// loadCert reads certFile and keyFile once, so that a bad pair stops the
// daemon at start, and returns a reloader.
func loadCert(certFile, keyFile string) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.get(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *certReloader) get() (*tls.Certificate, error) {
	var mt [2]time.Time
	for i, p := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(p)
		if err != nil {
			if r.cert != nil {
				return r.cert, nil // being replaced: keep the one in use
			}
			return nil, fmt.Errorf("tls: %w", err)
		}
		mt[i] = st.ModTime()
	}
	if r.cert != nil && mt == r.mtimes {
		return r.cert, nil
	}
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		if r.cert != nil {
			return r.cert, nil // half-written: keep the one in use
		}
		return nil, fmt.Errorf("tls_cert_file %s and tls_key_file %s: %w: %w", r.certFile, r.keyFile, err, errdefs.ErrInvalidArgument)
	}
	r.cert, r.mtimes = &c, mt
	return r.cert, nil
}

// config is the TLS configuration of the API listener.
func (r *certReloader) config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.get()
		},
	}
}
