package e2e

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/metatree/metatree/internal/linearize"
)

// nemesisFlags follow fastFlags (the last value of a flag wins): a member
// is declared dead after 25 missed heartbeats of 200ms, 5 s, longer than
// any partition the nemesis holds, so a death it declares is news; and it
// is declared dead at all only through the member records, which the
// checks read.
var nemesisFlags = []string{"-dead-after", "25"}

// nemesisHold is how long a scenario keeps its partition: past raft's
// election timeout (1 s), under the death threshold.
const nemesisHold = 2500 * time.Millisecond

// loopStalls counts the times a member's raft loop took no tick for most
// of an election timeout.
const loopStalls = "metatree_journal_loop_stalls_total"

// nemesisWorker is the worker's member id.
const nemesisWorker = 101

// nemesis is a cluster of three voters, an observer and a worker, each
// behind its own proxy, with clients writing and reading through every
// frontend.
type nemesis struct {
	t         *testing.T
	c         *cluster
	net       *netem
	rng       *rand.Rand
	voters    []*proc
	frontends []*proc // the voters, then the observer
	worker    *proc
	k         *kvClients
}

// member starts a metaserver (or, with id nemesisWorker, the worker) on
// loopback IP index i behind its proxy; the proc's addr is the advertised
// one, the proxy's, where the clients reach it too.
func (n *nemesis) member(i, id int, extra ...string) *proc {
	ip := memberIP(i)
	listen, release := reserveAddrOn(n.t, ip) // the proxy's port is another
	name := fmt.Sprintf("metaserver-%d", id)
	if id == nemesisWorker {
		name = fmt.Sprintf("worker-%d", id)
	}
	adv := n.net.front(name, ip, listen)
	release()
	if id == nemesisWorker {
		return n.c.workerAt(id, adv, append([]string{"-listen", listen}, extra...)...)
	}
	args := append([]string{"-listen", listen}, nemesisFlags...)
	return n.c.metaserverAt(id, filepath.Join(n.c.base, fmt.Sprintf("fe%d", id)), adv, append(args, extra...)...)
}

func (n *nemesis) all() []*proc { return append(slices.Clone(n.frontends), n.worker) }

// except is every member but ps.
func (n *nemesis) except(ps ...*proc) []*proc {
	return slices.DeleteFunc(n.all(), func(p *proc) bool { return slices.Contains(ps, p) })
}

// follower is the first voter that does not lead.
func (n *nemesis) follower(leader *proc) *proc {
	for _, p := range n.voters {
		if p != leader {
			return p
		}
	}
	n.t.Fatal("no follower")
	return nil
}

func names(ps ...*proc) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.name
	}
	return out
}

// hold keeps the partition in place: the nemesis's schedule is time, as a
// Jepsen nemesis's is; what the cluster does meanwhile is observed through
// the checks.
func (n *nemesis) hold(d time.Duration) { time.Sleep(d) }

// healAndRecover heals the network and waits for an agreed leader and for
// the clients' writes to be acknowledged again.
func (n *nemesis) healAndRecover(what string) *proc {
	n.net.heal()
	leader := n.c.waitLeader(30*time.Second, n.frontends...)
	acked := n.k.acked.Load()
	eventually(n.t, 30*time.Second, "writes acknowledged after healing "+what, func() bool { return n.k.acked.Load() >= acked+20 })
	return leader
}

// awaitMajorityLeader waits, under a partition that keeps old from a
// quorum, for old to step down and for the voters it cannot reach to
// elect another leader.
func (n *nemesis) awaitMajorityLeader(old *proc) {
	n.t.Helper()
	eventually(n.t, 15*time.Second, old.name+" stepping down, another voter leading", func() bool {
		st, ok := getStatus(n.t, old)
		if !ok || st.State == "leader" {
			return false
		}
		for _, p := range n.voters {
			if st, ok := getStatus(n.t, p); p != old && ok && st.State == "leader" {
				return true
			}
		}
		return false
	})
}

// memberRecord is a member's epoch, generation and last death in the
// catalog's member records: the generation moves on every transition (a
// death, a return, a restart), so an unchanged pair means the member was
// never declared dead and never restarted; a member that returns from a
// death does so with a fresh epoch, and the record names the death's
// generation (died).
type memberRecord struct {
	Epoch      string
	Generation float64
	Died       float64
}

