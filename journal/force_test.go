package journal_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/internal/raftstore"
	"github.com/metatree/metatree/journal/journaltest"
)

// survivor is the data dir of voter 1 of a 3-voter cluster that applied
// writes w0…w<n-1> and then lost every node; voters 2 and 3 never return.
type survivor struct {
	fs        *vfs.MemFS
	dir, addr string
	writes    int
}

func newSurvivor(t *testing.T, n int) survivor {
	s := survivor{fs: vfs.NewCrashableMem(), writes: n}
	c := journaltest.NewCluster(t, journaltest.Options{Voters: 3, Configure: func(cfg *journal.Config) {
		if cfg.ID == 1 {
			cfg.FS, s.dir, s.addr = s.fs, cfg.Dir, cfg.Addr
		}
	}})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	lead, err := c.WaitLeader(ctx)
	require.NoError(t, err)
	var last uint64
	for i := range n {
		last, _, err = c.Node(lead).Journal().Propose(ctx, fmt.Appendf(nil, "w%d", i))
		require.NoError(t, err)
	}
	require.NoError(t, c.Node(1).Journal().WaitApplied(ctx, last))
	c.Close()
	return s
}

func (s survivor) config(fs vfs.FS, force bool) journal.Config {
	return journal.Config{
		ID: 1, Dir: s.dir, Addr: s.addr, FS: fs, ForceNewCluster: force,
		Transport:    journaltest.NewNetwork(1).Transport(s.addr),
		StateMachine: &journaltest.Recorder{},
		TickInterval: time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
	}
}

// openLeader opens the survivor and waits until it leads.
func openLeader(ctx context.Context, t *testing.T, cfg journal.Config) *journal.Journal {
	t.Helper()
	j, err := journal.Open(ctx, cfg)
	require.NoError(t, err)
	for {
		ch := j.Leadership()
		if j.Status().IsLeader() {
			return j
		}
		select {
		case <-ch:
		case <-ctx.Done():
			j.Close()
			t.Fatalf("node 1 did not lead: %v", j.Status())
		}
	}
}

// requireAllWrites checks that every write the cluster applied is in the
// survivor's replay, once each.
func requireAllWrites(t *testing.T, cfg journal.Config, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, a := range cfg.StateMachine.(*journaltest.Recorder).Applied() {
		seen[string(a.Data)]++
	}
	for i := range n {
		require.Equal(t, 1, seen[fmt.Sprintf("w%d", i)], "write w%d", i)
	}
}

// TestForceNewCluster: the survivor of a permanent quorum loss, restarted
// with ForceNewCluster, keeps every write, removes the lost voters through
// the log, leads alone and accepts writes; a restart without the flag is
// an ordinary one; forcing again changes nothing.
func TestForceNewCluster(t *testing.T) {
	s := newSurvivor(t, 20)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	// Without the flag the survivor cannot lead: two of three voters are gone.
	cfg := s.config(s.fs, false)
	j, err := journal.Open(ctx, cfg)
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = j.Propose(pctx, []byte("lost"))
	pcancel()
	require.Error(t, err, "no quorum without the flag")
	require.NoError(t, j.Close())

	cfg = s.config(s.fs, true)
	j = openLeader(ctx, t, cfg)
	requireAllWrites(t, cfg, s.writes)
	st := j.Status()
	require.Equal(t, []journal.Member{{ID: 1, Addr: s.addr, Role: journal.Follower, MaxVersion: journal.NewestVersion}}, st.Members)
	_, _, err = j.Propose(ctx, []byte("after"))
	require.NoError(t, err)
	require.ErrorIs(t, j.AddMember(ctx, 2, "node2", journal.Follower), journal.ErrUnknownMember, "a lost voter's id stays removed")
	require.NoError(t, j.Close())

	for _, force := range []bool{false, true} {
		cfg := s.config(s.fs, force)
		j := openLeader(ctx, t, cfg)
		requireAllWrites(t, cfg, s.writes)
		require.Len(t, j.Status().Members, 1, "force=%v", force)
		_, _, err := j.Propose(ctx, fmt.Appendf(nil, "again-%v", force))
		require.NoError(t, err)
		require.NoError(t, j.Close())
	}
}

