package peerid

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
)

// Files is a member's certificate and key and the CA that signs every
// member's, read from PEM files and re-read when they change: every TLS
// handshake reads the three files and, when their bytes differ from the
// ones loaded, parses them again. A rotation that leaves the files unusable
// for a moment (the certificate written before its key) keeps the last good
// set in use; [Files.Err] reports the failure until a good set loads.
//
// The configurations it returns are safe for concurrent use, as Files is.
type Files struct {
	certFile, keyFile, caFile string

	mu struct {
		sync.Mutex
		certPEM, keyPEM, caPEM []byte
		cur                    *loaded
		err                    error // the last reload's failure
	}
}

// loaded is one parsed set of files.
type loaded struct {
	cert   *tls.Certificate
	pool   *x509.CertPool
	server *tls.Config
}

// LoadFiles reads a certificate, its key and the CA certificate (PEM); an
// error names the file that is wrong.
func LoadFiles(certFile, keyFile, caFile string) (*Files, error) {
	f := &Files{certFile: certFile, keyFile: keyFile, caFile: caFile}
	if _, err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Err returns why the files last failed to load, or nil when the set in
// use is the one on disk.
func (f *Files) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mu.err
}

// current returns the set to use now, re-reading the files.
func (f *Files) current() *loaded {
	l, err := f.reload()
	if err != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.mu.cur // the last good set; LoadFiles made sure there is one
	}
	return l
}

func (f *Files) reload() (*loaded, error) {
	certPEM, err1 := os.ReadFile(f.certFile)
	keyPEM, err2 := os.ReadFile(f.keyFile)
	caPEM, err3 := os.ReadFile(f.caFile)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := errors.Join(err1, err2, err3); err != nil {
		f.mu.err = fmt.Errorf("peerid: read TLS files: %w", err)
		return nil, f.mu.err
	}
	if f.mu.cur != nil && bytes.Equal(certPEM, f.mu.certPEM) && bytes.Equal(keyPEM, f.mu.keyPEM) && bytes.Equal(caPEM, f.mu.caPEM) {
		return f.mu.cur, nil
	}
	l, err := f.parse(certPEM, keyPEM, caPEM)
	if err != nil {
		f.mu.err = err
		return nil, err
	}
	f.mu.certPEM, f.mu.keyPEM, f.mu.caPEM, f.mu.cur, f.mu.err = certPEM, keyPEM, caPEM, l, nil
	return l, nil
}

func (f *Files) parse(certPEM, keyPEM, caPEM []byte) (*loaded, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("peerid: certificate %s with key %s: %w", f.certFile, f.keyFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("peerid: CA file %s holds no PEM certificate", f.caFile)
	}
	return &loaded{cert: &cert, pool: pool, server: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		// One port serves API clients, which need no certificate, and
		// members, whose certificate the member endpoints require.
		ClientAuth: tls.VerifyClientCertIfGiven,
	}}, nil
}

// ServerConfig returns the configuration to serve with (tls.NewListener):
// each handshake gets the current certificate and CA, and a client
// certificate, when one is given, must be signed by the CA.
func (f *Files) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return f.current().server, nil
		},
		// Unused while GetConfigForClient answers; tls.NewListener's
		// contract asks for a certificate source.
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return f.current().cert, nil
		},
	}
}

// ClientConfig returns the configuration to dial members with: it presents
// the current certificate and verifies the server's against the current
// CA and the dialed host name. TLS resumption (a ClientSessionCache) lets a
// reconnection skip the full handshake.
func (f *Files) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return f.current().cert, nil
		},
		// The standard verification would pin the CA read at start;
		// VerifyConnection does the same checks against the current one.
		InsecureSkipVerify: true,
		VerifyConnection:   f.verifyServer,
		ClientSessionCache: tls.NewLRUClientSessionCache(0),
	}
}

// verifyServer checks the server's chain against the current CA and its
// name against the host dialed, as crypto/tls does by default.
func (f *Files) verifyServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("peerid: the server sent no certificate")
	}
	opts := x509.VerifyOptions{
		Roots:         f.current().pool,
		DNSName:       cs.ServerName,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, c := range cs.PeerCertificates[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
		return fmt.Errorf("peerid: server certificate: %w", err)
	}
	return nil
}
