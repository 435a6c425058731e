package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
)

// proposeAllocs is what one Propose on a single-node journal allocates in
// all, raft's and Pebble's allocations included (the race detector adds
// its own): the journal's proposal path owns two of them, the submission
// and the envelope. The count depends on raft's and Pebble's versions:
// after an upgrade, measure it again with this test.
func proposeAllocs() float64 {
	if raceEnabled {
		return 73
	}
	return 71
}

// Propose allocates a bounded count a write: the idempotency key, the
// waiter, the copy's record and its channels come from the submission or
// from journal-owned pools.
func TestProposeAllocations(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	j, err := journal.Open(ctx, journal.Config{
		ID: 1, Dir: "/n1", Addr: "127.0.0.1:7001", Bootstrap: true,
		StateMachine: &countSM{}, FS: vfs.NewMem(), TickInterval: 10 * time.Millisecond,
	})
	require.NoError(t, err)
	defer j.Close()
	data := []byte("0123456789abcdef")
	for range 200 { // fill the pools and let raft's and Pebble's buffers grow
		_, _, err := j.Propose(ctx, data)
		require.NoError(t, err)
	}
	allocs := testing.AllocsPerRun(500, func() {
		if _, _, err := j.Propose(ctx, data); err != nil {
			t.Fatal(err)
		}
	})
	require.LessOrEqual(t, allocs, proposeAllocs())
}
