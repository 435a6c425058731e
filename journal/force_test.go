package journal_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"testing/synctest"
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
	if err := journaltest.AwaitLeading(ctx, j); err != nil {
		j.Close()
		t.Fatal(err)
	}
	return j
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
	synctest.Test(t, func(t *testing.T) {
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
	})
}

// TestForceNewClusterCrashSafe cuts the power before every step of a
// forced recovery (Open with the flag, the election, a first write): the
// dir is the old one or the new one, and forcing it again (what an
// operator does after a crash) leads with every write; a restart without
// the flag after that is ordinary.
func TestForceNewClusterCrashSafe(t *testing.T) {
	var s survivor
	recoverOnce := func(t *testing.T, fs vfs.FS) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		j := openLeader(ctx, t, s.config(fs, true))
		_, _, err := j.Propose(ctx, []byte("first"))
		require.NoError(t, err)
		require.NoError(t, j.Close())
	}
	var steps int
	synctest.Test(t, func(t *testing.T) {
		s = newSurvivor(t, 10)
		probe := journaltest.WrapCrashFS(s.fs.CrashClone(vfs.CrashCloneCfg{}))
		recoverOnce(t, probe)
		steps = probe.Steps()
	})
	require.Greater(t, steps, 3)
	for at := 1; at <= steps; at++ {
		t.Run(fmt.Sprintf("step%d", at), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := journaltest.WrapCrashFS(s.fs.CrashClone(vfs.CrashCloneCfg{}))
				fs.CrashAt(at)
				recoverOnce(t, fs)
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
			synctest.Test(t, func(t *testing.T) {
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
		})
	}
}

// oldMemberTransport is the forced survivor's transport: as soon as Open
// starts it (before Open has read the data dir, let alone forced the new
// cluster), it delivers the given messages, one Receive each, and keeps
// what each Receive returned. Later the test delivers through the
// Receiver it kept.
type oldMemberTransport struct {
	journal.Transport
	atStart  []*raftpb.Message
	recv     journal.Receiver
	startErr []error
}

func (o *oldMemberTransport) Start(local uint64, r journal.Receiver) error {
	if err := o.Transport.Start(local, r); err != nil {
		return err
	}
	o.recv = r
	for _, m := range o.atStart {
		o.startErr = append(o.startErr, r.Receive(context.Background(), []*raftpb.Message{m}))
	}
	return nil
}

// TestForcedNodeRefusesItsOldMembersFromTheStartOfOpen: a node forced to
// lead a new cluster refuses with ErrRemoved every message of the members
// it forces out, from the moment its transport starts: during Open, and
// after Open while the removals it appended have not applied yet. Neither
// a heartbeat nor a vote request nor an append at a far higher term moves
// its term, takes its vote or touches its log; the removals apply, the
// node leads with every write, and a member added after them is heard.
func TestForcedNodeRefusesItsOldMembersFromTheStartOfOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSurvivor(t, 5)
		store, err := raftstore.Open(raftstore.Options{FS: s.fs, Dir: filepath.Join(s.dir, "journal")})
		require.NoError(t, err)
		last, err := store.LastIndex()
		require.NoError(t, err)
		lastTerm, err := store.Term(last)
		require.NoError(t, err)
		require.NoError(t, store.Close())
		high := lastTerm + 100
		// What voters 2 and 3, back with the old cluster's id and token, send
		// at a term far above the survivor's: a leader's heartbeat, a vote
		// request with a log that wins any comparison, and an append whose
		// entry conflicts with the first removal the survivor commits at
		// last+1.
		oldMsgs := func() []*raftpb.Message {
			return []*raftpb.Message{
				{Type: raftpb.MsgHeartbeat.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(high)},
				{Type: raftpb.MsgVote.Enum(), From: new(uint64(3)), To: new(uint64(1)), Term: new(high), Index: new(last + 100), LogTerm: new(high)},
				{Type: raftpb.MsgApp.Enum(), From: new(uint64(2)), To: new(uint64(1)), Term: new(high), Index: new(last), LogTerm: new(lastTerm),
					Entries: []*raftpb.Entry{{Type: raftpb.EntryNormal.Enum(), Index: new(last + 1), Term: new(high), Data: []byte("old")}}, Commit: new(last + 1)},
			}
		}
		gate := &gatedSM{hold: "w0", held: make(chan struct{}, 1), open: make(chan struct{})}
		opened := false
		openGate := func() {
			if !opened {
				opened = true
				close(gate.open)
			}
		}
		cfg := s.config(s.fs, true)
		cfg.StateMachine = gate
		// One committed entry a Ready and an apply queue full with one: while
		// the state machine holds the first write, the removals after it are
		// not handed out, so they cannot apply.
		cfg.MaxCommittedBytesPerReady, cfg.ApplyQueueBytes = 1, 1
		tr := &oldMemberTransport{Transport: cfg.Transport, atStart: oldMsgs()}
		cfg.Transport = tr
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		j, err := journal.Open(ctx, cfg)
		require.NoError(t, err)
		defer j.Close()
		defer openGate() // first: Close waits for the applier
		require.Len(t, tr.startErr, 3)
		for k, err := range tr.startErr {
			require.ErrorIs(t, err, journal.ErrRemoved, "message %d delivered while Open started the transport", k)
		}

		select {
		case <-gate.held:
		case <-ctx.Done():
			t.Fatal("the replay never reached the first write")
		}
		require.Len(t, j.Status().Members, 3, "the removals have not applied yet")
		for k, m := range oldMsgs() {
			require.ErrorIs(t, tr.recv.Receive(ctx, []*raftpb.Message{m}), journal.ErrRemoved, "message %d delivered after Open", k)
		}
		openGate()

		require.NoError(t, journaltest.AwaitLeading(ctx, j))
		st := j.Status()
		require.Less(t, st.Term, high, "the old members' term reached the survivor")
		require.Equal(t, []journal.Member{{ID: 1, Addr: s.addr, Role: journal.Follower, MaxVersion: journal.NewestVersion}}, st.Members)
		seen := map[string]int{}
		for _, a := range gate.Applied() {
			seen[string(a.Data)]++
		}
		for i := range s.writes {
			require.Equal(t, 1, seen[fmt.Sprintf("w%d", i)], "write w%d", i)
		}
		require.Zero(t, seen["old"], "the old member's append reached the state machine")
		_, _, err = j.Propose(ctx, []byte("after"))
		require.NoError(t, err)
		for k, m := range oldMsgs() {
			require.ErrorIs(t, tr.recv.Receive(ctx, []*raftpb.Message{m}), journal.ErrRemoved, "message %d delivered once the removals applied", k)
		}
		// A member added after the removals is no old member: it is heard.
		require.NoError(t, j.AddMember(ctx, 4, "node4", journal.Observer))
		resp := &raftpb.Message{Type: raftpb.MsgAppResp.Enum(), From: new(uint64(4)), To: new(uint64(1)), Term: new(j.Status().Term)}
		require.NoError(t, tr.recv.Receive(ctx, []*raftpb.Message{resp}))
	})
}
