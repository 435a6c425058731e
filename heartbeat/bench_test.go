package heartbeat_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/heartbeattest"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/internal/fakejournal"
	"github.com/metatree/metatree/journal"
)

// switchable is a member's HTTP server whose process can be swapped
// (restart) or hung (death) under it.
type switchable struct {
	h    atomic.Pointer[http.Handler]
	hung atomic.Bool
}

func (s *switchable) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.hung.Load() { // a hung or powered-off machine: no answer at all
		_, _ = io.Copy(io.Discard, r.Body) // lets the server notice the client hanging up
		<-r.Context().Done()
		return
	}
	(*s.h.Load()).ServeHTTP(w, r)
}

func (s *switchable) set(h http.Handler) { s.h.Store(&h) }

// hbJournal adapts *journal.Journal to heartbeat.Journal, as a host does.
type hbJournal struct{ j *journal.Journal }

func (a hbJournal) Propose(ctx context.Context, data []byte) (uint64, any, error) {
	return a.j.Propose(ctx, data)
}

func (a hbJournal) LeaderTerm() (uint64, bool) { st := a.j.Status(); return st.Term, st.IsLeader() }

type loopback struct {
	j       *journal.Journal // nil: the journal is faked in process
	tr      *http.Transport
	frags   map[uint64]*cancel.Registry // each worker's fragment registry
	log     *fakejournal.Log
	tree    *catalog.Tree
	ms      *heartbeat.Membership
	reg     *cancel.Registry
	servers map[uint64]*httptest.Server
	members map[uint64]*switchable
}

// newLoopback starts one frontend (the leader, id 1) and workers 2..n as
// real HTTP servers on 127.0.0.1, with the journal faked in process (so the
// figures exclude raft's commit latency).
const followerID = 1000_000

