package journal

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/metatree/metatree/internal/golden"
	"github.com/metatree/metatree/journal/internal/datadir"
	"github.com/metatree/metatree/journal/internal/dedupe"
	"github.com/metatree/metatree/journal/internal/envelope"
	"github.com/metatree/metatree/journal/internal/membership"
)

// goldenDigest is the digest in the golden check report.
var goldenDigest = bytes.Repeat([]byte{0xab}, 32)

// Every kind of entry envelope encodes a fixed input to the bytes checked
// in, and those bytes decode to that input, for ever.
func TestEntryEnvelopesMatchTheirGoldenFiles(t *testing.T) {
	key := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	for _, c := range []struct {
		file  string
		data  []byte
		check func(t *testing.T, env envelope.Envelope)
	}{
		{"envelope-k1-user.bin", envelope.EncodeUser(key, []byte("data")), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindUser, Key: key, Data: []byte("data")}, env)
		}},
		{"envelope-k2-timestamp.bin", envelope.EncodeTimestamp(1_700_000_000_123_456_789), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindTimestamp, TS: 1_700_000_000_123_456_789}, env)
		}},
		{"envelope-k3-user-since.bin", envelope.EncodeUserSince(key, 41, []byte("data")), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindUser, Key: key, Data: []byte("data"), Since: 41, Bounded: true}, env)
		}},
		{"envelope-k4-version.bin", envelope.EncodeVersion(3), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindVersion}, env)
		}},
		{"envelope-k5-check-mark.bin", envelope.EncodeCheckMark(1), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindCheck, Check: envelope.Check{Op: envelope.CheckMark, Format: 1}}, env)
		}},
		{"envelope-k5-check-mark-of-format.bin", envelope.EncodeCheckMark(2), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindCheck, Check: envelope.Check{Op: envelope.CheckMark, Format: 2}}, env)
		}},
		{"envelope-k5-check-report.bin", envelope.EncodeCheckReport(7, 2, goldenDigest), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindCheck, Check: envelope.Check{Op: envelope.CheckReport, Mark: 7, From: 2, Digest: goldenDigest}}, env)
		}},
		{"envelope-k5-check-clear.bin", envelope.EncodeCheckClear(), func(t *testing.T, env envelope.Envelope) {
			require.Equal(t, envelope.Envelope{Kind: envelope.KindCheck, Check: envelope.Check{Op: envelope.CheckClear}}, env)
		}},
	} {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join("testdata", "golden", c.file)
			golden.Check(t, path, c.data)
			b := golden.Read(t, path)
			env, err := envelope.Decode(b)
			require.NoError(t, err)
			c.check(t, env)
			if env.Kind == envelope.KindVersion {
				v, err := envelope.DecodeVersion(b)
				require.NoError(t, err)
				require.Equal(t, uint32(3), v)
			}
		})
	}
}

// goldenConfChanges are conf change entries as the journal writes them:
// the bootstrap's (the cluster's dedupe window in its context) and one with
// every other context field.
func goldenConfChanges() map[string]struct {
	cc  *raftpb.ConfChange
	ctx membership.ConfContext
} {
	yes := true
	return map[string]struct {
		cc  *raftpb.ConfChange
		ctx membership.ConfContext
	}{
		"confchange-v1-bootstrap.bin": {
			&raftpb.ConfChange{Type: raftpb.ConfChangeAddNode.Enum(), NodeId: new(uint64(1))},
			membership.ConfContext{Addr: "node1:7000", Role: Follower, MaxVersion: 3, Window: 10_000},
		},
		"confchange-v1-update.bin": {
			&raftpb.ConfChange{Type: raftpb.ConfChangeUpdateNode.Enum(), NodeId: new(uint64(4))},
			membership.ConfContext{Addr: "node4:7000", Role: Observer, Key: [16]byte{9, 8, 7}, MaxVersion: 2, NoSpace: &yes},
		},
	}
}

