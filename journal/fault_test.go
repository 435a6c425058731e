package journal_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// kvSM is a register per key: entries are "key=value". It remembers every
// value it applied, in order, to check durability and agreement.
type kvSM struct {
	mu      sync.Mutex
	kv      map[string]string
	applied []string
}

func newKVSM() *kvSM { return &kvSM{kv: map[string]string{}} }

func (s *kvSM) Apply(index uint64, data []byte) any {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, v, ok := strings.Cut(string(data), "=")
	if !ok {
		return fmt.Errorf("malformed entry %q at %d", data, index)
	}
	s.kv[k] = v
	s.applied = append(s.applied, string(data))
	return nil
}

func (s *kvSM) get(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv[k]
}

func (s *kvSM) history() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.applied...)
}

type kvInput struct {
	put        bool
	key, value string
}

// kvModel is porcupine's key/value register model, partitioned by key. A put
// whose outcome is unknown (an error: it may still commit) is recorded with
// an infinite return time, so it may take effect at any point after its
// call, or never within the history.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(kvInput)
		if in.put {
			return true, in.value
		}
		return output.(string) == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.put {
			return fmt.Sprintf("put(%s, %s)", in.key, in.value)
		}
		return fmt.Sprintf("get(%s) -> %q", in.key, output)
	},
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestFaultLinearizable runs clients writing and linearizably reading
// registers through random nodes of a 3-voter cluster while a fault
// injector crashes (power cut: unsynced writes lost) and restarts nodes,
// the leader above all, and partitions them. A fourth node is an observer
// (learner): it serves writes (forwarded) and linearizable reads too. It then checks the recorded
// history with porcupine, that every acknowledged write is applied on every
// node after healing, and that all nodes applied the same sequence.
//
// JOURNAL_FAULT_SECONDS (default 10) and JOURNAL_FAULT_SEED (default 1)
// lengthen or vary the run.
func TestFaultLinearizable(t *testing.T) {
	seed := uint64(envInt("JOURNAL_FAULT_SEED", 1))
	dur := time.Duration(envInt("JOURNAL_FAULT_SECONDS", 10)) * time.Second
	t.Logf("seed %d, %v of faults", seed, dur)
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
		histMu  sync.Mutex
		history []porcupine.Operation
		acked   []string
		stats   = map[string]int{}
	)
	record := func(op porcupine.Operation, outcome string) {
		histMu.Lock()
		defer histMu.Unlock()
		history = append(history, op)
		stats[outcome]++
	}

	stop := make(chan struct{})
	var clients sync.WaitGroup
	const nClients, nKeys = 4, 6
	for cl := range nClients {
		rng := rand.New(rand.NewPCG(seed, uint64(cl)))
		clients.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				node := c.Node(uint64(1 + rng.IntN(4))) // node 4 is an observer
				j := node.Journal()
				if j == nil {
					continue // down: pick another
				}
				key := fmt.Sprintf("k%d", rng.IntN(nKeys))
				opCtx, opCancel := context.WithTimeout(ctx, time.Second)
				if rng.IntN(10) < 6 {
					value := fmt.Sprintf("c%d-%d", cl, n)
					in := kvInput{put: true, key: key, value: value}
					call := now()
					_, _, err := j.Propose(opCtx, []byte(key+"="+value))
					ret := now()
					if err != nil {
						// Unknown outcome: it may still commit later.
						ret = math.MaxInt64
					}
					record(porcupine.Operation{ClientId: cl, Input: in, Call: call, Return: ret}, map[bool]string{true: "put ok", false: "put unknown"}[err == nil])
					if err == nil {
						histMu.Lock()
						acked = append(acked, key+"="+value)
						histMu.Unlock()
					}
				} else {
					call := now()
					err := j.ReadBarrier(opCtx)
					var out string
					if err == nil {
						out = smOf(node.ID).get(key)
					}
					ret := now()
					if err == nil {
						record(porcupine.Operation{ClientId: cl, Input: kvInput{key: key}, Call: call, Output: out, Return: ret}, "get ok")
					} else { // a failed read observed nothing: not in the history
						histMu.Lock()
						stats["get failed"]++
						histMu.Unlock()
					}
				}
				opCancel()
			}
		})
	}

	// The fault injector: one fault at a time, so a quorum always remains
	// and the run makes progress between faults.
	rng := rand.New(rand.NewPCG(seed, 99))
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
		kind := "leader"
		switch {
		case victim == 4:
			kind = "observer"
		case victim != leader:
			kind = "follower"
		}
		switch rng.IntN(3) {
		case 0, 1: // power cut, then restart
			faults["crash "+kind]++
			require.NoError(t, c.Crash(victim))
			pause(100, 700)
			require.NoError(t, c.Restart(ctx, victim))
		case 2: // partition away, then heal
			faults["isolate "+kind]++
			c.Net.Isolate(victim)
			pause(100, 700)
			c.Net.Heal()
		}
		pause(100, 500)
	}
	close(stop)
	clients.Wait()
	t.Logf("faults %v, operations %v", faults, stats)

	// Heal, then every node must hold every acknowledged write, in the same
	// order as every other node.
	c.Net.Heal()
	_, err = c.WaitLeader(ctx)
	require.NoError(t, err)
	var final uint64
	for {
		final, _, err = c.Node(1).Journal().Propose(ctx, []byte("final=done"))
		if err == nil {
			break
		}
		require.NoError(t, ctx.Err(), "final write: %v", err)
	}
	if err := c.WaitApplied(ctx, final); err != nil {
		for _, n := range c.Nodes() {
			if j := n.Journal(); j != nil {
				t.Logf("node %d: %+v", n.ID, j.Status())
			}
		}
		t.Fatalf("after healing: %v", err)
	}
	var ref []string
	for _, n := range c.Running() {
		h := smOf(n.ID).history()
		have := map[string]bool{}
		for _, e := range h {
			require.False(t, have[e], "node %d applied %s twice", n.ID, e)
			have[e] = true
		}
		for _, w := range acked {
			require.True(t, have[w], "node %d lost the acknowledged write %s", n.ID, w)
		}
		if ref == nil {
			ref = h
		}
		require.Equal(t, ref, h, "node %d applied a different sequence", n.ID)
	}
	require.NotEmpty(t, acked, "the run must make progress")
	require.NotZero(t, stats["get ok"])

	res, info := porcupine.CheckOperationsVerbose(kvModel, history, 30*time.Second)
	if res != porcupine.Ok {
		// Outside t.TempDir, so it outlives the test for inspection.
		path := fmt.Sprintf("%s/porcupine-seed%d.html", os.TempDir(), seed)
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(kvModel, info, f)
			_ = f.Close()
		}
		t.Fatalf("history of %d operations is %s (seed %d; visualisation %s)", len(history), res, seed, path)
	}
	require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
}
