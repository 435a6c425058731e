package secure

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/metatree/metatree/internal/peerid"
)

// LoadTLS loads the files the TLS flags name: nil when none is set, an
// error when only some are.
func LoadTLS(cert, key, ca string) (*peerid.Files, error) {
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	if cert == "" || key == "" || ca == "" {
		return nil, errors.New("-tls-cert, -tls-key and -tls-ca go together")
	}
	return peerid.LoadFiles(cert, key, ca)
}

// Listen wraps ln so that it speaks only TLS with files' current
// certificate (ln itself when files is nil). A plain HTTP request on it
// fails its handshake and is answered 400 by net/http, never served.
func Listen(ln net.Listener, files *peerid.Files) net.Listener {
	if files == nil {
		return ln
	}
	return tls.NewListener(ln, files.ServerConfig())
}

// ClientTLS is the client side of mutual TLS with files (nil without).
func ClientTLS(files *peerid.Files) *tls.Config {
	if files == nil {
		return nil
	}
	return files.ClientConfig()
}

// MemberClient returns the client a binary sends its own member traffic
// with (demo fragments to workers): over TLS with its certificate when
// files is set, an http:// URL upgraded to https://, and the cluster's
// token on every request when token is set; from dial's source address
// when dial is set (SourceDialer).
func MemberClient(files *peerid.Files, token string, timeout time.Duration, dial DialFunc) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = ClientTLS(files)
	if dial != nil {
		tr.DialContext = dial
	}
	return &http.Client{Timeout: timeout, Transport: memberTransport{next: tr, https: files != nil, token: token}}
}

// memberTransport stamps member requests with the scheme and token.
type memberTransport struct {
	next  http.RoundTripper
	https bool
	token string
}

func (m memberTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !m.https && m.token == "" {
		return m.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	if m.https && req.URL.Scheme == "http" {
		req.URL.Scheme = "https"
	}
	if m.token != "" {
		req.Header.Set(TokenHeader, m.token)
	}
	return m.next.RoundTrip(req)
}

// TokenHeader carries the cluster's token on member requests, as on the
// library's own (heartbeat.TokenHeader).
const TokenHeader = "X-Metatree-Token"