func (n *nemesis) records(through *proc) map[uint64]memberRecord {
	out := map[uint64]memberRecord{}
	for _, p := range n.all() {
		id := procID(p)
		var nv nodeView
		require200(n.t, call(n.t, "GET", through.url(fmt.Sprintf("/v1/catalog/_cluster/members/%d?consistency=linearizable", id)), nil, &nv), "member record of "+p.name)
		epoch, _ := nv.Attrs["epoch"].(string)
		gen, _ := nv.Attrs["generation"].(float64)
		died, _ := nv.Attrs["died"].(float64)
		out[id] = memberRecord{Epoch: epoch, Generation: gen, Died: died}
	}
	return out
}

// procID is the member id in a proc's name ("metaserver-3", "worker-101").
func procID(p *proc) uint64 {
	id, err := strconv.ParseUint(p.name[strings.LastIndex(p.name, "-")+1:], 10, 64)
	if err != nil {
		panic(err)
	}
	return id
}

// catalogView is what one frontend's API shows of the clients' keys and
// the member records, read locally.
func catalogView(t *testing.T, p *proc) (string, bool) {
	var b strings.Builder
	for _, dir := range []string{"/kv", "/_cluster/members"} {
		var d nodeView
		if call(t, "GET", p.url("/v1/catalog"+dir), nil, &d) != http.StatusOK {
			return "", false
		}
		slices.Sort(d.Children)
		for _, child := range d.Children {
			var nv nodeView
			if call(t, "GET", p.url("/v1/catalog"+dir+"/"+child), nil, &nv) != http.StatusOK {
				return "", false
			}
			fmt.Fprintf(&b, "%s/%s %s %d %v\n", dir, child, nv.Kind, nv.Modified, nv.Attrs)
		}
	}
	return b.String(), true
}

// deathCause matches a cancel.CanceledError for a death.
var deathCause = regexp.MustCompile(`node (\d+) declared dead`)