// TestForceNewClusterCrashSafe cuts the power before every step of a
// forced recovery (Open with the flag, the election, a first write): the
// dir is the old one or the new one, and forcing it again (what an
// operator does after a crash) leads with every write; a restart without
// the flag after that is ordinary.
func TestForceNewClusterCrashSafe(t *testing.T) {
	s := newSurvivor(t, 10)
	recoverOnce := func(fs vfs.FS) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		j := openLeader(ctx, t, s.config(fs, true))
		_, _, err := j.Propose(ctx, []byte("first"))
		require.NoError(t, err)
		require.NoError(t, j.Close())
	}
	probe := journaltest.WrapCrashFS(s.fs.CrashClone(vfs.CrashCloneCfg{}))
	recoverOnce(probe)
	steps := probe.Steps()
	require.Greater(t, steps, 3)
	for at := 1; at <= steps; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			fs := journaltest.WrapCrashFS(s.fs.CrashClone(vfs.CrashCloneCfg{}))
			fs.CrashAt(at)
			recoverOnce(fs)
			crashed := fs.CutNow()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			cfg := s.config(crashed, true)
			j := openLeader(ctx, t, cfg)
			requireAllWrites(t, cfg, s.writes)
			require.Len(t, j.Status().Members, 1)
			require.NoError(t, j.Close())
			cfg = s.config(crashed, false)
			j = openLeader(ctx, t, cfg)
			requireAllWrites(t, cfg, s.writes)
			require.NoError(t, j.Close())
		})
	}
}

// appendTail appends, after the survivor's last entry and at its term,
// the given membership changes without committing them: the uncommitted
// tail a voter holds when the cluster is lost while the leader replicates
// them.
func (s survivor) appendTail(t *testing.T, ccs ...*raftpb.ConfChange) {
	t.Helper()
	store, err := raftstore.Open(raftstore.Options{FS: s.fs, Dir: filepath.Join(s.dir, "journal")})
	require.NoError(t, err)
	defer store.Close()
	last, err := store.LastIndex()
	require.NoError(t, err)
	term, err := store.Term(last)
	require.NoError(t, err)
	ents := make([]*raftpb.Entry, 0, len(ccs))
	for k, cc := range ccs {
		data, err := proto.Marshal(cc)
		require.NoError(t, err)
		ents = append(ents, &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Term: new(term), Index: new(last + 1 + uint64(k)), Data: data})
	}
	require.NoError(t, store.Append(nil, ents, nil, true))
	require.NoError(t, store.Close())
}

// TestForceNewClusterSurvivorLeadsWhateverItsTailHolds: a forced
// recovery leads with the survivor as the only voter whatever the
// survivor's uncommitted tail holds: its own removal, its demotion to an
// observer, the removal of another voter, and a node added after them.
func TestForceNewClusterSurvivorLeadsWhateverItsTailHolds(t *testing.T) {
	cc := func(typ raftpb.ConfChangeType, id uint64) *raftpb.ConfChange {
		return &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(id)}
	}
	for _, tc := range []struct {
		name string
		tail []*raftpb.ConfChange
	}{
		{"own removal", []*raftpb.ConfChange{cc(raftpb.ConfChangeRemoveNode, 1)}},
		{"own demotion", []*raftpb.ConfChange{cc(raftpb.ConfChangeAddLearnerNode, 1)}},
		{"another's removal then own", []*raftpb.ConfChange{cc(raftpb.ConfChangeRemoveNode, 2), cc(raftpb.ConfChangeRemoveNode, 1)}},
		{"own removal then an addition", []*raftpb.ConfChange{cc(raftpb.ConfChangeRemoveNode, 1), cc(raftpb.ConfChangeAddNode, 4)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSurvivor(t, 5)
			s.appendTail(t, tc.tail...)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cfg := s.config(s.fs, true)
			j, err := journal.Open(ctx, cfg)
			require.NoError(t, err)
			defer j.Close()
			// Everything the forced recovery committed is applied before the
			// membership is read: it is the one the survivor runs with.
			require.NoError(t, j.WaitApplied(ctx, j.Status().Committed))
			st := j.Status()
			require.False(t, st.Removed, "the survivor applied its own removal")
			require.Equal(t, []journal.Member{{ID: 1, Addr: s.addr, Role: journal.Follower, MaxVersion: journal.NewestVersion}}, st.Members)
			require.NoError(t, j.Close())
			// It leads, now and after a restart without the flag.
			cfg = s.config(s.fs, false)
			j = openLeader(ctx, t, cfg)
			requireAllWrites(t, cfg, s.writes)
			_, _, err = j.Propose(ctx, []byte("after"))
			require.NoError(t, err)
			require.NoError(t, j.Close())
		})
	}
}
