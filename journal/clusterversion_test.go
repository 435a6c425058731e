package journal_test

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// formatSM is a state machine that reads entries whose first byte (their
// format version) is at most reads, and halts on the others.
type formatSM struct {
	journaltest.Recorder
	reads byte
}

type haltResult struct{ err error }

func (h haltResult) Halt() error { return h.err }

func (s *formatSM) Apply(index uint64, data []byte) any {
	if len(data) > 0 && data[0] > s.reads {
		return haltResult{fmt.Errorf("entry format %d, this state machine reads up to %d", data[0], s.reads)}
	}
	return s.Recorder.Apply(index, data)
}

// A node whose state machine cannot read an entry halts its applier at that
// entry: Status, the halted gauge and WaitApplied name the index; nothing at
// or after it is applied or marked applied; its writes fail with ErrHalted
// while the others go on. Restarted with a state machine that reads the
// format, it resumes at that entry and ends with the same entries as the
// others.
func TestApplierHaltsOnUnreadableEntryAndResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		reads := map[uint64]byte{1: 2, 2: 2, 3: 1}
		c := journaltest.NewCluster(t, journaltest.Options{
			NewStateMachine: func(id uint64) journal.StateMachine {
				mu.Lock()
				defer mu.Unlock()
				return &formatSM{reads: reads[id]}
			},
		})
		ctx := ctxFor(t, 30*time.Second)
		leaderID, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		if leaderID == 3 {
			require.NoError(t, c.Node(3).Journal().TransferLeadership(ctx, 1))
			leaderID, err = c.WaitNewLeader(ctx, 3)
			require.NoError(t, err)
		}
		leader := c.Node(leaderID).Journal()
		before, _, err := leader.Propose(ctx, []byte("\x01before"))
		require.NoError(t, err)
		newer, _, err := leader.Propose(ctx, []byte("\x02newer"))
		require.NoError(t, err)
		after, _, err := leader.Propose(ctx, []byte("\x01after"))
		require.NoError(t, err)
		require.NoError(t, c.Node(leaderID).Journal().WaitApplied(ctx, after))

		old := c.Node(3).Journal()
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(old.Collector()))
		err = old.WaitApplied(ctx, after)
		require.ErrorIs(t, err, journal.ErrHalted)
		var he *journal.HaltError
		require.ErrorAs(t, err, &he)
		require.Equal(t, newer, he.Index)
		require.Contains(t, err.Error(), fmt.Sprintf("index %d", newer))
		require.Contains(t, err.Error(), "entry format 2")

		st := old.Status()
		require.ErrorIs(t, st.Err, journal.ErrHalted)
		require.Equal(t, newer-1, st.Applied, "nothing at or after the halt is marked applied")
		sm := c.Node(3).StateMachine().(*formatSM)
		require.Equal(t, before, sm.LastIndex(), "nothing at or after the halt is applied")
		require.Equal(t, 1.0, scrape(t, reg)["metatree_journal_halted"])
		_, _, err = old.Propose(ctx, []byte("\x01refused"))
		require.ErrorIs(t, err, journal.ErrHalted)
		// The others go on.
		last, _, err := leader.Propose(ctx, []byte("\x01more"))
		require.NoError(t, err)

		mu.Lock()
		reads[3] = 2
		mu.Unlock()
		require.NoError(t, c.Stop(3))
		require.NoError(t, c.Restart(ctx, 3))
		require.NoError(t, c.Node(3).Journal().WaitApplied(ctx, last))
		require.NoError(t, c.Node(3).Journal().Status().Err)
		got := c.Node(3).StateMachine().(*formatSM).Applied()
		want := c.Node(leaderID).StateMachine().(*formatSM).Applied()
		require.Equal(t, want, got, "the restarted node applied the same entries, the halted one included")
	})
}
