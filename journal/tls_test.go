package journal_test

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/internal/peerid"
	"github.com/metatree/metatree/internal/peerid/peeridtest"
	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// newMTLSCluster starts a cluster whose nodes serve and dial with mutual
// TLS, each with a certificate from ca naming its id (issuer, when set,
// gives a node its certificate from another CA instead), as
// startHTTPCluster starts one.
func newMTLSCluster(tb testing.TB, voters int, ca *peeridtest.CA, issuer func(id uint64) *peeridtest.CA) (*journaltest.Cluster, *syncFSs) {
	root := tb.TempDir()
	files := map[uint64]*peerid.Files{}
	for id := uint64(1); id <= uint64(voters); id++ {
		from := ca
		if issuer != nil && issuer(id) != nil {
			from = issuer(id)
		}
		p := from.WriteMember(filepath.Join(root, fmt.Sprint(id)), "member", id)
		f, err := peerid.LoadFiles(p.Cert, p.Key, p.CA)
		require.NoError(tb, err)
		files[id] = f
	}
	return startHTTPCluster(tb, journaltest.Options{Voters: voters,
		TLS: func(id uint64) (server, client *tls.Config) {
			return files[id].ServerConfig(), files[id].ClientConfig()
		},
	}, nil)
}

// TestMTLSClusterReplicates: three voters over mutual TLS elect a leader
// and replicate writes proposed on a follower.
func TestMTLSClusterReplicates(t *testing.T) {
	c, _ := newMTLSCluster(t, 3, peeridtest.NewCA(t, "ca"), nil)
	leader := waitLeader(t.Context(), t, c)
	follower := leader%3 + 1
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		_, _, err := c.Node(follower).Journal().Propose(ctx, fmt.Appendf(nil, "w%d", i))
		require.NoError(t, err)
	}
	for _, n := range c.Nodes() {
		require.NoError(t, n.Journal().ReadBarrier(ctx))
		require.EqualValues(t, 20, n.StateMachine().(*countSM).n.Load(), "node %d applied every write", n.ID)
		require.Zero(t, n.Journal().RefusedPeers(), "node %d refused no peer", n.ID)
	}
}

// TestMTLSJoinWithAnotherCAIsRefused: a node whose certificate another CA
// signed cannot join: the helper's TLS handshake refuses it.
func TestMTLSJoinWithAnotherCAIsRefused(t *testing.T) {
	ca, other := peeridtest.NewCA(t, "ca"), peeridtest.NewCA(t, "other")
	c, _ := newMTLSCluster(t, 1, ca, nil)
	waitLeader(t.Context(), t, c)

	// It trusts the cluster's CA, so only the helper can refuse it. A Go
	// client offers only a certificate from a CA the server names, so it
	// arrives without one: refused by the identity check, and counted.
	stranger := other.KeyPair(2)
	join := func(cfg *tls.Config) error {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := journal.Open(ctx, journal.Config{ID: 2, Dir: t.TempDir(), Addr: "127.0.0.1:1", Join: c.Node(1).Addr,
			StateMachine: &countSM{}, TLS: cfg})
		return err
	}
	err := join(&tls.Config{Certificates: []tls.Certificate{stranger}, RootCAs: ca.Pool()})
	require.ErrorIs(t, err, journal.ErrPeerIdentity)
	require.EqualValues(t, 1, c.Node(1).Journal().RefusedPeers())
	// Forced onto the connection, the certificate fails the handshake.
	err = join(&tls.Config{RootCAs: ca.Pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &stranger, nil }})
	require.ErrorIs(t, err, journal.ErrUnreachable)
	require.ErrorContains(t, err, "certificate")
	require.Len(t, c.Node(1).Journal().Status().Members, 1, "the stranger was not admitted")
}

// TestMTLSPeerSpeaksOnlyForItself: member 2's certificate, valid and from
// the cluster's CA, cannot carry requests that speak for member 3; every
// such request is refused 403 and counted, and a request without a client
// certificate is refused on the member endpoints.
func TestMTLSPeerSpeaksOnlyForItself(t *testing.T) {
	ca := peeridtest.NewCA(t, "ca")
	c, _ := newMTLSCluster(t, 1, ca, nil)
	waitLeader(t.Context(), t, c)
	j := c.Node(1).Journal()
	cluster := j.Status().ClusterID
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{Certificates: certs, RootCAs: ca.Pool()}}}
	}
	as2 := client(ca.KeyPair(2))
	post := func(cli *http.Client, path string, from uint64, body string) (int, string) {
		req, err := http.NewRequest("POST", "https://"+c.Node(1).Addr+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("X-Metatree-Cluster", cluster)
		req.Header.Set("X-Metatree-From", fmt.Sprint(from))
		req.Header.Set("X-Metatree-To", "1")
		resp, err := cli.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	heartbeat := func(from uint64) string {
		m := &raftpb.Message{Type: raftpb.MsgHeartbeat.Enum(), From: new(from), To: new(uint64(1)), Term: new(uint64(1))}
		b, err := proto.Marshal(m)
		require.NoError(t, err)
		frame := binary.BigEndian.AppendUint32(nil, uint32(len(b)+1))
		return string(append(append(frame, byte(len(b))), b...))
	}
	cases := []struct {
		name   string
		cli    *http.Client
		path   string
		from   uint64
		body   string
		status int
	}{
		{"raft stream as member 3", as2, "/raft/stream", 3, heartbeat(3), http.StatusForbidden},
		{"forward as member 3", as2, "/raft/propose", 3, strings.Repeat("x", 20), http.StatusForbidden},
		{"snapshot as member 3", as2, "/raft/snapshot", 3, "", http.StatusForbidden},
		{"join as member 3", as2, "/raft/join", 3, `{"id":3,"addr":"127.0.0.1:1","role":"observer"}`, http.StatusForbidden},
		{"forward without a client certificate", client(), "/raft/propose", 2, strings.Repeat("x", 20), http.StatusForbidden},
		{"join without a client certificate", client(), "/raft/join", 2, `{"id":2,"addr":"127.0.0.1:1","role":"observer"}`, http.StatusForbidden},
		{"certificate naming no member", client(ca.KeyPair(0)), "/raft/propose", 2, strings.Repeat("x", 20), http.StatusForbidden},
		// Speaking for itself passes the identity check, and the request
		// is then judged on its content (here: too short a proposal).
		{"forward as itself", as2, "/raft/propose", 2, "short", http.StatusBadRequest},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := j.RefusedPeers()
			status, body := post(tc.cli, tc.path, tc.from, tc.body)
			require.Equal(t, tc.status, status, "body %s", body)
			if tc.status == http.StatusForbidden {
				require.Contains(t, body, "peer_identity")
				require.Equal(t, before+1, j.RefusedPeers(), "refusal %d counted", i)
			} else {
				require.Equal(t, before, j.RefusedPeers())
			}
		})
	}
	require.Len(t, j.Status().Members, 1, "nobody was admitted")
}
