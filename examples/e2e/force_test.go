package e2e

import (
	"fmt"
	"github.com/metatree/metatree/internal/linearize"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// opClient has a short timeout: a write that cannot commit fails fast and
// is recorded as of unknown outcome.
var opClient = &http.Client{Timeout: 2 * time.Second}

// kvClients run puts and linearizable gets against one server and record
// the history porcupine checks.
type kvClients struct {
	t       *testing.T
	start   time.Time
	mu      sync.Mutex
	history []porcupine.Operation
	codes   map[int]int  // answers by status (0: no answer)
	acked   atomic.Int64 // puts answered 200
	failed  atomic.Int64 // puts of unknown outcome
	stop    chan struct{}
	wg      sync.WaitGroup
	server  atomic.Pointer[proc] // every client's server, unless servers is set
	servers []*proc              // client cl talks to servers[cl%len(servers)]
	keys    int
}

// target is the server client cl talks to now.
func (k *kvClients) target(cl int) *proc {
	if len(k.servers) > 0 {
		return k.servers[cl%len(k.servers)]
	}
	return k.server.Load()
}

func (k *kvClients) now() int64 { return int64(time.Since(k.start)) }

func (k *kvClients) run(clients int) {
	for cl := range clients {
		k.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(cl), 7))
			for n := 0; ; n++ {
				select {
				case <-k.stop:
					return
				default:
				}
				p := k.target(cl)
				key := fmt.Sprintf("k%d", rng.IntN(k.keys))
				if rng.IntN(10) < 6 {
					value := fmt.Sprintf("c%d-%d", cl, n)
					call := k.now()
					code := do(k.t, "PUT", p.url("/v1/catalog/kv/"+key), map[string]any{"kind": "key", "attrs": map[string]any{"v": value}}, nil)
					ret := k.now()
					k.count(code)
					if code == http.StatusOK {
						k.acked.Add(1)
					} else {
						ret = math.MaxInt64
						k.failed.Add(1)
						// Pace a client facing a down server: every failed
						// put is one more op of unknown outcome to place.
						time.Sleep(20 * time.Millisecond)
					}
					k.record(porcupine.Operation{ClientId: cl, Input: linearize.KV{Put: true, Key: key, Value: value}, Call: call, Return: ret})
					continue
				}
				call := k.now()
				var n nodeView
				code := do(k.t, "GET", p.url("/v1/catalog/kv/"+key+"?consistency=linearizable"), nil, &n)
				ret := k.now()
				k.count(code)
				switch code {
				case http.StatusOK:
					v, _ := n.Attrs["v"].(string)
					k.record(porcupine.Operation{ClientId: cl, Input: linearize.KV{Key: key}, Call: call, Output: v, Return: ret})
				case http.StatusNotFound:
					k.record(porcupine.Operation{ClientId: cl, Input: linearize.KV{Key: key}, Call: call, Output: "", Return: ret})
				default:
					time.Sleep(20 * time.Millisecond) // pace, as above
				}
			}
		})
	}
}

func (k *kvClients) record(op porcupine.Operation) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.history = append(k.history, op)
}

func (k *kvClients) count(code int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.codes == nil {
		k.codes = map[int]int{}
	}
	k.codes[code]++
}

// do is call with opClient.
func do(t *testing.T, method, url string, body, out any) int {
	return callWith(t, opClient, method, url, body, out)
}

