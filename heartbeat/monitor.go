package heartbeat

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/monitorstats"
	"github.com/metatree/metatree/heartbeat/internal/wire"
	"github.com/metatree/metatree/heartbeat/responder"
)

// monitor is the leader's prober. It runs on every frontend and is active
// only while the journal says this frontend leads.
type monitor struct {
	m     *Membership
	cfg   *Config
	stats monitorCounters

	mu struct {
		sync.Mutex
		leading    bool
		term       uint64
		claim      uint64 // catalog index of our claim record (0: none yet)
		graceUntil time.Time
		round      uint64
		pauses     uint64 // local pauses detected so far
		peers      map[uint64]*peer
		roundStart time.Time
		pending    int // probes of the current round still in flight
	}
}

// peer is the leader's in-memory bookkeeping for one member. It is never
// journaled: only transitions are.
type peer struct {
	misses   int
	lastOK   time.Time
	inflight bool
	// answered is when the member last answered, version what it
	// reported (for Answers).
	answered time.Time
	version  string
	// older is an epoch that started before the recorded one and
	// answered once (see probe): recorded if it answers again.
	older epoch.Epoch
	// journaling is set while a transition of the member waits for its
	// commit (see journal).
	journaling bool
}

type monitorCounters struct {
	rounds, probes, misses, transitions, bytesSent, bytesRecv atomic.Uint64
	lastRound                                                 atomic.Int64 // ns
}

func init() {
	monitorstats.Of = func(m any) monitorstats.Stats { return m.(*Membership).monitorStats() }
}

// monitorStats returns the monitor's counters (for heartbeattest.StatsOf).
func (m *Membership) monitorStats() monitorstats.Stats {
	s := &m.mon.stats
	m.mon.mu.Lock()
	leading, term := m.mon.mu.leading, m.mon.mu.term
	m.mon.mu.Unlock()
	return monitorstats.Stats{Leading: leading, Term: term, Rounds: s.rounds.Load(), Probes: s.probes.Load(), Misses: s.misses.Load(),
		Transitions: s.transitions.Load(), BytesSent: s.bytesSent.Load(), BytesRecv: s.bytesRecv.Load(), LastRound: time.Duration(s.lastRound.Load())}
}

func newMonitor(m *Membership) *monitor {
	mo := &monitor{m: m, cfg: &m.cfg}
	mo.mu.peers = make(map[uint64]*peer)
	return mo
}

func (mo *monitor) run(ctx context.Context) {
	var probes sync.WaitGroup
	defer probes.Wait()
	tick, stop := mo.cfg.Clock.NewTicker(mo.cfg.Interval)
	defer stop()
	last := mo.cfg.Clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		now := mo.cfg.Clock.Now()
		gap := now.Sub(last)
		last = now
		mo.tick(ctx, &probes, now, gap)
	}
}

