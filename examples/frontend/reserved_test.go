package frontend

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/journal"
)

// TestRawProposeUnderTheClusterRecordsIsRefused: a catalog batch proposed
// as raw bytes through the frontend's journal, past Write, is refused with
// ErrReserved when it writes under /_cluster, and never enters the log;
// a raw batch elsewhere, and heartbeat's own record writes, go through.
func TestRawProposeUnderTheClusterRecordsIsRefused(t *testing.T) {
	f := startOne(t, nil)
	ctx := t.Context()
	before := f.Journal().Status().Applied
	for _, op := range []catalog.Op{
		{Type: catalog.OpDelete, Path: heartbeat.ClusterPath, Recursive: true},
		{Type: catalog.OpCreate, Path: heartbeat.MembersPath + "/99", Kind: "member"},
		{Type: catalog.OpUpdate, Path: heartbeat.MembersPath + "/1", Set: map[string]catalog.Value{"addr": catalog.String("x:1")}},
	} {
		data, err := catalog.Batch{Ops: []catalog.Op{op}}.Encode()
		require.NoError(t, err)
		_, _, err = f.Journal().Propose(ctx, data)
		require.ErrorIs(t, err, ErrReserved, "%+v", op)
		require.ErrorIs(t, err, journal.ErrInvalidProposal, "%+v", op)
	}
	require.Equal(t, before, f.Journal().Status().Applied, "a refused proposal never enters the log")

	data, err := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/raw", Kind: "dir"}}}.Encode()
	require.NoError(t, err)
	_, _, err = f.Journal().Propose(ctx, data)
	require.NoError(t, err)
	_, ok := f.Tree().Get("/raw")
	require.True(t, ok)

	// Heartbeat writes its own records through the same journal.
	require.NoError(t, f.AddMember(ctx, heartbeat.Member{ID: 7, Addr: "127.0.0.1:1", Kind: epoch.KindWorker}))
	_, ok = f.Tree().Get(heartbeat.MembersPath + "/7")
	require.True(t, ok, "heartbeat's own write is not refused")
}