// TestForceNewClusterAfterQuorumLoss: clients write and read through one
// voter of three; the other two are killed with their data dirs deleted;
// the survivor, restarted with -force-new-cluster, accepts writes within
// seconds with every write it acknowledged; two fresh members join and
// converge; the lost members are gone from /v1/members; a restart without
// the flag is ordinary; and the whole history is linearizable.
func TestForceNewClusterAfterQuorumLoss(t *testing.T) {
	c := newCluster(t)
	ms := threeVoters(c)
	require200(t, call(t, "PUT", ms[0].url("/v1/catalog/kv"), map[string]any{"kind": "dir"}, nil), "create /kv")
	survivor := ms[2]
	k := &kvClients{t: t, start: time.Now(), stop: make(chan struct{}), keys: 16}
	k.server.Store(survivor)
	k.run(4)
	defer func() {
		select {
		case <-k.stop:
		default:
			close(k.stop)
		}
		k.wg.Wait()
	}()
	eventually(t, 30*time.Second, "200 acknowledged writes", func() bool { return k.acked.Load() >= 200 })

	for _, p := range ms[:2] {
		p.kill()
		if err := os.RemoveAll(p.dir); err != nil {
			t.Fatal(err)
		}
	}
	failedBefore := k.failed.Load()
	eventually(t, 30*time.Second, "writes failing without a quorum", func() bool { return k.failed.Load() >= failedBefore+8 })

	survivor.kill()
	survivor.args = append(withoutJoin(survivor.args), "-force-new-cluster")
	restarted := time.Now()
	ackedBefore := k.acked.Load()
	survivor.start()
	eventually(t, 20*time.Second, "the survivor accepts writes", func() bool { return k.acked.Load() > ackedBefore })
	t.Logf("the forced survivor accepted a write %v after its restart", time.Since(restarted).Round(time.Millisecond))

	j1 := c.metaserverAt(4, filepath.Join(c.base, "new4"), freeAddr(t), "-join", survivor.addr)
	j2 := c.metaserverAt(5, filepath.Join(c.base, "new5"), freeAddr(t), "-join", survivor.addr)
	all := []*proc{survivor, j1, j2}
	c.waitLeader(30*time.Second, all...)
	eventually(t, 30*time.Second, "only the new cluster's frontends are members", func() bool {
		var mem []memberView
		if call(t, "GET", survivor.url("/v1/members"), nil, &mem) != http.StatusOK {
			return false
		}
		var ids []uint64
		for _, m := range mem {
			if m.Kind == "frontend" {
				ids = append(ids, m.ID)
			}
		}
		slices.Sort(ids)
		return slices.Equal(ids, []uint64{3, 4, 5})
	})
	acked := k.acked.Load()
	eventually(t, 30*time.Second, "more writes through the new cluster", func() bool { return k.acked.Load() >= acked+50 })

	// An ordinary restart of the survivor, without the flag.
	if err := survivor.stop(); err != nil {
		t.Fatalf("survivor exit: %v", err)
	}
	survivor.args = slices.DeleteFunc(survivor.args, func(a string) bool { return a == "-force-new-cluster" })
	survivor.start()
	c.waitLeader(30*time.Second, all...)
	acked = k.acked.Load()
	eventually(t, 30*time.Second, "writes after an ordinary restart", func() bool { return k.acked.Load() > acked })
	close(k.stop)
	k.wg.Wait()

	for key := range k.keys {
		var want nodeView
		code := call(t, "GET", survivor.url(fmt.Sprintf("/v1/catalog/kv/k%d?consistency=linearizable", key)), nil, &want)
		for _, p := range []*proc{j1, j2} {
			eventually(t, 30*time.Second, fmt.Sprintf("%s converged on k%d", p.name, key), func() bool {
				var got nodeView
				return call(t, "GET", p.url(fmt.Sprintf("/v1/catalog/kv/k%d?consistency=linearizable", key)), nil, &got) == code &&
					fmt.Sprint(got.Attrs) == fmt.Sprint(want.Attrs)
			})
		}
	}

	k.mu.Lock()
	history := slices.Clone(k.history)
	k.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(linearize.KVModel, history, 120*time.Second)
	if res != porcupine.Ok {
		f, err := os.CreateTemp("", "force-new-cluster-*.html")
		if err == nil {
			_ = porcupine.Visualize(linearize.KVModel, info, f)
			f.Close()
		}
		t.Fatalf("history of %d operations (%d puts acknowledged) is %v; visualization in %s", len(history), k.acked.Load(), res, f.Name())
	}
	t.Logf("linearizable: %d operations, %d puts acknowledged, %d of unknown outcome", len(history), k.acked.Load(), k.failed.Load())
	requireNoFalseAlarm(t, all...)
}

// withoutJoin drops -bootstrap, -join and -role from a metaserver's
// arguments (what a restart from its dir needs).
func withoutJoin(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-bootstrap":
			continue
		case "-join", "-role":
			i++
			continue
		}
		out = append(out, args[i])
	}
	return out
}
