package responder

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
	"github.com/metatree/metatree/internal/clock"
)

// Config configures a Responder.
type Config struct {
	// ID is this member's id. Heartbeats addressed to another id (a reused
	// address) are refused. Required.
	ID uint64
	// Epoch is this process's epoch at start (epoch.New). Required. It
	// changes once the log records its end (Responder.Epoch).
	Epoch epoch.Epoch
	// Cluster, when set, refuses heartbeats from another cluster.
	Cluster string
	// Token, when set, is required of every heartbeat (header
	// TokenHeader, compared in constant time): the cluster's token, which
	// the leader's heartbeat.Config.Token sends. Default: none.
	Token string
	// PeerCerts requires every heartbeat to arrive over TLS with a client
	// certificate, verified by the serving host against the cluster's CA,
	// that names the heartbeat's leader (URI SAN metatree://node/<id>).
	PeerCerts bool
	// OnEvent receives frontend events (epoch.Added, Restarted, Dead,
	// Alive, Removed) derived from the leader's frontend lists, in order, one call
	// at a time. It runs on the request's goroutine before the response is
	// written, so it must be quick (cancel.Registry.Apply is). Nil: none.
	OnEvent func(epoch.Event)
	// StaleAfter is how long without a heartbeat from any leader before
	// Stale reports true, and before a heartbeat of a lower term than the
	// highest seen is accepted again. Default DefaultStaleAfter.
	StaleAfter time.Duration
	// Version is the software version reported in every answer (the
	// leader shows it in its member view). Default: DefaultVersion().
	Version string
	// Clock is the time source. Default: the real clock.
	Clock Clock
	// Logger. Default: discard.
	Logger *slog.Logger
}

// DefaultStaleAfter is Config.StaleAfter's default.
const DefaultStaleAfter = 10 * time.Second

// Responder answers the leader's heartbeats on a member (worker or
// frontend): it is an http.Handler to mount at Path. It answers with its
// current epoch (a fresh one from the heartbeat that says the log ended
// the one before: Request.Ended), refuses heartbeats from a lower raft
// term than it has seen while that term's sender keeps beating (checked
// before taking any lock; once no heartbeat came for StaleAfter, a lower
// term is accepted again, so a higher term that only a forger or a
// vanished leader sent cannot fence the real leader off for ever), moves
// to a cluster that replaced the one it follows at its first heartbeat and
// refuses the replaced one's for good (a restore: see Request.Replaced),
// and tracks the frontends' epochs from
// the leader's lists, emitting an event when a frontend restarted, was
// declared dead, came back or was removed.
//
// It never treats silence as evidence: with no heartbeat from any leader
// (Stale), it emits nothing and so cancels nothing. Safe for concurrent
// use; it owns no goroutines.
type Responder struct {
	cfg   Config
	clock Clock
	log   *slog.Logger
	term  atomic.Uint64 // the highest term seen from the cluster followed (handle)
	// followed is the cluster of the last heartbeat accepted (nil: none).
	followed atomic.Pointer[string]
	// replaced maps each cluster that a cluster this member heard from
	// replaced (Request.Replaced) to the replacing one: their heartbeats
	// are refused for good. Copied on write.
	replaced atomic.Pointer[map[string]string]
	// beat is when the last heartbeat was accepted, as one plus the
	// nanoseconds since origin (0: never): a term whose sender is silent
	// for StaleAfter no longer fences lower ones off. It is measured from
	// origin, a reading of the Clock at New, and not kept as a
	// wall time (UnixNano), so that a difference of two readings uses the
	// monotonic clock and a step of the wall clock is no silence.
	beat   atomic.Int64
	origin time.Time
	// refused counts heartbeats refused for their credential.
	refused atomic.Uint64
	// epoch is this process's current epoch: Config.Epoch until
	// a heartbeat says the log recorded its end (Renew).
	epoch atomic.Pointer[epoch.Epoch]

	mu struct {
		sync.Mutex
		lastBeat time.Time
		leader   uint64
		version  uint64    // catalog index of the frontend list held
		listAt   time.Time // when that list was applied
		// abandoned is the highest list version given up for an older one
		// (see handle): events from lists up to it carry Index 0, which
		// consumers always apply, since the events they applied from the
		// abandoned lists carry higher indexes.
		abandoned uint64
		frontends map[uint64]*frontendState
	}
}