// TestPartitionNemesis: a cluster of real processes, each behind a proxy
// of the test's own, meets symmetric partitions (a follower isolated; the
// leader and the worker split from the majority), the leader cut off from
// its followers but reachable by clients, one-way partitions (out of the
// leader, into it, from the leader to one follower), the worker cut off
// from the leader until its view is stale, a flapping link over delayed
// links, a follower isolated while the log is compacted past it (it
// catches up from an image), and a follower isolated until it is declared
// dead, healed after each. Clients write and read linearizably
// through every frontend all along. Then: the history is linearizable,
// final reads through every member included (no acknowledged write lost);
// every frontend reaches the same applied index and shows the same
// catalog; no process exited; and no query or fragment was cancelled but
// for a death the member records show, the queries of members never
// declared dead still running on their coordinator and on the worker.
func TestPartitionNemesis(t *testing.T) {
	began := time.Now()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("METATREE_NEMESIS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("METATREE_NEMESIS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("nemesis seed %d (set METATREE_NEMESIS_SEED to replay the flapping schedule)", seed)
	n := &nemesis{t: t, c: newCluster(t), net: newNetem(t), rng: rand.New(rand.NewPCG(seed, 19))}

	m1 := n.member(1, 1, "-bootstrap")
	n.c.waitLeader(30*time.Second, m1)
	m2 := n.member(2, 2, "-join", m1.addr)
	m3 := n.member(3, 3, "-join", m1.addr)
	n.voters = []*proc{m1, m2, m3}
	obs := n.member(4, 4, "-join", m1.addr, "-role", "observer")
	n.frontends = []*proc{m1, m2, m3, obs}
	n.c.waitLeader(30*time.Second, n.frontends...)
	n.worker = n.member(5, nemesisWorker, "-stale-after", "1s")
	require200(t, call(t, "POST", m2.url("/v1/members"), map[string]any{"id": nemesisWorker, "addr": n.worker.addr, "kind": "worker"}, nil), "add the worker")
	eventually(t, 20*time.Second, "every member alive with its epoch", func() bool {
		var ms []memberView
		if call(t, "GET", obs.url("/v1/members"), nil, &ms) != http.StatusOK {
			return false
		}
		alive := 0
		for _, m := range ms {
			if m.Status == "alive" && m.Epoch != "" {
				alive++
			}
		}
		return alive == len(n.all())
	})

	// One query coordinated by each frontend, its fragment on the worker.
	for _, p := range n.frontends {
		body := map[string]any{"id": "q-" + p.name, "workers": []int{nemesisWorker}, "duration_ms": 600_000}
		eventually(t, 20*time.Second, "a query started on "+p.name, func() bool {
			return call(t, "POST", p.url("/v1/queries"), body, nil) == http.StatusOK
		})
		eventually(t, 10*time.Second, "the fragment of q-"+p.name+" running", func() bool {
			return fragmentState(t, n.worker, "q-"+p.name) == "running"
		})
	}
	before := n.records(m1)

	require200(t, call(t, "PUT", m1.url("/v1/catalog/kv"), map[string]any{"kind": "dir"}, nil), "create /kv")
	n.k = &kvClients{t: t, start: time.Now(), stop: make(chan struct{}), keys: 32, servers: n.frontends}
	n.k.run(8)
	stopClients := func() {
		select {
		case <-n.k.stop:
		default:
			close(n.k.stop)
		}
		n.k.wg.Wait()
	}
	defer stopClients()
	eventually(t, 30*time.Second, "writes acknowledged before the nemesis", func() bool { return n.k.acked.Load() >= 50 })
	t.Logf("cluster up and writing after %v", time.Since(began).Round(time.Millisecond))

	var dead *proc // the member the last scenario has declared dead
	// stable marks the scenarios the leader rides out (raft's pre-vote
	// and check-quorum): it still leads once they heal.
	scenarios := []struct {
		name   string
		stable bool
		run    func(leader *proc)
	}{
		{"a follower isolated", true, func(leader *proc) {
			f := n.follower(leader)
			n.net.cut(names(f), names(n.except(f)...))
			n.hold(nemesisHold)
		}},
		{"a follower isolated while the log is compacted past it, its connections reset", false, func(leader *proc) {
			f := n.follower(leader)
			before, _ := getStatus(t, f)
			n.net.cut(names(f), names(n.except(f)...))
			// The log is compacted up to the image before the newest, so
			// it takes two checkpoints past the follower to cut it off.
			var first, index uint64
			for round := range 2 {
				acked := n.k.acked.Load()
				eventually(t, 10*time.Second, "writes acknowledged without "+f.name, func() bool { return n.k.acked.Load() >= acked+100 })
				for _, p := range n.frontends {
					var res struct {
						Index uint64 `json:"index"`
					}
					if p != f {
						require200(t, call(t, "POST", p.url("/v1/checkpoint"), nil, &res), "checkpoint on "+p.name)
					}
					if p == leader {
						index = res.Index
					}
				}
				if round == 0 {
					first = index
				}
			}
			if first <= before.Applied {
				t.Fatalf("the leader's first checkpoint at %d, not past %s's %d", first, f.name, before.Applied)
			}
			if index < first+10 {
				t.Fatalf("the leader's second checkpoint at %d, within the compaction margin of its first at %d", index, first)
			}
			// Its connections end (the raft messages they held, which
			// carry the entries it misses, are lost); healed, the follower
			// catches up from an image it fetches through the proxies,
			// from its own IP.
			n.net.reset(f.name)
			n.net.heal()
			eventually(t, 30*time.Second, f.name+" restored from an image", func() bool {
				st, ok := getStatus(t, f)
				return ok && st.Image >= index
			})
		}},
		// Last, as it changes a member record: a death is declared, and
		// cancels what it must.
		{"the leader and the worker split from the majority", false, func(leader *proc) {
			minority := []*proc{leader, n.worker}
			n.net.cut(names(minority...), names(n.except(minority...)...))
			n.awaitMajorityLeader(leader)
			n.hold(nemesisHold)
		}},
		{"the leader cut off from its followers, reachable by clients, its connections reset", false, func(leader *proc) {
			n.net.cut(names(leader), names(n.except(leader)...))
			n.awaitMajorityLeader(leader)
			n.hold(nemesisHold)
			n.net.reset(leader.name)
		}},
		{"the leader's traffic dropped one way, out", false, func(leader *proc) {
			n.net.drop(names(leader), names(n.except(leader)...))
			n.awaitMajorityLeader(leader)
			n.hold(nemesisHold)
		}},
		{"the traffic to the leader dropped one way, in", false, func(leader *proc) {
			n.net.drop(names(n.except(leader)...), names(leader))
			n.awaitMajorityLeader(leader)
			n.hold(nemesisHold)
		}},
		{"the leader's traffic to one follower dropped one way", true, func(leader *proc) {
			n.net.drop(names(leader), names(n.follower(leader)))
			n.hold(nemesisHold)
		}},
		{"the worker cut off from the leader until its view is stale", true, func(leader *proc) {
			n.net.cut(names(leader), names(n.worker))
			eventually(t, 10*time.Second, "the worker's view stale", func() bool {
				var st struct {
					Stale bool `json:"stale"`
				}
				return call(t, "GET", n.worker.url("/v1/status"), nil, &st) == http.StatusOK && st.Stale
			})
		}},
		{"the link between the leader and a follower flapping, every link delayed", false, func(leader *proc) {
			const delay = 20 * time.Millisecond
			everyone := names(n.all()...)
			n.net.delay(everyone, everyone, delay)
			flapping := append(cross(names(leader), names(n.follower(leader))), cross(names(n.follower(leader)), names(leader))...)
			for end, up := time.Now().Add(nemesisHold), false; time.Now().Before(end); up = !up {
				if up {
					n.net.set(linkRule{delay: delay}, flapping...)
				} else {
					n.net.set(linkRule{hold: true}, flapping...)
				}
				n.hold(time.Duration(100+n.rng.IntN(300)) * time.Millisecond)
			}
		}},
		{"a follower isolated past the death threshold", true, func(leader *proc) {
			dead = n.follower(leader)
			n.net.cut(names(dead), names(n.except(dead)...))
			eventually(t, 30*time.Second, dead.name+" declared dead", func() bool {
				return memberStatus(t, leader, procID(dead)) == "dead"
			})
		}},
	}
	// METATREE_NEMESIS_ONLY=<substring> runs only the scenarios whose name
	// holds it (and the death scenario, which the checks after the loop
	// need), to loop one scenario cheaply.
	only := os.Getenv("METATREE_NEMESIS_ONLY")
	for i, sc := range scenarios {
		if only != "" && !strings.Contains(sc.name, only) && i != len(scenarios)-1 {
			continue
		}
		leader := n.c.waitLeader(30*time.Second, n.frontends...)
		stalls := metric(t, leader, loopStalls)
		start := time.Now()
		sc.run(leader)
		if after := n.healAndRecover(sc.name); sc.stable && after != leader {
			// The partition leaves the leader a quorum. A follower that
			// still stops hearing it for an election timeout does so
			// because the leader's raft loop took no tick, and so sent no
			// heartbeat, for about that long: on a loaded machine, a loop
			// busy with a returning follower's catch-up traffic when the
			// partition heals can take that long (the leader counts it).
			// A takeover without such a stall is the partition's doing.
			if d := metric(t, leader, loopStalls) - stalls; d > 0 {
				t.Logf("%s: %s took over from %s, whose raft loop stalled meanwhile (%s rose by %v): its followers went without heartbeats for an election timeout, which the partition does not cause",
					sc.name, after.name, leader.name, loopStalls, d)
			} else {
				t.Errorf("%s: %s took over from %s, which could reach a quorum throughout and whose raft loop never stalled", sc.name, after.name, leader.name)
			}
		}
		t.Logf("%s (leader %s): healed and writing again after %v", sc.name, leader.name, time.Since(start).Round(time.Millisecond))
	}

	leader := n.c.waitLeader(30*time.Second, n.frontends...)
	// Back from its death (with a fresh epoch: the one declared dead
	// ended), the member coordinates queries again, once it has replayed
	// its death and return itself (a query it registers before it replays
	// its death is cancelled by it: the registry applies the member events
	// in log order).
	eventually(t, 30*time.Second, dead.name+" alive again", func() bool {
		return memberStatus(t, leader, procID(dead)) == "alive" && memberStatus(t, dead, procID(dead)) == "alive"
	})
	// GET /v1/members answers with the leader's view; that the member
	// replayed its own death shows in its registry, which cancelled the
	// query it coordinated then. Until it replays its return too, it refuses
	// new queries (the loop below sends again).
	eventually(t, 30*time.Second, dead.name+" replayed its own death", func() bool {
		var q queryView
		return call(t, "GET", dead.url("/v1/queries/q-"+dead.name), nil, &q) == http.StatusOK && q.State == "cancelled"
	})
	afterDeath := map[string]any{"id": "q-after-death", "workers": []int{nemesisWorker}, "duration_ms": 600_000}
	// The worker refuses it until a heartbeat tells it the coordinator is
	// back: the coordinator withdraws it and answers 503, and the client
	// sends it again under the same id.
	var refused apiError
	eventually(t, 20*time.Second, "a query started on "+dead.name+" after its death", func() bool {
		var e apiError
		if code := call(t, "POST", dead.url("/v1/queries"), afterDeath, &e); code != http.StatusOK {
			if e != refused {
				t.Logf("POST /v1/queries on %s: %d %+v", dead.name, code, e)
				refused = e
			}
			return false
		}
		return true
	})
	eventually(t, 10*time.Second, "the fragment of q-after-death running", func() bool {
		return fragmentState(t, n.worker, "q-after-death") == "running"
	})
	stopClients()

	// No process exited under the partitions.
	for _, p := range n.c.procs {
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			t.Fatalf("%s exited during the nemesis: %v", p.name, p.err)
		default:
		}
	}

	// Final linearizable reads of every key through every frontend join
	// the history: a lost acknowledged write shows as a read that no order
	// of the writes explains.
	for key := range n.k.keys {
		for i, p := range n.frontends {
			var nv nodeView
			call0 := n.k.now()
			code := call(t, "GET", p.url(fmt.Sprintf("/v1/catalog/kv/k%d?consistency=linearizable", key)), nil, &nv)
			ret := n.k.now()
			if code != http.StatusOK && code != http.StatusNotFound {
				t.Fatalf("final read of k%d through %s: status %d", key, p.name, code)
			}
			v, _ := nv.Attrs["v"].(string)
			n.k.record(porcupine.Operation{ClientId: 100 + i, Input: linearize.KV{Key: fmt.Sprintf("k%d", key)}, Call: call0, Output: v, Return: ret})
		}
	}

	// Convergence: one applied index, one catalog.
	eventually(t, 30*time.Second, "every frontend at one applied index", func() bool {
		var applied []uint64
		for _, p := range n.frontends {
			st, ok := getStatus(t, p)
			if !ok {
				return false
			}
			applied = append(applied, st.Applied)
		}
		return slices.Min(applied) == slices.Max(applied)
	})
	var views []string
	eventually(t, 30*time.Second, "every frontend showing the same catalog", func() bool {
		views = views[:0]
		for _, p := range n.frontends {
			v, ok := catalogView(t, p)
			if !ok {
				return false
			}
			views = append(views, v)
		}
		return slices.Equal(slices.Compact(slices.Clone(views)), views[:1])
	})

	// Cancellation: only for a death the member records show.
	after := n.records(leader)
	declared := map[uint64]bool{}
	for id, r := range before {
		if after[id] != r {
			declared[id] = true
			t.Logf("member %d's record moved from %+v to %+v: declared dead (or restarted) under the nemesis", id, r, after[id])
		}
		if after[id].Epoch != r.Epoch && after[id].Died <= r.Generation {
			t.Errorf("member %d's epoch changed from %s to %s with no death recorded since, yet no process restarted", id, r.Epoch, after[id].Epoch)
		}
	}
	checkCause := func(where, cause string) {
		m := deathCause.FindStringSubmatch(cause)
		if m == nil {
			t.Errorf("%s cancelled with cause %q, which names no death", where, cause)
			return
		}
		id, _ := strconv.ParseUint(m[1], 10, 64)
		if !declared[id] {
			t.Errorf("%s cancelled for the death of member %d (%q), which the member records never show", where, id, cause)
		}
	}
	running := 0
	for _, p := range n.frontends {
		id := "q-" + p.name
		var q queryView
		require200(t, call(t, "GET", p.url("/v1/queries/"+url.PathEscape(id)), nil, &q), "query "+id)
		var frag fragmentView
		for _, f := range fragments(t, n.worker) {
			if f.Query == id {
				frag = f
			}
		}
		if q.State == "cancelled" {
			checkCause("query "+id+" on its coordinator", q.Cause)
		}
		if frag.State == "cancelled" {
			checkCause("the fragment of "+id+" on the worker", frag.Cause)
		}
		if !declared[procID(p)] && !declared[nemesisWorker] {
			if q.State != "running" || frag.State != "running" {
				t.Errorf("query %s: %s on its coordinator (%q), %s on the worker (%q); want both running: neither was declared dead nor restarted",
					id, q.State, q.Cause, frag.State, frag.Cause)
			}
		}
		if q.State == "running" && frag.State == "running" {
			running++
		}
	}
	if running == 0 {
		t.Errorf("no query survived the nemesis; deaths declared: %v", declared)
	}
	if !declared[procID(dead)] {
		t.Errorf("%s was declared dead, yet its member record did not move", dead.name)
	}
	var q queryView
	require200(t, call(t, "GET", dead.url("/v1/queries/q-"+dead.name), nil, &q), "the dead member's query")
	if q.State != "cancelled" || fragmentState(t, n.worker, "q-"+dead.name) != "cancelled" {
		t.Errorf("the query of %s, declared dead: %s on it (%q), %s on the worker; want cancelled on both",
			dead.name, q.State, q.Cause, fragmentState(t, n.worker, "q-"+dead.name))
	}
	require200(t, call(t, "GET", dead.url("/v1/queries/q-after-death"), nil, &q), "the query started after the death")
	if q.State != "running" || fragmentState(t, n.worker, "q-after-death") != "running" {
		t.Errorf("q-after-death: %s on %s (%q), %s on the worker; want running", q.State, dead.name, q.Cause, fragmentState(t, n.worker, "q-after-death"))
	}

	n.k.mu.Lock()
	history := slices.Clone(n.k.history)
	codes := maps.Clone(n.k.codes)
	n.k.mu.Unlock()
	t.Logf("client answers by status (0: none in time): %v", codes)
	for code, count := range codes {
		// A partition makes a request fail for want of a leader or a
		// quorum (503), or time out; nothing else.
		if code != 0 && code != http.StatusOK && code != http.StatusNotFound && code != http.StatusServiceUnavailable {
			t.Errorf("%d client requests answered %d under the nemesis", count, code)
		}
	}
	res, info := porcupine.CheckOperationsVerbose(linearize.KVModel, history, 60*time.Second)
	if res != porcupine.Ok {
		f, err := os.CreateTemp("", "partition-nemesis-*.html")
		if err == nil {
			_ = porcupine.Visualize(linearize.KVModel, info, f)
			f.Close()
		}
		t.Fatalf("history of %d operations (%d puts acknowledged) is %v; visualization in %s", len(history), n.k.acked.Load(), res, f.Name())
	}
	t.Logf("linearizable: %d operations, %d puts acknowledged, %d of unknown outcome; %d of %d queries running; nemesis took %v",
		len(history), n.k.acked.Load(), n.k.failed.Load(), running, len(n.frontends), time.Since(began).Round(time.Millisecond))
}

// memberStatus is member id's status in through's member list ("" when
// unknown).
func memberStatus(t *testing.T, through *proc, id uint64) string {
	var ms []memberView
	if call(t, "GET", through.url("/v1/members"), nil, &ms) != http.StatusOK {
		return ""
	}
	for _, m := range ms {
		if m.ID == id {
			return m.Status
		}
	}
	return ""
}

func fragments(t *testing.T, w *proc) []fragmentView {
	var frags []fragmentView
	require200(t, call(t, "GET", w.url("/v1/fragments"), nil, &frags), "fragments of "+w.name)
	return frags
}