// tick runs once per interval.
func (mo *monitor) tick(ctx context.Context, probes *sync.WaitGroup, now time.Time, gap time.Duration) {
	term, leader := mo.cfg.Journal.LeaderTerm()
	mo.mu.Lock()
	if !leader {
		if mo.mu.leading {
			mo.m.log.Info("heartbeat: monitor stops: not the leader", "term", term)
		}
		mo.mu.leading = false
		mo.mu.claim = 0
		mo.mu.Unlock()
		return
	}
	if !mo.mu.leading || term != mo.mu.term {
		// Newly elected: no convictions before the grace period ends, and
		// misses count from now.
		mo.mu.leading, mo.mu.term, mo.mu.claim = true, term, 0
		mo.mu.graceUntil = now.Add(mo.cfg.Grace)
		for _, p := range mo.mu.peers { // keep inflight: an old probe may still be out
			p.misses = 0
			p.lastOK = now
		}
		mo.m.log.Info("heartbeat: monitor starts", "term", term, "grace", mo.cfg.Grace)
	} else if gap > mo.cfg.Interval+mo.cfg.Interval/2 {
		// Our own pause (GC, scheduling, a stalled disk): misses that fell
		// in it say nothing about the members. Start counting again.
		mo.mu.pauses++
		for _, p := range mo.mu.peers {
			p.misses = 0
			p.lastOK = now
		}
		mo.m.log.Warn("heartbeat: local pause, not convicting anyone for it", "gap", gap)
	}
	claim := mo.mu.claim
	mo.mu.Unlock()

	if claim == 0 {
		mo.m.selfEpoch() // the claim names the epoch this leader runs with
		cctx, cancel := context.WithCancel(ctx)
		stopTimer := mo.cfg.Clock.AfterFunc(mo.cfg.ProposeTimeout, cancel)
		idx, err := mo.m.claim(cctx, term)
		stopTimer()
		cancel()
		if err != nil {
			mo.m.log.Warn("heartbeat: monitor claim failed", "term", term, "err", err)
			return
		}
		mo.mu.Lock()
		if !mo.mu.leading || mo.mu.term != term {
			mo.mu.Unlock()
			return
		}
		mo.mu.claim = idx
		mo.mu.Unlock()
	}
	mo.round(ctx, probes, term)
}

// round heartbeats every member once, in parallel.
func (mo *monitor) round(ctx context.Context, probes *sync.WaitGroup, term uint64) {
	members := mo.m.Members()
	version, fronts := mo.m.frontendList()
	now := mo.cfg.Clock.Now()
	mo.mu.Lock()
	mo.mu.round++
	round, pauses := mo.mu.round, mo.mu.pauses
	seen := make(map[uint64]bool, len(members))
	var todo []Member
	for _, r := range members {
		seen[r.ID] = true
		p := mo.mu.peers[r.ID]
		if p == nil {
			p = &peer{lastOK: now}
			mo.mu.peers[r.ID] = p
		}
		if r.ID == mo.cfg.ID || p.inflight {
			continue // ourselves: no probe; in flight: still within its timeout
		}
		p.inflight = true
		todo = append(todo, r)
	}
	for id := range mo.mu.peers {
		if !seen[id] {
			delete(mo.mu.peers, id)
		}
	}
	mo.mu.roundStart = now
	mo.mu.pending += len(todo)
	mo.mu.Unlock()
	mo.stats.rounds.Add(1)

	// Ourselves: the leader answers its own heartbeat.
	if self, ok := mo.m.Member(mo.cfg.ID); ok {
		if next, typ := decide(self, mo.m.selfEpoch()); next != nil {
			probes.Go(func() { mo.journal(ctx, term, self, next, typ) })
		}
	}
	// The body is the same for every member but for its id: encode it once.
	var replaced []string
	if mo.cfg.Replaced != nil {
		replaced = mo.cfg.Replaced()
	}
	common, err := json.Marshal(responder.Request{Cluster: mo.cfg.Cluster, Replaced: replaced, Leader: mo.cfg.ID, Term: term, Round: round, Version: version, Frontends: fronts})
	if err != nil {
		mo.m.log.Error("heartbeat: encode heartbeat", "err", err)
		common = nil
	}
	for _, r := range todo {
		probes.Go(func() { mo.probe(ctx, term, pauses, common, r) })
	}
}

