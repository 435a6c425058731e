package frontend

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fe "github.com/metatree/metatree/examples/frontend"

	"github.com/metatree/metatree/examples/internal/worker"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/internal/peerid/peeridtest"
	"github.com/metatree/metatree/journal"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// waitFor polls cond (the parts run on their own goroutines and over real
// connections) until it holds, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", within, what)
		case <-tick.C:
		}
	}
}

// TestMTLSCluster runs three frontends and a worker over mutual TLS, each
// with a certificate from an in-test CA naming its id: they elect,
// replicate, a late joiner restores from an image, the leader heartbeats
// the worker; a forged heartbeat, a member of another CA and plain HTTP are
// refused; a rotated certificate is served without a restart.
func TestMTLSCluster(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	root := t.TempDir()
	var fronts []*Frontend
	t.Cleanup(func() {
		for _, f := range fronts {
			require.NoError(t, f.Close())
		}
	})
	start := func(id uint64, issuer *peeridtest.CA, mod func(*Config)) (*Frontend, error) {
		p := issuer.WriteMember(filepath.Join(root, "certs", fmt.Sprint(id)), "member", id)
		cfg := Config{Config: fe.Config{ID: id, Dir: filepath.Join(root, fmt.Sprint(id)), Addr: freeAddr(t), Token: "join-secret",
			TLSCert: p.Cert, TLSKey: p.Key, TLSCA: p.CA,
			HeartbeatInterval: 100 * time.Millisecond, StaleAfter: 5 * time.Second,
			CheckpointEntries: 1_000_000, CheckpointInterval: time.Hour, CompactMargin: 10}}
		mod(&cfg)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		f, err := Start(ctx, cfg)
		if err == nil {
			fronts = append(fronts, f)
		}
		return f, err
	}
	fe1, err := start(1, ca, func(c *Config) { c.Bootstrap = true })
	require.NoError(t, err)
	fe2, err := start(2, ca, func(c *Config) { c.Join = fe1.Addr() })
	require.NoError(t, err)
	waitFor(t, 20*time.Second, "a leader both follow", func() bool {
		a, b := fe1.Journal().Status(), fe2.Journal().Status()
		return a.Leader != 0 && a.Leader == b.Leader
	})

	// Clients of /v1/ need no certificate, only the CA to trust.
	api := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer api.CloseIdleConnections()
	put := func(f *Frontend, path string) {
		req, err := http.NewRequest("PUT", "https://"+f.Addr()+"/v1/catalog"+path, strings.NewReader(`{"kind":"table"}`))
		require.NoError(t, err)
		resp, err := api.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "PUT %s", path)
	}
	// Two checkpoints: the second compacts the log up to the first.
	for round := range 2 {
		for i := range 30 {
			put(fe2, fmt.Sprintf("/t%d", round*30+i)) // through whichever leads: fe2 forwards when it follows
		}
		for _, f := range fronts {
			_, err := f.Checkpointer().Checkpoint(t.Context())
			require.NoError(t, err)
		}
	}
	applied := fe2.Journal().Status().Applied

	// The third frontend joins after the log was compacted: it restores
	// from an image fetched over mutual TLS.
	fe3, err := start(3, ca, func(c *Config) { c.Join = fe2.Addr() })
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the late joiner caught up", func() bool { return fe3.Journal().Status().Applied >= applied })
	require.NotZero(t, fe3.Journal().Status().Image, "the late joiner restored from an image")
	_, ok := fe3.Tree().Get("/t59")
	require.True(t, ok, "the late joiner holds the replicated catalog")

	// A worker over mutual TLS: the leader's heartbeats reach it.
	wp := ca.WriteMember(filepath.Join(root, "certs", "101"), "member", 101)
	w, err := worker.Start(worker.Config{ID: 101, Addr: freeAddr(t), TLSCert: wp.Cert, TLSKey: wp.Key, TLSCA: wp.CA})
	require.NoError(t, err)
	t.Cleanup(func() { w.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, fe1.Members().Add(ctx, heartbeat.Member{ID: 101, Addr: w.Addr(), Kind: epoch.KindWorker}))
	waitFor(t, 20*time.Second, "the worker alive with its epoch", func() bool {
		m, ok := fe3.Members().Member(101)
		return ok && m.Status == heartbeat.StatusAlive && m.PublishedEpoch() == w.Epoch()
	})
	for _, f := range fronts {
		require.Zero(t, f.Journal().RefusedPeers(), "frontend %d refused no peer", f.cfg.ID)
	}

	// Member 2's certificate cannot heartbeat the worker as member 3.
	as2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{ca.KeyPair(2)}}}}
	defer as2.CloseIdleConnections()
	forged, err := json.Marshal(responder.Request{Leader: 3, Term: 1 << 40, Member: 101, Version: 1 << 40})
	require.NoError(t, err)
	resp, err := as2.Post("https://"+w.Addr()+responder.Path, "application/json", bytes.NewReader(forged))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)

	// Plain HTTP on a TLS port is not served.
	plain := &http.Client{Transport: &http.Transport{}}
	defer plain.CloseIdleConnections()
	if resp, err := plain.Get("http://" + fe1.Addr() + "/v1/status"); err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "net/http answers a plain request to a TLS port 400")
	}

	// A member whose certificate another CA signed cannot join.
	_, err = start(4, peeridtest.NewCA(t, "other"), func(c *Config) { c.Join = fe1.Addr(); c.Role = journal.Observer })
	require.Error(t, err)
	require.Len(t, fe1.Journal().Status().Members, 3, "the stranger was not admitted")

	// Rotation: new files for frontend 1 are served on the next handshake,
	// and the cluster goes on.
	serial := func() string {
		conn, err := tls.Dial("tcp", fe1.Addr(), &tls.Config{RootCAs: ca.Pool()})
		require.NoError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	ca.WriteMember(filepath.Join(root, "certs", "1"), "member", 1)
	require.NotEqual(t, before, serial(), "the rotated certificate is served without a restart")
	put(fe1, "/after-rotation")
	waitFor(t, 10*time.Second, "the write after the rotation on every frontend", func() bool {
		for _, f := range fronts {
			if _, ok := f.Tree().Get("/after-rotation"); !ok {
				return false
			}
		}
		return true
	})
}
