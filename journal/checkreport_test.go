package journal_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// skewSM is a memSM that states a digest of what it applied; skew
// changes the digest as a state changed outside the log would.
type skewSM struct {
	*memSM
	skew atomic.Bool
}

func (s *skewSM) StateDigest() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := sha256.New()
	for i := uint64(0); i <= s.last; i++ {
		if v, ok := s.ents[i]; ok {
			fmt.Fprintf(h, "%d:%s;", i, v)
		}
	}
	if s.skew.Load() {
		h.Write([]byte("skew"))
	}
	return h.Sum(nil)
}

// A member whose applier finds its digest differs before its loop
// proposed its own report (here the loop holds every report, the slowest
// loop there is) still has its report reach the log as it stops, so the
// healthy voters name it in their alarm.
func TestTheMemberThatDiffersReportsItsDigestBeforeItStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		sms := map[uint64]*skewSM{}
		c := newHTTPBubble(t, journaltest.Options{
			NewStateMachine: func(id uint64) journal.StateMachine {
				d := &skewSM{memSM: newMemSM()}
				mu.Lock()
				sms[id] = d
				mu.Unlock()
				return d
			},
			Configure: func(cfg *journal.Config) {
				cfg.CheckInterval = 50 * time.Millisecond
				if cfg.ID == 3 {
					journal.SetKnobsForTest(cfg, journal.KnobsForTest{HoldReports: true})
				}
			},
		})
		leader := c.leader(t).Journal()
		awaitTicks(t, 1000, "the cluster version that reads check entries", func() bool {
			for _, n := range c.Nodes() {
				if n.Journal().Status().ClusterVersion < journal.CheckVersionForTest {
					return false
				}
			}
			return true
		})
		ctx := ctxFor(t, 10*time.Second)
		_, _, err := leader.Propose(ctx, []byte("a"))
		require.NoError(t, err)
		awaitTicks(t, 1000, "a check on the healthy voters", func() bool {
			return leader.ChecksForTest() > 0
		})
		require.Nil(t, leader.Status().Alarm)

		mu.Lock()
		sms[3].skew.Store(true)
		mu.Unlock()
		awaitTicks(t, 1000, "the corruption alarm on member 3", func() bool {
			return errors.Is(c.Node(3).Journal().Status().Err, journal.ErrCorrupt)
		})
		for _, id := range []uint64{1, 2} {
			j := c.Node(id).Journal()
			awaitTicks(t, 1000, fmt.Sprintf("member %d naming member 3", id), func() bool {
				a := j.Status().Alarm
				return a != nil && slices.Equal(a.Members, []uint64{3})
			})
		}
	})
}