type frontendState struct {
	FrontendEpoch
	lastReal epoch.Epoch // the epoch before it was declared dead
}

// New returns a Responder for cfg.
func New(cfg Config) (*Responder, error) {
	if cfg.ID == 0 {
		return nil, fmt.Errorf("%w: responder needs a member id", ErrInvalid)
	}
	if cfg.Epoch.IsZero() || cfg.Epoch.Temporary() {
		return nil, fmt.Errorf("%w: responder needs a real epoch (epoch.New)", ErrInvalid)
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.Version == "" {
		cfg.Version = DefaultVersion()
	}
	r := &Responder{cfg: cfg, clock: cfg.Clock, log: cfg.Logger}
	if r.clock == nil {
		r.clock = clock.Real{}
	}
	r.origin = r.clock.Now()
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.mu.frontends = make(map[uint64]*frontendState)
	none := map[string]string{}
	r.replaced.Store(&none)
	e := cfg.Epoch
	r.epoch.Store(&e)
	return r, nil
}

// Epoch returns this process's current epoch: Config.Epoch, until
// a heartbeat from the leader says that the log recorded its end (the
// member was declared dead: Request.Ended); the process then draws a
// fresh epoch, answers with it, and the monitor records a restart. A host
// reads it for every write it fences or owns by its epoch
// (heartbeat.Fence, heartbeat.OwnerOf), never once at start: the ended epoch's
// fences are refused for good.
func (r *Responder) Epoch() epoch.Epoch { return *r.epoch.Load() }

// Renew draws a fresh epoch if the current one is ended, and returns the
// current epoch. The ended epoch never comes back: its owned nodes went
// and its fences are refused once the log recorded its end, and the work
// tied to it (queries, fragments) was cancelled then. A Responder calls it
// for the heartbeat that names its epoch ended (Request.Ended); a frontend
// (package heartbeat) calls it when it reads its own record declared dead.
func (r *Responder) Renew(ended epoch.Epoch) epoch.Epoch {
	for {
		cur := r.epoch.Load()
		if ended.IsZero() || *cur != ended {
			return *cur
		}
		fresh := epoch.New()
		if r.epoch.CompareAndSwap(cur, &fresh) {
			r.log.Warn("heartbeat: the log recorded this process's epoch as ended (declared dead): drawing a fresh one", "member", r.cfg.ID, "ended", ended.String(), "epoch", fresh.String())
			return fresh
		}
	}
}

// Term returns the highest raft term seen in a heartbeat.
func (r *Responder) Term() uint64 { return r.term.Load() }

// Stale reports whether no leader heartbeat arrived within StaleAfter (or
// none ever did). A stale member's view of the frontends may be old; it
// cancels nothing on its own, and a host may stop admitting new fragments.
func (r *Responder) Stale() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.lastBeat.IsZero() || r.clock.Now().Sub(r.mu.lastBeat) > r.cfg.StaleAfter
}

// Frontend returns the published epoch of frontend id as last heard.
func (r *Responder) Frontend(id uint64) (FrontendEpoch, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f, ok := r.mu.frontends[id]
	if !ok {
		return FrontendEpoch{}, false
	}
	return f.FrontendEpoch, true
}

