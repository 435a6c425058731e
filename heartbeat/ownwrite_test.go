package heartbeat_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
)

// ctxJournal applies each proposal to its tree and records whether the
// proposal's context was marked as heartbeat's own write.
type ctxJournal struct {
	mu    sync.Mutex
	index uint64
	tree  *catalog.Tree
	own   []bool
}

func (j *ctxJournal) Propose(ctx context.Context, data []byte) (uint64, any, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.own = append(j.own, heartbeat.OwnWrite(ctx))
	j.index++
	return j.index, j.tree.Apply(j.index, data), nil
}

func (j *ctxJournal) LeaderTerm() (uint64, bool) { return 1, true }

// TestMembershipProposesItsRecordsAsOwnWrites: every proposal a Membership
// makes carries the OwnWrite mark, which no other context has.
func TestMembershipProposesItsRecordsAsOwnWrites(t *testing.T) {
	require.False(t, heartbeat.OwnWrite(context.Background()))
	tree := catalog.New()
	j := &ctxJournal{tree: tree}
	ms, err := heartbeat.New(heartbeat.Config{ID: 1, Epoch: epoch.New(), Tree: tree, Journal: j})
	require.NoError(t, err)
	defer func() { require.NoError(t, ms.Close()) }()
	require.NoError(t, ms.Add(t.Context(), heartbeat.Member{ID: 2, Addr: "127.0.0.1:1", Kind: epoch.KindWorker}))
	j.mu.Lock()
	defer j.mu.Unlock()
	require.NotEmpty(t, j.own)
	for i, own := range j.own {
		require.True(t, own, "proposal %d", i)
	}
}
