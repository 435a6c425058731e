package journal_test

import (
	"context"
	"fmt"
	"github.com/metatree/metatree/internal/linearize"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestFaultLinearizableCoalescedReads is the fault test's linearizability
// check with many concurrent readers on every node, so that barriers share
// ReadIndex rounds (and rounds are lost and resent) while the leader is
// crashed and nodes are partitioned away: 16 readers on random nodes (node
// 4 is an observer), about four a node, against two writers. Every read that returned is checked by
// porcupine with the writes.
//
// JOURNAL_FAULT_SECONDS (default 10) and JOURNAL_FAULT_SEED (default 1)
// lengthen or vary the run, as for TestFaultLinearizable.
func TestFaultLinearizableCoalescedReads(t *testing.T) {
	seed := uint64(envInt("JOURNAL_FAULT_SEED", 1))
	dur := time.Duration(envInt("JOURNAL_FAULT_SECONDS", 10)) * time.Second
	var history []porcupine.Operation
	synctest.Test(t, func(t *testing.T) {
		sms := struct {
			sync.Mutex
			m map[uint64]*kvSM
		}{m: map[uint64]*kvSM{}}
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters: 3, Observers: 1, Seed: seed,
			NewStateMachine: func(id uint64) journal.StateMachine {
				sm := newKVSM()
				sms.Lock()
				sms.m[id] = sm
				sms.Unlock()
				return sm
			},
			Configure: func(cfg *journal.Config) { cfg.StaleAfter = time.Minute },
		})
		smOf := func(id uint64) *kvSM {
			sms.Lock()
			defer sms.Unlock()
			return sms.m[id]
		}
		ctx, cancel := context.WithTimeout(context.Background(), dur+40*time.Second)
		defer cancel()
		_, err := c.WaitLeader(ctx)
		require.NoError(t, err)

		start := time.Now()
		now := func() int64 { return int64(time.Since(start)) }
		var (
			histMu sync.Mutex
			stats  = map[string]int{}
		)
		record := func(op *porcupine.Operation, outcome string) {
			histMu.Lock()
			defer histMu.Unlock()
			if op != nil {
				history = append(history, *op)
			}
			stats[outcome]++
		}

		stop := make(chan struct{})
		// think is a client's pause between operations. In the bubble an
		// operation takes no time (messages and fsyncs are instant), so without
		// it the clients would keep every goroutine busy and time would never
		// move on to the next fault.
		think := func() { time.Sleep(10 * time.Millisecond) } // one raft tick
		var clients sync.WaitGroup
		const nWriters, nReaders, nKeys = 2, 16, 8
		for cl := range nWriters {
			rng := rand.New(rand.NewPCG(seed, uint64(cl)))
			clients.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					think()
					j := c.Node(uint64(1 + rng.IntN(4))).Journal()
					if j == nil {
						continue
					}
					key, value := fmt.Sprintf("k%d", rng.IntN(nKeys)), fmt.Sprintf("w%d-%d", cl, n)
					opCtx, opCancel := context.WithTimeout(ctx, time.Second)
					call := now()
					_, _, err := j.Propose(opCtx, []byte(key+"="+value))
					opCancel()
					ret := now()
					outcome := "put ok"
					if err != nil {
						ret, outcome = math.MaxInt64, "put unknown" // may still commit
					}
					record(&porcupine.Operation{ClientId: cl, Input: linearize.KV{Put: true, Key: key, Value: value}, Call: call, Return: ret}, outcome)
				}
			})
		}
		for r := range nReaders {
			cl := nWriters + r
			rng := rand.New(rand.NewPCG(seed, uint64(cl)))
			clients.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					think()
					n := c.Node(uint64(1 + rng.IntN(4)))
					j := n.Journal()
					if j == nil {
						continue // down: pick another (one node is down at a time)
					}
					key := fmt.Sprintf("k%d", rng.IntN(nKeys))
					opCtx, opCancel := context.WithTimeout(ctx, time.Duration(200+rng.IntN(1000))*time.Millisecond)
					call := now()
					err := j.ReadBarrier(opCtx)
					opCancel()
					if err != nil {
						record(nil, "get failed") // observed nothing
						continue
					}
					out := smOf(n.ID).get(key)
					record(&porcupine.Operation{ClientId: cl, Input: linearize.KV{Key: key}, Call: call, Output: out, Return: now()}, "get ok")
				}
			})
		}

		rng := rand.New(rand.NewPCG(seed, 77))
		pause := func(lo, hi int) {
			select {
			case <-time.After(time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		faults := map[string]int{}
		for time.Since(start) < dur {
			leader, err := c.WaitLeader(ctx)
			require.NoError(t, err)
			victim := leader
			if rng.IntN(3) == 0 {
				victim = uint64(1 + rng.IntN(4))
			}
			if rng.IntN(2) == 0 {
				faults["crash"]++
				require.NoError(t, c.Crash(victim))
				pause(100, 700)
				require.NoError(t, c.Restart(ctx, victim))
			} else {
				faults["isolate"]++
				c.Net.Isolate(victim)
				pause(100, 700)
				c.Net.Heal()
			}
			pause(100, 400)
		}
		close(stop)
		clients.Wait()
		t.Logf("seed %d: faults %v, operations %v", seed, faults, stats)
		require.NotZero(t, stats["get ok"])
		require.NotZero(t, stats["put ok"])
	})

	res, info := porcupine.CheckOperationsVerbose(linearize.KVModel, history, 60*time.Second)
	if res != porcupine.Ok {
		path := fmt.Sprintf("%s/porcupine-reads-seed%d.html", os.TempDir(), seed)
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(linearize.KVModel, info, f)
			_ = f.Close()
		}
		t.Fatalf("history of %d operations is %s (seed %d; visualisation %s)", len(history), res, seed, path)
	}
}