// Frontends returns every frontend's published epoch as last heard, by id.
func (r *Responder) Frontends() []FrontendEpoch {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]FrontendEpoch, 0, len(r.mu.frontends))
	for _, f := range r.mu.frontends {
		out = append(out, f.FrontendEpoch)
	}
	slices.SortFunc(out, func(a, b FrontendEpoch) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// ServeHTTP answers one heartbeat: 200 with a Response; 403 without the
// credential the config requires (token or certificate), which changes
// nothing here; 409 when refused (lower term, other cluster, other
// member); 400 for a malformed body; 413 when it is too large; 405 for a
// method other than POST.
func (r *Responder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		wire.WriteJSON(w, http.StatusMethodNotAllowed, wire.Rejection{Error: "heartbeat: POST only"})
		return
	}
	var hb Request
	if err := wire.DecodeJSON(http.MaxBytesReader(w, req.Body, wire.MaxBody), &hb); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			wire.WriteJSON(w, http.StatusRequestEntityTooLarge, wire.Rejection{Error: "heartbeat: body over the limit"})
			return
		}
		wire.WriteJSON(w, http.StatusBadRequest, wire.Rejection{Error: err.Error()})
		return
	}
	if err := r.authenticate(req, &hb); err != nil {
		wire.WriteJSON(w, http.StatusForbidden, wire.Rejection{Error: err.Error()})
		return
	}
	status, body := r.handle(&hb)
	wire.WriteJSON(w, status, body)
}