// A conf change entry (raft's ConfChange, the journal's JSON context in
// it) encodes to the bytes checked in, and those bytes decode to it.
func TestConfChangesMatchTheirGoldenFiles(t *testing.T) {
	for file, c := range goldenConfChanges() {
		t.Run(file, func(t *testing.T) {
			cc := proto.Clone(c.cc).(*raftpb.ConfChange)
			cc.Context = mustJSON(c.ctx)
			data, err := proto.Marshal(cc)
			require.NoError(t, err)
			path := filepath.Join("testdata", "golden", file)
			golden.Check(t, path, data)

			e := &raftpb.Entry{Type: raftpb.EntryConfChange.Enum(), Index: new(uint64(1)), Data: golden.Read(t, path)}
			gotCC, gotCtx, err := membership.DecodeConfChange(e)
			require.NoError(t, err)
			require.Equal(t, c.cc.GetType(), gotCC.GetType())
			require.Equal(t, c.cc.GetNodeId(), gotCC.GetNodeId())
			require.Equal(t, c.ctx, gotCtx)
		})
	}
}

// goldenMembership is a membership record with every field set.
func goldenMembership() *membership.Membership {
	return &membership.Membership{
		V:       membership.EncodingVersion,
		Index:   42,
		Voters:  []uint64{1, 2},
		Learner: []uint64{4},
		Members: map[uint64]Member{
			1: {ID: 1, Addr: "node1:7000", Role: Follower, MaxVersion: 3},
			2: {ID: 2, Addr: "node2:7000", Role: Follower, MaxVersion: 3, NoSpace: true},
			4: {ID: 4, Addr: "node4:7000", Role: Observer},
		},
		Removed: []uint64{3},
		Keys:    []dedupe.Key{{Index: 40, Key: [16]byte{1}}, {Index: 41, Key: [16]byte{2}}},
		Version: 3,
		Window:  10_000,
	}
}

// A membership record (the store's records, raft snapshots' and images'
// membership blob) encodes to the bytes checked in, and those bytes decode
// to it.
func TestMembershipRecordMatchesItsGoldenFile(t *testing.T) {
	path := filepath.Join("testdata", "golden", "membership-v1.json")
	golden.Check(t, path, goldenMembership().Encode())
	got, err := membership.Decode(golden.Read(t, path))
	require.NoError(t, err)
	require.Equal(t, goldenMembership(), got)
}

// The data dir's VERSION, ROLE and MEMBERS files, as the journal writes
// them, are the files checked in, and those files read back to what was
// written.
func TestDataDirFilesMatchTheirGoldenFiles(t *testing.T) {
	dir := filepath.Join("testdata", "golden", "datadir-v1")
	fs := vfs.NewMem()
	require.NoError(t, fs.MkdirAll("/d", 0o755))
	require.NoError(t, datadir.WriteVersion(fs, "/d", "golden-cluster", "secret", 7))
	require.NoError(t, datadir.WriteRole(fs, "/d", Observer))
	j := &Journal{cfg: Config{FS: fs, Dir: "/d"}}
	require.NoError(t, j.writeMembers(goldenMembership()))
	for _, name := range []string{"VERSION", "ROLE", datadir.MembersFile} {
		f, err := fs.Open("/d/" + name)
		require.NoError(t, err)
		var buf bytes.Buffer
		_, err = buf.ReadFrom(f)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		golden.Check(t, filepath.Join(dir, name), buf.Bytes())
	}

	ver, ok, err := datadir.ReadKV(vfs.Default, filepath.Join(dir, "VERSION"))
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, map[string]string{"cluster_id": "golden-cluster", "token": "secret", "node_id": "7"}, ver)
	require.NoError(t, checkNodeID(dir, ver, 7))
	role, ok, err := datadir.ReadKV(vfs.Default, filepath.Join(dir, "ROLE"))
	require.NoError(t, err)
	require.True(t, ok)
	r, err := ParseRole(role["role"])
	require.NoError(t, err)
	require.Equal(t, Observer, r)
	members, err := datadir.ReadMembers(vfs.Default, dir)
	require.NoError(t, err)
	want := goldenMembership()
	want.Keys = nil
	require.Equal(t, want, members)
}
