package frontend

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t testing.TB) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startOne starts a single-member cluster; Start returns once it leads
// (registering itself is a write).
func startOne(t testing.TB, mod func(*Config)) *Frontend {
	t.Helper()
	cfg := Config{ID: 1, Dir: filepath.Join(t.TempDir(), "1"), Addr: freeAddr(t), Bootstrap: true, Token: "secret",
		HeartbeatInterval: time.Hour, CheckpointEntries: 1 << 40, CheckpointInterval: time.Hour}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	f, err := Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	return f
}

// TestStartRefusesWithoutCredentialsUnlessInsecure: neither a token nor
// TLS files is ErrNoCredentials, before the data dir is created; Insecure
// lets the frontend start.
func TestStartRefusesWithoutCredentialsUnlessInsecure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fe")
	_, err := Start(t.Context(), Config{ID: 1, Dir: dir, Addr: freeAddr(t), Bootstrap: true})
	require.ErrorIs(t, err, ErrNoCredentials)
	require.ErrorContains(t, err, "Token or TLSCert/TLSKey/TLSCA")
	_, statErr := os.Stat(dir)
	require.ErrorIs(t, statErr, fs.ErrNotExist, "the refused frontend created its data dir")

	f := startOne(t, func(c *Config) { c.Token, c.Insecure = "", true })
	require.NoError(t, f.Ready())
}

// TestStartNamesTheInvalidField: a config Start cannot run is
// ErrInvalidConfig naming what is wrong, never a panic.
func TestStartNamesTheInvalidField(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		msg  string
	}{
		{"no id", Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Insecure: true}, "ID (non-zero), Dir and Addr"},
		{"no dir", Config{ID: 1, Addr: "127.0.0.1:0", Insecure: true}, "ID (non-zero), Dir and Addr"},
		{"negative timeout", Config{ID: 1, Dir: t.TempDir(), Addr: "127.0.0.1:0", Insecure: true, RequestTimeout: -time.Second}, "request timeout -1s"},
		{"role", Config{ID: 1, Dir: t.TempDir(), Addr: "127.0.0.1:0", Insecure: true, Role: journal.Role(9)}, "role"},
		{"half the TLS files", Config{ID: 1, Dir: t.TempDir(), Addr: "127.0.0.1:0", TLSCert: "c.pem"}, "go together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(t.Context(), tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

// TestWriteReturnsTheResultWithOneError: a write returns the applied
// result and nil; a batch that applies as a no-op returns its result and
// an error wrapping the catalog's reason; a write under the cluster's
// records is refused before it is proposed.
func TestWriteReturnsTheResultWithOneError(t *testing.T) {
	f := startOne(t, nil)
	ctx := t.Context()
	create := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/db", Kind: "database",
		Set: map[string]catalog.Value{"owner": catalog.String("ann")}}}}
	res, err := f.Write(ctx, create)
	require.NoError(t, err)
	require.NotZero(t, res.Index)
	n, ok := f.Tree().Get("/db")
	require.True(t, ok, "the write is applied on this frontend when Write returns")
	require.Equal(t, res.Index, n.Modified)

	again, err := f.Write(ctx, create)
	require.ErrorIs(t, err, catalog.ErrExists)
	require.NotNil(t, again, "a no-op batch still has its result")
	require.Greater(t, again.Index, res.Index)

	_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpUpdate, Path: "/db",
		Set: map[string]catalog.Value{"owner": catalog.String("bob")}, Cond: catalog.Cond{Modified: res.Index + 100}}}})
	require.ErrorIs(t, err, catalog.ErrConflict)

	before := f.Journal().Status().Applied
	for _, op := range []catalog.Op{
		{Type: catalog.OpDelete, Path: heartbeat.ClusterPath, Recursive: true},
		{Type: catalog.OpCreate, Path: heartbeat.MembersPath + "/99", Kind: "member"},
		{Type: catalog.OpMove, Path: "/db", To: heartbeat.ClusterPath + "/db"},
	} {
		_, err = f.Write(ctx, catalog.Batch{Ops: []catalog.Op{op}})
		require.ErrorIs(t, err, ErrReserved, "%+v", op)
	}
	require.Equal(t, before, f.Journal().Status().Applied, "a refused write is never proposed")
	_, ok = f.Members().Member(1)
	require.True(t, ok, "the frontend's own record is intact")
}

// TestPortServesMemberEndpointsAndTheHostHandler: the member endpoints
// and Config.Handler share the port, the handler sees every other path,
// and Middleware wraps both.
func TestPortServesMemberEndpointsAndTheHostHandler(t *testing.T) {
	var mu sync.Mutex
	var wrapped []string
	f := startOne(t, func(c *Config) {
		c.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host ", r.URL.Path) })
		c.Middleware = func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				wrapped = append(wrapped, r.URL.Path)
				mu.Unlock()
				h.ServeHTTP(w, r)
			})
		}
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + f.Addr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/v1/anything")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "host /v1/anything", body)
	code, body = get(image.PathPrefix + "latest")
	require.NotEqual(t, "host "+image.PathPrefix+"latest", body, "images are the frontend's")
	require.Equal(t, http.StatusForbidden, code, "an image download without the token is refused")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"/v1/anything", image.PathPrefix + "latest"}, wrapped)
}