func newLoopback(b *testing.B, workers int, interval, timeout time.Duration, coordinator, pebble bool) *loopback {
	l := &loopback{tree: catalog.New(), reg: cancel.New(cancel.Config{}), servers: map[uint64]*httptest.Server{}, members: map[uint64]*switchable{}}
	l.log = fakejournal.New()
	l.log.Attach(1, l.tree)
	l.log.SetLease(1, 1, true)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	tr.MaxIdleConns = 4 * (workers + 1)
	l.tr = tr
	var err error
	var jr heartbeat.Journal = l.log.Replica(1)
	if pebble {
		// A real single-node journal: Pebble on disk, fsync on every Ready.
		l.j, err = journal.Open(context.Background(), journal.Config{ID: 1, Dir: b.TempDir(), Addr: "127.0.0.1:1",
			Bootstrap: true, StateMachine: l.tree, TickInterval: 10 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		jr = hbJournal{l.j}
	}
	front := &switchable{}
	l.ms, err = heartbeat.New(heartbeat.Config{ID: 1, Epoch: epoch.New(), Tree: l.tree, Journal: jr,
		Client: &http.Client{Transport: tr}, Interval: interval, Timeout: timeout, OnEvent: func(ev epoch.Event) { l.reg.Apply(ev) }})
	if err != nil {
		b.Fatal(err)
	}
	front.set(l.ms.Handler())
	l.members[1] = front
	l.frags = map[uint64]*cancel.Registry{}
	for id := uint64(2); id <= uint64(workers+1); id++ {
		s := &switchable{}
		reg := cancel.New(cancel.Config{})
		l.frags[id] = reg
		s.set(newResponder(b, id, reg))
		l.members[id] = s
	}
	if coordinator {
		// A second frontend (a follower coordinating queries): only its
		// heartbeat answers matter here, so a Responder stands for it.
		s := &switchable{}
		s.set(newResponder(b, followerID, nil))
		l.members[followerID] = s
	}
	ctx := context.Background()
	for id, s := range l.members {
		srv := httptest.NewServer(s)
		l.servers[id] = srv
		kind := epoch.KindWorker
		if id == 1 || id == followerID {
			kind = epoch.KindFrontend
		}
		if err := l.ms.Add(ctx, heartbeat.Member{ID: id, Addr: strings.TrimPrefix(srv.URL, "http://"), Kind: kind}); err != nil {
			b.Fatal(err)
		}
	}
	// Wait until every member's epoch is journaled.
	for deadline := time.Now().Add(60 * time.Second); ; {
		ms := l.ms.Members()
		ok := len(ms) == len(l.members)
		for _, m := range ms {
			ok = ok && !m.Epoch.IsZero() && m.Status == heartbeat.StatusAlive
		}
		if ok {
			return l
		}
		if time.Now().After(deadline) {
			n := 0
			for _, m := range ms {
				if m.Epoch.IsZero() || m.Status != heartbeat.StatusAlive {
					n++
				}
			}
			b.Fatalf("%d of %d members never answered (%+v)", n, len(ms), heartbeattest.StatsOf(l.ms))
		}
		time.Sleep(interval / 4)
	}
}

func waitDone(b *testing.B, q *cancel.Query, what string) {
	select {
	case <-q.Context().Done():
	case <-time.After(10 * time.Second):
		b.Fatalf("%s: query not cancelled after 10 s", what)
	}
}

func newResponder(b *testing.B, id uint64, reg *cancel.Registry) *responder.Responder {
	cfg := responder.Config{ID: id, Epoch: epoch.New()}
	if reg != nil {
		cfg.OnEvent = func(ev epoch.Event) { reg.Apply(ev) }
	}
	r, err := responder.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

func (l *loopback) close() {
	l.ms.Close()
	l.reg.Close()
	for _, r := range l.frags {
		r.Close()
	}
	if l.j != nil {
		l.j.Close()
	}
	l.tr.CloseIdleConnections()
	for _, s := range l.servers {
		s.CloseClientConnections()
		s.Close()
	}
}

// waitAlive waits until member id is journaled alive with epoch e.
func (l *loopback) waitAlive(b *testing.B, id uint64, e epoch.Epoch) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if m, _ := l.ms.Member(id); m.Status == heartbeat.StatusAlive && m.Epoch == e {
			return
		}
	}
	b.Fatalf("member %d never came back", id)
}

// BenchmarkDetect measures, over real HTTP on loopback with a 50 ms
// interval, the time from a worker's restart (new epoch) and from its death
// (hung: no answer) to the cancellation of a query on it, in intervals; and
// from a coordinating frontend's restart to the cancellation of its
// fragment on a worker (journaled, then published in the next heartbeat).
func BenchmarkDetect(b *testing.B) {
	for _, j := range []string{"fake", "pebble"} {
		b.Run("journal="+j, func(b *testing.B) { benchmarkDetect(b, j == "pebble") })
	}
}

func benchmarkDetect(b *testing.B, pebble bool) {
	const interval = 50 * time.Millisecond
	l := newLoopback(b, 3, interval, 0, true, pebble)
	defer l.close()
	var restartSum, deathSum, restartMax, deathMax, coordSum, coordMax float64
	victim := uint64(2)
	for b.Loop() {
		// Restart: a new process with a new epoch answers at the same address.
		m, _ := l.ms.Member(victim)
		q, err := l.reg.Register(context.Background(), cancel.Member{Node: 1}, []cancel.Member{{Node: victim, Epoch: m.Epoch}})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(rand.N(interval)) // land anywhere in an interval
		r := newResponder(b, victim, l.frags[victim])
		start := time.Now()
		l.members[victim].set(r)
		waitDone(b, q, "restart")
		d := float64(time.Since(start)) / float64(interval)
		restartSum += d
		restartMax = max(restartMax, d)
		q.Finish()
		l.waitAlive(b, victim, r.Epoch())

		// Death: the process hangs.
		q, err = l.reg.Register(context.Background(), cancel.Member{Node: 1}, []cancel.Member{{Node: victim, Epoch: r.Epoch()}})
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		l.members[victim].hung.Store(true)
		waitDone(b, q, "death")
		d = float64(time.Since(start)) / float64(interval)
		deathSum += d
		deathMax = max(deathMax, d)
		q.Finish()
		l.members[victim].hung.Store(false)
		l.waitAlive(b, victim, r.Epoch())

		// Coordinator restart: a fragment on worker 3 from the follower
		// frontend; the follower restarts; the worker learns it from the
		// leader's next frontend list.
		fm, _ := l.ms.Member(followerID)
		frag, err := l.frags[3].RegisterFragment(context.Background(), cancel.Member{Node: followerID, Epoch: fm.Epoch})
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(rand.N(interval))
		nf := newResponder(b, followerID, nil)
		start = time.Now()
		l.members[followerID].set(nf)
		waitDone(b, frag, "coordinator restart")
		d = float64(time.Since(start)) / float64(interval)
		coordSum += d
		coordMax = max(coordMax, d)
		frag.Finish()
	}
	n := float64(b.N)
	b.ReportMetric(restartSum/n, "restart-intervals")
	b.ReportMetric(restartMax, "restart-intervals-max")
	b.ReportMetric(deathSum/n, "death-intervals")
	b.ReportMetric(deathMax, "death-intervals-max")
	b.ReportMetric(coordSum/n, "coordinator-restart-intervals")
	b.ReportMetric(coordMax, "coordinator-restart-intervals-max")
}

// BenchmarkHeartbeatRound measures one leader round to 1,000 members over
// real HTTP on loopback (each its own server): the time from the round's
// start until the last answer is in, and the bytes sent per member.
func BenchmarkHeartbeatRound(b *testing.B) {
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("members=%d", n), func(b *testing.B) {
			// A long timeout: this 2-core machine also runs all 1,000
			// members' servers, and the figure wanted is the round's time.
			const interval = 2 * time.Second
			l := newLoopback(b, n-1, interval, interval*3/4, false, false)
			defer l.close()
			var roundSum time.Duration
			st0 := heartbeattest.StatsOf(l.ms)
			for b.Loop() {
				start := heartbeattest.StatsOf(l.ms)
				for heartbeattest.StatsOf(l.ms).Probes < start.Probes+uint64(n-1) {
					time.Sleep(interval / 20)
				}
				roundSum += heartbeattest.StatsOf(l.ms).LastRound
			}
			st := heartbeattest.StatsOf(l.ms)
			probes := float64(st.Probes - st0.Probes)
			b.ReportMetric(float64(roundSum.Microseconds())/1000/float64(b.N), "round-ms")
			b.ReportMetric(float64(st.BytesSent-st0.BytesSent)/probes, "req-bytes/member")
			b.ReportMetric(float64(st.BytesRecv-st0.BytesRecv)/probes, "resp-bytes/member")
			b.ReportMetric(float64(st.Misses-st0.Misses), "misses")
		})
	}
}