// probe heartbeats one member and acts on the outcome.
func (mo *monitor) probe(ctx context.Context, term, pauses uint64, common []byte, r Member) {
	start := mo.cfg.Clock.Now()
	got, err := mo.send(ctx, r, term, common)
	now := mo.cfg.Clock.Now()
	mo.stats.probes.Add(1)
	if err == nil {
		mo.m.metrics.rtt.Observe(now.Sub(start).Seconds())
	}

	mo.mu.Lock()
	p := mo.mu.peers[r.ID]
	if p != nil {
		p.inflight = false
	}
	if mo.mu.pending--; mo.mu.pending == 0 {
		mo.stats.lastRound.Store(int64(now.Sub(mo.mu.roundStart)))
		mo.m.noteRound(now.Sub(mo.mu.roundStart))
	}
	if p == nil || !mo.mu.leading || mo.mu.term != term || ctx.Err() != nil {
		mo.mu.Unlock()
		return
	}
	// Decide on the freshest record replayed, not the round's snapshot.
	cur, ok := mo.m.Member(r.ID)
	if !ok {
		mo.mu.Unlock()
		return
	}
	var next *Member
	var typ epoch.EventType
	switch {
	case errors.Is(err, wire.ErrLowerTerm):
		// The member has seen a newer leader: this leader is deposed. Not a miss.
		mo.m.log.Warn("heartbeat: member saw a higher term", "member", r.ID, "term", term)
	case err != nil:
		if mo.mu.pauses != pauses || now.Sub(start) > mo.cfg.Timeout+mo.cfg.Interval/2 {
			break // our own pause ate the deadline
		}
		p.misses++
		mo.stats.misses.Add(1)
		if p.misses >= mo.cfg.DeadAfter && cur.Status != StatusDead && !now.Before(mo.mu.graceUntil) &&
			now.Sub(p.lastOK) >= time.Duration(mo.cfg.DeadAfter)*mo.cfg.Interval {
			d := cur
			d.Status = StatusDead
			d.Died = cur.Generation + 1 // the generation journal gives it
			next, typ = &d, epoch.Dead
			mo.m.log.Info("heartbeat: member missed heartbeats", "member", r.ID, "misses", p.misses, "err", err)
		}
	case got != cur.Epoch && got.StartedBefore(cur.Epoch) && p.older != got:
		// A process that started before the recorded one answered: the
		// late answer of a process since replaced, which must not bring
		// its epoch back, or a restart whose clock stepped back, which
		// answers again at the next round and is recorded then.
		p.misses = 0
		p.lastOK = now
		p.older = got
	default:
		p.misses = 0
		p.lastOK = now
		p.older = epoch.Epoch{}
		next, typ = decide(cur, got)
	}
	mo.mu.Unlock()
	if next != nil {
		mo.journal(ctx, term, cur, next, typ)
	}
}

// decide returns the record after a member answered with epoch, or nil if
// nothing changed.
//
// A member declared dead that answers with the epoch it was declared dead
// with changes nothing: the log recorded that epoch's end (its owned nodes
// went, its queries were cancelled), and a record alive with it again
// would let heartbeat.Fence and OwnerOf on that epoch hold again, so the
// dead incarnation could write. The monitor tells such a member that its
// epoch ended (Request.Ended); its Responder draws a fresh epoch and
// answers with it, which is journaled here as a restart. The member works
// again under an epoch that never ended, and no record ever shows an
// ended epoch alive, on any replica, whatever leader journals it. A
// member whose Responder does not know Request.Ended (an older version)
// answers with the ended epoch on and stays dead until its process
// restarts: safety over its return.
func decide(cur Member, ep epoch.Epoch) (*Member, epoch.EventType) {
	next := cur
	next.Status = StatusAlive
	next.Epoch = ep
	switch {
	case cur.Status == StatusDead && cur.Epoch == ep:
		return nil, 0
	case cur.Epoch.IsZero():
		return &next, epoch.Alive
	case cur.Epoch != ep:
		return &next, epoch.Restarted
	}
	return nil, 0
}