// A frontend whose catalog reads the newest batch format advertises the
// journal's newest format version (the versions above the batch formats
// add only journal entries, such as the consistency checks'), and one
// whose catalog reads older batches advertises what the catalog reads.
func TestMaxVersionFollowsTheCatalogAndAdmitsJournalOnlyVersions(t *testing.T) {
	require.Equal(t, uint32(journal.NewestVersion), maxVersion(catalog.NewestBatchVersion))
	require.GreaterOrEqual(t, maxVersion(catalog.NewestBatchVersion), uint32(3), "the consistency checks need version 3")
	require.Equal(t, uint32(3), maxVersion(catalog.BatchV2), "a catalog of batch format 2 reads the consistency checks' entries")
	require.Equal(t, uint32(catalog.BatchV1), maxVersion(catalog.BatchV1))
	for v := uint32(journal.OldestVersion); v <= journal.NewestVersion; v++ {
		require.LessOrEqual(t, BatchVersion(v), catalog.NewestBatchVersion)
		require.GreaterOrEqual(t, maxVersion(BatchVersion(v)), v, "a catalog that reads the batches of cluster version %d reads that version", v)
	}
	require.Equal(t, catalog.BatchV2, BatchVersion(3), "version 3 adds no batch format")
	require.Equal(t, catalog.BatchV3, BatchVersion(4), "version 4 carries owned nodes")
	require.Equal(t, catalog.BatchV3, BatchVersion(5), "version 5 adds no batch format (the digest format 2 of the checks)")
	require.Equal(t, catalog.BatchV4, BatchVersion(6), "version 6 carries the quota's exemption of the cluster's records")
	require.Equal(t, uint32(5), maxVersion(catalog.BatchV3), "a catalog of batch format 3 reads up to the digest format 2 of the checks")
}

// TestRestartWithoutQuorumFindsItsRecord: a frontend restarting while
// the cluster has no quorum (one of two voters) starts from its data dir:
// it replays its committed entries, finds its own member record and needs
// no write to register, and serves local reads of what it had applied.
func TestRestartWithoutQuorumFindsItsRecord(t *testing.T) {
	root := t.TempDir()
	addr1, addr2 := freeAddr(t), freeAddr(t)
	cfg := func(id uint64, addr string) Config {
		return Config{ID: id, Dir: filepath.Join(root, fmt.Sprint(id)), Addr: addr, Token: "secret",
			HeartbeatInterval: time.Hour, CheckpointEntries: 1 << 40, CheckpointInterval: time.Hour}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c1 := cfg(1, addr1)
	c1.Bootstrap = true
	f1, err := Start(ctx, c1)
	require.NoError(t, err)
	c2 := cfg(2, addr2)
	c2.Join = addr1
	f2, err := Start(ctx, c2)
	require.NoError(t, err)
	res, err := f2.Write(ctx, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/kept", Kind: "table"}}})
	require.NoError(t, err)
	require.NoError(t, f2.Close())
	require.NoError(t, f1.Close())

	// Frontend 2 alone: no leader can be elected. Start must not wait for
	// one (registering anew would be a write); 10 s is far more than a
	// local replay takes, and a third of the 30 s a write would wait.
	startCtx, cancelStart := context.WithTimeout(ctx, 10*time.Second)
	defer cancelStart()
	again, err := Start(startCtx, cfg(2, addr2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, again.Close()) })
	require.GreaterOrEqual(t, again.Journal().Status().Applied, res.Index)
	_, ok := again.Tree().Get("/kept")
	require.True(t, ok, "the restarted frontend holds what it had applied")
	m, ok := again.Members().Member(2)
	require.True(t, ok)
	require.Equal(t, addr2, m.Addr)
	require.ErrorIs(t, again.Ready(), ErrNotReady, "without a leader it takes no traffic")
}

// TestMembersChangeThroughTheFrontend: AddMember refuses a member it
// cannot heartbeat, naming what is wrong; a worker added is recorded and
// removed; removing an unknown member is heartbeat.ErrNotFound.
func TestMembersChangeThroughTheFrontend(t *testing.T) {
	f := startOne(t, nil)
	ctx := t.Context()
	for _, tc := range []struct {
		m   heartbeat.Member
		msg string
	}{
		{heartbeat.Member{Addr: "127.0.0.1:1", Kind: epoch.KindWorker}, "non-zero id"},
		{heartbeat.Member{ID: 101, Addr: "nowhere", Kind: epoch.KindWorker}, `addr "nowhere"`},
		{heartbeat.Member{ID: 5, Addr: "127.0.0.1:1", Kind: epoch.KindFrontend, Role: "leader"}, `role "leader"`},
	} {
		err := f.AddMember(ctx, tc.m)
		require.ErrorIs(t, err, heartbeat.ErrInvalid, "%+v", tc.m)
		require.ErrorContains(t, err, tc.msg)
	}
	require.Len(t, f.Journal().Status().Members, 1, "a refused frontend never reaches raft")

	require.NoError(t, f.AddMember(ctx, heartbeat.Member{ID: 101, Addr: "127.0.0.1:1", Kind: epoch.KindWorker}))
	// The tree has applied the record when AddMember returns; heartbeat's
	// own view follows it on its watcher.
	n, ok := f.Tree().Get(heartbeat.MemberPath(101))
	require.True(t, ok, "the record is applied when AddMember returns")
	require.Equal(t, heartbeat.MemberKind, n.Kind)
	require.NoError(t, f.RemoveMember(ctx, 101, false))
	_, ok = f.Tree().Get(heartbeat.MemberPath(101))
	require.False(t, ok, "the record is gone when RemoveMember returns")
	require.ErrorIs(t, f.RemoveMember(ctx, 101, false), heartbeat.ErrNotFound)
}
