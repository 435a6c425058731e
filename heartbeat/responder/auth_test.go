package responder

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/internal/peerid/peeridtest"
)

// TestResponderRequiresCredential: a heartbeat without the credential the
// responder requires (the token, or a certificate naming its leader) is
// refused 403 and changes nothing: no term, no frontend list, no event.
// The same heartbeat with the credential is honoured.
func TestResponderRequiresCredential(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	cert := func(id uint64) *tls.ConnectionState {
		kp := ca.KeyPair(id)
		return &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{kp.Leaf}}, PeerCertificates: []*x509.Certificate{kp.Leaf}}
	}
	e1 := epoch.New()
	forged := Request{Cluster: "c1", Leader: 3, Term: 1 << 40, Member: 9, Version: 1 << 40,
		Frontends: []FrontendEpoch{{ID: 3, Gen: 99, Epoch: e1, Dead: true}}}
	cases := []struct {
		name   string
		cfg    func(*Config)
		token  string
		tls    *tls.ConnectionState
		status int
	}{
		{"no token", func(c *Config) { c.Token = "secret" }, "", nil, http.StatusForbidden},
		{"wrong token", func(c *Config) { c.Token = "secret" }, "secreT", nil, http.StatusForbidden},
		{"token", func(c *Config) { c.Token = "secret" }, "secret", nil, http.StatusOK},
		{"no certificate", func(c *Config) { c.PeerCerts = true }, "", nil, http.StatusForbidden},
		{"another member's certificate", func(c *Config) { c.PeerCerts = true }, "", cert(2), http.StatusForbidden},
		{"certificate naming no member", func(c *Config) { c.PeerCerts = true }, "", cert(0), http.StatusForbidden},
		{"the leader's certificate", func(c *Config) { c.PeerCerts = true }, "", cert(3), http.StatusOK},
		{"certificate and token, token wrong", func(c *Config) { c.PeerCerts, c.Token = true, "secret" }, "x", cert(3), http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var events []epoch.Event
			cfg := Config{ID: 9, Epoch: epoch.New(), Cluster: "c1", Clock: &manualClock{now: time.Unix(1000, 0)},
				OnEvent: func(e epoch.Event) { events = append(events, e) }}
			tc.cfg(&cfg)
			r, err := New(cfg)
			require.NoError(t, err)
			body, err := json.Marshal(forged)
			require.NoError(t, err)
			req := httptest.NewRequest(http.MethodPost, Path, bytes.NewReader(body))
			if tc.token != "" {
				req.Header.Set(TokenHeader, tc.token)
			}
			req.TLS = tc.tls
			w := httptest.NewRecorder()
			r.ServeHTTP(w, req)
			require.Equal(t, tc.status, w.Code, "body %s", w.Body.String())
			if tc.status == http.StatusForbidden {
				require.EqualValues(t, 1, r.refused.Load())
				require.Zero(t, r.Term(), "a refused heartbeat raises no term")
				require.Empty(t, r.Frontends(), "a refused heartbeat lists no frontend")
				require.Empty(t, events, "a refused heartbeat cancels nothing")
				require.True(t, r.Stale(), "a refused heartbeat is no heartbeat")
				return
			}
			require.Zero(t, r.refused.Load())
			require.Equal(t, forged.Term, r.Term())
			require.Len(t, events, 1)
			require.Equal(t, epoch.Dead, events[0].Type)
		})
	}
}
