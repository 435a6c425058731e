package journal

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// orderSM is the state machine of the journals the internal tests open
// alone: it keeps nothing, and panics if an entry applies out of index
// order. The tests of what a journal applies run in package journal_test
// on journaltest.Cluster, with the memSM of that package.
type orderSM struct{ last atomic.Uint64 }

func (s *orderSM) Apply(index uint64, data []byte) any {
	if prev := s.last.Swap(index); index <= prev {
		panic(fmt.Sprintf("apply %d after %d", index, prev))
	}
	return "ok:" + string(data)
}

// The timing of the journals the internal tests open, on a synctest
// bubble's virtual clock: a 200 ms election timeout.
const (
	testTick          = 10 * time.Millisecond
	testElectionTicks = 20
)