// journal proposes one transition, fenced by our claim and by the record's
// last change. One transition of a member is in flight at a time: while
// one waits for its commit, the rounds decide nothing new for that member
// (any other would be fenced by the same record's change), and the round
// after it decides again from the replayed record.
func (mo *monitor) journal(ctx context.Context, term uint64, cur Member, next *Member, typ epoch.EventType) {
	mo.mu.Lock()
	claim := mo.mu.claim
	ok := mo.mu.leading && mo.mu.term == term && claim != 0
	p := mo.mu.peers[cur.ID]
	if p != nil && p.journaling {
		ok = false
	}
	if ok && p != nil {
		p.journaling = true
	}
	mo.mu.Unlock()
	if !ok {
		return
	}
	if p != nil {
		defer func() {
			mo.mu.Lock()
			p.journaling = false
			mo.mu.Unlock()
		}()
	}
	next.Generation = cur.Generation + 1
	if next.Epoch != cur.Epoch {
		next.EpochGeneration = next.Generation
	}
	next.Term = term
	next.Since = mo.cfg.Clock.Now()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := mo.cfg.Clock.AfterFunc(mo.cfg.ProposeTimeout, cancel)
	defer stop()
	_, err := mo.m.propose(pctx,
		catalog.Op{Type: catalog.OpCheck, Path: MonitorPath, Cond: catalog.Cond{Modified: claim}},
		catalog.Op{Type: catalog.OpUpdate, Path: MemberPath(cur.ID), Kind: MemberKind, Set: next.stateAttrs(), Cond: catalog.Cond{Modified: cur.Modified}},
	)
	var opErr *catalog.OpError
	switch {
	case err == nil:
		mo.stats.transitions.Add(1)
		mo.m.log.Info("heartbeat: transition journaled", "member", cur.ID, "type", typ.String(), "epoch", next.Epoch.String(), "generation", next.Generation)
	case errors.As(err, &opErr) && opErr.Op == 0:
		// A newer leader claimed the monitor: this one is fenced. Re-claiming
		// will see its term and stop.
		mo.m.log.Warn("heartbeat: transition fenced by a newer leader", "member", cur.ID, "err", err)
		mo.mu.Lock()
		if mo.mu.claim == claim {
			mo.mu.claim = 0
		}
		mo.mu.Unlock()
	default:
		// The record changed under us (stale view) or the proposal failed:
		// the next round decides again from the replayed record.
		mo.m.log.Info("heartbeat: transition not journaled", "member", cur.ID, "type", typ.String(), "err", err)
	}
}

// send posts one heartbeat with the per-request deadline and returns the
// member's epoch.
func (mo *monitor) send(ctx context.Context, r Member, term uint64, common []byte) (epoch.Epoch, error) {
	if len(common) < 2 {
		return epoch.Epoch{}, fmt.Errorf("%w: no heartbeat body", ErrInvalid)
	}
	// common is a JSON object; add this member's id before its closing brace.
	body := make([]byte, 0, len(common)+80)
	body = append(body, common[:len(common)-1]...)
	body = append(body, `,"member":`...)
	body = strconv.AppendUint(body, r.ID, 10)
	if r.Status == StatusDead && !r.Epoch.IsZero() {
		// Tell it that its epoch ended (Request.Ended): a member still
		// running with it answers with a fresh one.
		body = append(body, `,"ended":"`...)
		body = append(body, r.Epoch.String()...)
		body = append(body, '"')
	}
	body = append(body, '}')
	mo.stats.bytesSent.Add(uint64(len(body)))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := mo.cfg.Clock.AfterFunc(mo.cfg.Timeout, cancel)
	defer stop()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, mo.cfg.Endpoint(r), bytes.NewReader(body))
	if err != nil {
		return epoch.Epoch{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if mo.cfg.Token != "" {
		hreq.Header.Set(responder.TokenHeader, mo.cfg.Token)
	}
	resp, err := mo.cfg.Client.Do(hreq)
	if err != nil {
		return epoch.Epoch{}, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, wire.MaxBody))
	if err != nil {
		return epoch.Epoch{}, err
	}
	mo.stats.bytesRecv.Add(uint64(len(data)))
	switch resp.StatusCode {
	case http.StatusOK:
		var out responder.Response
		if err := wire.DecodeJSON(bytes.NewReader(data), &out); err != nil {
			return epoch.Epoch{}, err
		}
		if out.Member != r.ID || out.Epoch.IsZero() || out.Epoch.Temporary() {
			return epoch.Epoch{}, fmt.Errorf("%w: member %d answered as %d with epoch %q", ErrMalformed, r.ID, out.Member, out.Epoch)
		}
		mo.noteAnswer(r.ID, mo.cfg.Clock.Now(), out.Version)
		return out.Epoch, nil
	case http.StatusConflict:
		var rej wire.Rejection
		if json.Unmarshal(data, &rej) == nil && rej.Term > term {
			return epoch.Epoch{}, fmt.Errorf("%w: member %d saw term %d", wire.ErrLowerTerm, r.ID, rej.Term)
		}
		return epoch.Epoch{}, fmt.Errorf("heartbeat: member %d refused: %s", r.ID, bytes.TrimSpace(data))
	default:
		return epoch.Epoch{}, fmt.Errorf("heartbeat: member %d answered %s", r.ID, resp.Status)
	}
}