// handle processes a decoded heartbeat and returns the HTTP answer.
func (r *Responder) handle(hb *Request) (int, any) {
	if r.cfg.Cluster != "" && hb.Cluster != r.cfg.Cluster {
		return http.StatusConflict, wire.Rejection{Error: fmt.Sprintf("heartbeat: cluster %q, this member belongs to %q", hb.Cluster, r.cfg.Cluster)}
	}
	if hb.Member != r.cfg.ID {
		return http.StatusConflict, wire.Rejection{Error: fmt.Sprintf("heartbeat: for member %d, this is member %d", hb.Member, r.cfg.ID)}
	}
	// Fence deposed leaders and replaced clusters before taking any lock
	// (apache/doris#27914: invalid heartbeats holding the lock delayed
	// valid ones). Only the locked section below changes the term.
	now := r.clock.Now()
	if by, ok := r.replacedBy(hb.Cluster); ok {
		return http.StatusConflict, wire.Rejection{Error: fmt.Sprintf("heartbeat: cluster %q was replaced by cluster %q (a restore): refused", hb.Cluster, by)}
	}
	moving := r.moving(hb)
	if seen := r.term.Load(); !moving && hb.Term < seen && !r.lapsed(now) {
		return http.StatusConflict, wire.Rejection{Error: wire.ErrLowerTerm.Error(), Term: seen}
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if by, ok := r.replacedBy(hb.Cluster); ok { // replaced meanwhile
		return http.StatusConflict, wire.Rejection{Error: fmt.Sprintf("heartbeat: cluster %q was replaced by cluster %q (a restore): refused", hb.Cluster, by)}
	}
	switch seen := r.term.Load(); {
	case r.moving(hb):
		// The cluster this member follows was replaced by hb's (a restore
		// of its backup): its terms and list versions say nothing of the
		// new cluster's. Follow the new one from this heartbeat on; the
		// events of its lists up to the last version held carry Index 0,
		// as for an abandoned list (see below).
		r.log.Warn("heartbeat: following the cluster that replaced this member's", "cluster", hb.Cluster, "replaced", *r.followed.Load(), "term", hb.Term, "leader", hb.Leader)
		r.term.Store(hb.Term)
		r.mu.abandoned = max(r.mu.abandoned, r.mu.version)
		r.mu.version = 0
	case hb.Term > seen:
		r.term.Store(hb.Term)
	case hb.Term < seen:
		if !r.lapsed(now) { // a newer leader got in meanwhile
			return http.StatusConflict, wire.Rejection{Error: wire.ErrLowerTerm.Error(), Term: seen}
		}
		// No heartbeat of the higher term for StaleAfter: whoever sent it
		// (a leader since gone, or a forger) no longer fences this one off.
		r.log.Warn("heartbeat: accepting a lower term: the higher one went silent", "term", hb.Term, "silent", seen, "leader", hb.Leader)
		r.term.Store(hb.Term)
	}
	r.follow(hb)
	r.mu.lastBeat = now
	r.beat.Store(int64(now.Sub(r.origin)) + 1)
	r.mu.leader = hb.Leader
	// A list older than the one held is ignored (a new leader may lag the
	// old one), but only while lists at the held version keep coming: a
	// version that no list has carried for StaleAfter (its leader is gone,
	// or a forger sent it) no longer holds the leader's lists off.
	if hb.Version >= r.mu.version || now.Sub(r.mu.listAt) > r.cfg.StaleAfter {
		if hb.Version < r.mu.version {
			r.log.Warn("heartbeat: going back to an older frontend list: the newer one stopped coming", "version", hb.Version, "abandoned", r.mu.version, "leader", hb.Leader)
			r.mu.abandoned = max(r.mu.abandoned, r.mu.version)
		}
		// Deliver under the lock: one list at a time, in order.
		for _, ev := range r.diffLocked(hb) {
			r.log.Info("heartbeat: frontend event", "event", ev.String())
			if r.cfg.OnEvent != nil {
				r.cfg.OnEvent(ev)
			}
		}
		r.mu.version = hb.Version
		r.mu.listAt = now
	}
	return http.StatusOK, Response{Member: r.cfg.ID, Epoch: r.Renew(hb.Ended), Term: r.term.Load(), Version: r.cfg.Version}
}

// moving reports whether hb comes from a cluster that replaced the one
// this member follows (Request.Replaced names it).
func (r *Responder) moving(hb *Request) bool {
	f := r.followed.Load()
	return f != nil && *f != hb.Cluster && slices.Contains(hb.Replaced, *f)
}

// replacedBy reports whether cluster was replaced by a cluster this member
// heard from, and by which.
func (r *Responder) replacedBy(cluster string) (string, bool) {
	by, ok := (*r.replaced.Load())[cluster]
	return by, ok
}

// follow records hb's cluster as the one this member follows, and the
// clusters it replaced as refused for good. Called under r.mu.
func (r *Responder) follow(hb *Request) {
	if f := r.followed.Load(); f == nil || *f != hb.Cluster {
		c := hb.Cluster
		r.followed.Store(&c)
	}
	old := *r.replaced.Load()
	var next map[string]string
	for _, c := range hb.Replaced {
		if _, ok := old[c]; ok || c == hb.Cluster {
			continue
		}
		if next == nil {
			next = maps.Clone(old)
		}
		next[c] = hb.Cluster
	}
	if next != nil {
		r.replaced.Store(&next)
	}
}

// lapsed reports whether no heartbeat was accepted within StaleAfter of
// now (or none ever was).
func (r *Responder) lapsed(now time.Time) bool {
	last := r.beat.Load()
	return last == 0 || now.Sub(r.origin)-time.Duration(last-1) > r.cfg.StaleAfter
}

// diffLocked applies a frontend list and returns the events it implies.
func (r *Responder) diffLocked(hb *Request) []epoch.Event {
	var evs []epoch.Event
	index := hb.Version
	if index <= r.mu.abandoned {
		index = 0
	}
	ev := func(id uint64, t epoch.EventType, old, new epoch.Epoch, gen uint64) {
		evs = append(evs, epoch.Event{Index: index, Node: id, Kind: epoch.KindFrontend, Type: t, OldEpoch: old, NewEpoch: new, Generation: gen})
	}
	listed := make(map[uint64]bool, len(hb.Frontends))
	for _, f := range hb.Frontends {
		if f.ID == 0 || listed[f.ID] {
			continue
		}
		listed[f.ID] = true
		p, ok := r.mu.frontends[f.ID]
		if !ok {
			st := &frontendState{FrontendEpoch: f}
			if !f.Dead {
				st.lastReal = f.Epoch
				ev(f.ID, epoch.Added, epoch.Epoch{}, f.Epoch, f.Gen)
			} else { // one event per frontend and list: first seen dead
				ev(f.ID, epoch.Dead, epoch.Epoch{}, f.Epoch, f.Gen)
			}
			r.mu.frontends[f.ID] = st
			continue
		}
		if f.Since != p.Since && f.Since != 0 && p.Since != 0 {
			if f.Since < p.Since {
				continue // a view of the incarnation before
			}
			// Removed and added again under this id since the last list:
			// a new incarnation, whose generations restart. The old
			// incarnation's epoch stays current until the new one is
			// known, so that the switch below reports Restarted (old ->
			// new), cancelling the old epoch's queries and no others, or,
			// for the same process added back, a death in between.
			p.Gen = 0
			p.Since = f.Since
		}
		if p.Since == 0 {
			p.Since = f.Since // from an older leader's lists: adopt
		}
		if f.Gen <= p.Gen { // an older or the same view of this frontend
			continue
		}
		if f.Dead && !f.Ended.IsZero() && f.Ended != p.lastReal && p.Gen < f.Recorded && f.Recorded < f.Gen {
			// The epoch that died was recorded after the last list held:
			// its record first (Index 0: its list was never seen), then its
			// death, as package heartbeat derives them from a record, so
			// that the death names that epoch and not only the one before.
			recorded := FrontendEpoch{ID: f.ID, Gen: f.Recorded, Epoch: f.Ended, Died: p.Died, Since: f.Since, Recorded: f.Recorded}
			evs = p.advance(recorded, evs, 0)
		}
		evs = p.advance(f, evs, index)
	}
	var gone []uint64
	for id := range r.mu.frontends {
		if !listed[id] {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		p := r.mu.frontends[id]
		ev(id, epoch.Removed, p.Epoch, epoch.Epoch{}, p.Gen)
		delete(r.mu.frontends, id)
	}
	return evs
}

// advance moves p to the frontend's view f (a later generation), appending
// the events the change implies, at index, to evs.
func (p *frontendState) advance(f FrontendEpoch, evs []epoch.Event, index uint64) []epoch.Event {
	ev := func(t epoch.EventType, old, new epoch.Epoch, gen uint64) {
		evs = append(evs, epoch.Event{Index: index, Node: f.ID, Kind: epoch.KindFrontend, Type: t, OldEpoch: old, NewEpoch: new, Generation: gen})
	}
	// Lists may skip transitions (this member missed heartbeats, or a
	// new leader's first list): as package heartbeat does on a frontend,
	// a later generation with the same epoch means the frontend was
	// declared dead and came back in between, delivered as Dead
	// (Index 0: its list was never seen) then Alive; from no epoch, a
	// generation past its first answer means it restarted or died.
	switch {
	case f.Dead && (!p.Dead || f.Epoch != p.Epoch):
		ev(epoch.Dead, p.Epoch, f.Epoch, f.Gen)
	case f.Dead || f.Epoch.IsZero():
	case !p.Dead && !p.Epoch.IsZero() && f.Died > p.Gen:
		// Declared dead after the list held, and back since: with a
		// fresh epoch (Restarted), or, from an older leader's log, the
		// same one (Alive).
		// The Dead at the generation after the list held, as package
		// heartbeat does: the transitions skipped show on the
		// return's event.
		tmp := wire.TemporaryEpoch(p.Epoch, f.Died)
		ev(epoch.Dead, p.Epoch, tmp, p.Gen+1)
		evs[len(evs)-1].Index = 0
		if f.Epoch == p.Epoch {
			ev(epoch.Alive, tmp, f.Epoch, f.Gen)
		} else {
			ev(epoch.Restarted, tmp, f.Epoch, f.Gen)
		}
	case !p.Dead && f.Epoch == p.Epoch:
		gen := p.Gen + 1
		tmp := wire.TemporaryEpoch(p.Epoch, gen)
		ev(epoch.Dead, p.Epoch, tmp, gen)
		evs[len(evs)-1].Index = 0
		ev(epoch.Alive, tmp, f.Epoch, f.Gen)
	case !p.Dead && p.Epoch.IsZero() && f.Gen > p.Gen+1:
		ev(epoch.Restarted, p.Epoch, f.Epoch, f.Gen)
	case p.Dead && f.Epoch == p.lastReal:
		ev(epoch.Alive, p.Epoch, f.Epoch, f.Gen)
	case f.Epoch != p.Epoch:
		if p.Epoch.IsZero() {
			ev(epoch.Alive, p.Epoch, f.Epoch, f.Gen)
		} else {
			ev(epoch.Restarted, p.Epoch, f.Epoch, f.Gen)
		}
	}
	p.FrontendEpoch = f
	if !f.Dead && !f.Epoch.IsZero() {
		p.lastReal = f.Epoch
	}
	return evs
}
