package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/metatree/metatree/internal/linearize"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/journaltest"
)

// kvSM is a register per key: entries are "key=value". It remembers every
// value it applied, in order, to check durability and agreement; that
// history is part of its images, so a node restored from one still has it.
type kvSM struct {
	mu      sync.Mutex
	kv      map[string]string
	applied []string
	at      []uint64 // the index of each applied entry
}

// kvImage is what kvSM saves in an image.
type kvImage struct {
	KV      map[string]string `json:"kv"`
	Applied []string          `json:"applied"`
	At      []uint64          `json:"at"`
}

// Save implements image.State.
func (s *kvSM) Save(w io.Writer) error {
	s.mu.Lock()
	b, err := json.Marshal(kvImage{KV: s.kv, Applied: s.applied, At: s.at})
	s.mu.Unlock()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// Load implements image.State.
func (s *kvSM) Load(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	var im kvImage
	if err := json.Unmarshal(b, &im); err != nil {
		return err
	}
	if im.KV == nil {
		im.KV = map[string]string{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv, s.applied, s.at = im.KV, im.Applied, im.At
	return nil
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
	s.at = append(s.at, index)
	return nil
}

func (s *kvSM) get(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv[k]
}

// history returns the applied entries in order, and their indexes.
func (s *kvSM) history() ([]string, []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.applied...), append([]uint64(nil), s.at...)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestFaultLinearizable runs clients writing and linearizably reading
// registers through random nodes of a 3-voter cluster while a fault
// injector cuts the power of nodes (unsynced writes lost), the leader above
// all, restarts them, and partitions them. A fourth node is an observer
// (learner): it serves writes (forwarded) and linearizable reads too.
// Every node runs the image package as the examples wire it, with small
// thresholds, so checkpoints, adoption by the leader, compaction and
// snapshot installs meet the faults; and faults start at the first step:
// the cluster forms under them, and a power cut may hit any disk step of
// a bootstrap, a join or a restart. It then checks the recorded history
// with porcupine, that every acknowledged write is applied on every node
// after healing, and that all nodes applied the same sequence.
//
// JOURNAL_FAULT_SECONDS (default 10) and JOURNAL_FAULT_SEED (default 1)
// lengthen or vary the run.
func TestFaultLinearizable(t *testing.T) {
	seed := uint64(envInt("JOURNAL_FAULT_SEED", 1))
	dur := time.Duration(envInt("JOURNAL_FAULT_SECONDS", 10)) * time.Second
	t.Logf("seed %d, %v of faults", seed, dur)
	var history []porcupine.Operation
	synctest.Test(t, func(t *testing.T) {
		c, hosts := newFaultCluster(t, seed, 3, 1)
		ctx, cancel := context.WithTimeout(context.Background(), dur+40*time.Second)
		defer cancel()
		rng := rand.New(rand.NewPCG(seed, 99))
		pause := func(lo, hi int) {
			select {
			case <-time.After(time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond):
			case <-ctx.Done():
			}
		}
		faults := map[string]int{}
		// bringUp starts node n, cutting its power at a random disk step of
		// Open every other time, until it runs.
		bringUp := func(id uint64, what string) {
			for ctx.Err() == nil {
				at := 0
				if rng.IntN(2) == 0 {
					at = 1 + rng.IntN(80)
				}
				err := c.RestartCrashingAt(ctx, id, at)
				if errors.Is(err, journaltest.ErrPowerCut) {
					faults["power cut during "+what]++
					pause(20, 200)
					continue
				}
				if err == nil {
					return
				}
				// A join needs a leader the helper can reach: try again.
				t.Logf("node %d: %s: %v", id, what, err)
				pause(50, 200)
			}
		}

		start := time.Now()
		now := func() int64 { return int64(time.Since(start)) }
		var (
			histMu sync.Mutex
			acked  []string
			stats  = map[string]int{}
		)
		record := func(op porcupine.Operation, outcome string) {
			histMu.Lock()
			defer histMu.Unlock()
			history = append(history, op)
			stats[outcome]++
		}

		// The cluster forms under faults, and the clients run from the first
		// node on.
		bringUp(1, "bootstrap")
		stop := make(chan struct{})
		// think is a client's pause between operations. In the bubble an
		// operation takes no time (messages and fsyncs are instant), so without
		// it the clients would keep every goroutine busy and time would never
		// move on to the next fault.
		think := func() { time.Sleep(time.Millisecond) }
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
					think()
					id := uint64(1 + rng.IntN(4)) // node 4 is an observer
					j, sm := c.Node(id).Journal(), kvOf(c.Node(id))
					if j == nil {
						continue // down: pick another
					}
					key := fmt.Sprintf("k%d", rng.IntN(nKeys))
					opCtx, opCancel := context.WithTimeout(ctx, time.Second)
					if rng.IntN(10) < 6 {
						value := fmt.Sprintf("c%d-%d", cl, n)
						in := linearize.KV{Put: true, Key: key, Value: value}
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
							out = sm.get(key)
						}
						ret := now()
						if err == nil {
							record(porcupine.Operation{ClientId: cl, Input: linearize.KV{Key: key}, Call: call, Output: out, Return: ret}, "get ok")
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
		for id := uint64(2); id <= 4; id++ {
			bringUp(id, "join")
		}

		// The fault injector: one fault at a time, so a quorum always remains
		// and the run makes progress between faults.
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
				bringUp(victim, "restart")
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
		written := hosts.imagesWritten()
		t.Logf("faults %v, operations %v, images %d, snapshots installed %d", faults, stats, written, hosts.installs.Load())

		// Heal, then every node must hold every acknowledged write, in the same
		// order as every other node.
		c.Net.Heal()
		_, err := c.WaitLeader(ctx)
		require.NoError(t, err)
		var final uint64
		for {
			final, _, err = c.Node(1).Journal().Propose(ctx, []byte("final=done"))
			if err == nil {
				break
			}
			require.NoError(t, ctx.Err(), "final write: %v", err)
		}
		for _, n := range c.Nodes() {
			if err := n.Journal().WaitApplied(ctx, final); err != nil {
				for _, n := range c.Nodes() {
					t.Logf("node %d: %+v", n.ID, n.Journal().Status())
				}
				t.Fatalf("after healing, node %d: %v", n.ID, err)
			}
		}
		var ref []string
		for _, n := range c.Nodes() {
			h, at := kvOf(n).history()
			have := map[string]uint64{}
			for i, e := range h {
				first, dup := have[e]
				require.False(t, dup, "node %d applied %s twice, at %d and %d (dedupe window %d)", n.ID, e, first, at[i], faultDedupeWindow)
				have[e] = at[i]
			}
			for _, w := range acked {
				_, ok := have[w]
				require.True(t, ok, "node %d lost the acknowledged write %s", n.ID, w)
			}
			if ref == nil {
				ref = h
			}
			require.Equal(t, ref, h, "node %d applied a different sequence", n.ID)
		}
		require.NotEmpty(t, acked, "the run must make progress")
		require.NotZero(t, stats["get ok"])
		require.NotZero(t, written, "images were written during the run")
		require.NotZero(t, hosts.installs.Load(), "lagging nodes caught up through snapshots")
		require.False(t, errors.Is(ctx.Err(), context.DeadlineExceeded))
	})

	res, info := porcupine.CheckOperationsVerbose(linearize.KVModel, history, 30*time.Second)
	if res != porcupine.Ok {
		// Outside t.TempDir, so it outlives the test for inspection.
		path := fmt.Sprintf("%s/porcupine-seed%d.html", os.TempDir(), seed)
		if f, err := os.Create(path); err == nil {
			_ = porcupine.Visualize(linearize.KVModel, info, f)
			_ = f.Close()
		}
		t.Fatalf("history of %d operations is %s (seed %d; visualisation %s)", len(history), res, seed, path)
	}
}