// frontendList reads the frontends' published epochs from the catalog
// itself, not from the replayed view (which may trail it by a few events),
// with a version that is a lower bound of what the list reflects: the
// catalog index read before the scan. A member does not go back to a list
// with a lower version while lists at the higher one keep coming, so a
// frontend added after that index is not taken for removed.
func (m *Membership) frontendList() (uint64, []responder.FrontendEpoch) {
	version := m.cfg.Tree.Index()
	var fronts []responder.FrontendEpoch
	for _, n := range m.cfg.Tree.OfKind(MemberKind) {
		if n.Attrs[attrKind].Str() != "frontend" {
			continue
		}
		r, err := memberFromNode(&n)
		if err != nil {
			continue
		}
		f := responder.FrontendEpoch{ID: r.ID, Gen: r.Generation, Epoch: r.PublishedEpoch(), Dead: r.Status == StatusDead, Died: r.Died, Since: n.Created, Recorded: r.EpochGeneration}
		if f.Dead {
			f.Ended = r.Epoch
		}
		fronts = append(fronts, f)
	}
	slices.SortFunc(fronts, func(a, b responder.FrontendEpoch) int { return cmp.Compare(a.ID, b.ID) })
	return version, fronts
}

// selfEpoch returns this frontend's current epoch for its own heartbeat
// answer: if its record shows that epoch declared dead (by an earlier
// leader), the epoch ended, and the process draws a fresh one first, as
// its Responder does when told so.
func (m *Membership) selfEpoch() epoch.Epoch {
	if self, ok := m.Member(m.cfg.ID); ok && self.Status == StatusDead {
		return m.responder.Renew(self.Epoch)
	}
	return m.responder.Epoch()
}

// claim journals this leader's claim of the monitor for term and returns
// the catalog index of the claim (transitions check it is still the last).
func (m *Membership) claim(ctx context.Context, term uint64) (uint64, error) {
	if err := m.ensureLayout(ctx); err != nil {
		return 0, err
	}
	cur, ok := m.cfg.Tree.Get(MonitorPath)
	if !ok {
		return 0, fmt.Errorf("heartbeat: %s missing", MonitorPath)
	}
	if t := uint64(cur.Attrs[attrTerm].Int64()); t > term {
		return 0, fmt.Errorf("%w: claim of term %d, ours is %d", ErrFenced, t, term)
	}
	res, err := m.propose(ctx, catalog.Op{Type: catalog.OpUpdate, Path: MonitorPath, Set: map[string]catalog.Value{
		attrLeader: catalog.Int(int64(m.cfg.ID)),
		attrTerm:   catalog.Int(int64(term)),
		attrEpoch:  catalog.String(m.Epoch().String()),
	}, Cond: catalog.Cond{Modified: cur.Modified}})
	if err != nil {
		return 0, err
	}
	return res.Index, nil
}
