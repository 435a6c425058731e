package dedupe

import (
	"hash/maphash"

	"github.com/metatree/metatree/journal/internal/envelope"
)

// Window remembers the idempotency keys that reached the log in the last
// window indexes. A copy of a key within the window of the key's previous
// copy is a duplicate: it is skipped, and the window slides to it. The
// state after index N holds the copies in (N-window, N] that were recorded
// (every copy there, applied or skipped, but one that expired), in order.
// Whether a copy past its since's window is recorded depends on the copy
// of its key before it (within the window: a duplicate, recorded; else
// expired, not), which can lie before the window: so the window's entries
// alone do not give the state, and a replica rebuilds it (a restart, an
// image, a shadow checkpoint, a watch resumed from the log) from a state
// recorded earlier, an image's window, and every entry after it
// (journal's dedupeAt); it then decides every later entry exactly as the
// live applier does.
//
// The keys live in two generations of indexes (keyIndex), each a window
// of indexes long: a copy is indexed in the current one, and the one
// before it is dropped whole when the current one is a window old, so
// evicting a copy touches only the order it is in. Each copy's record
// lies beside it in the order, so the records of the evicted copies leave
// with them. An evicted copy (older than floor) is not seen: the
// decisions are those of a window that forgets each copy as it leaves the
// window.
type Window struct {
	window  uint64
	seed    maphash.Seed
	cur     keyIndex // the keys of the copies at curFrom and later
	prev    keyIndex // the generation before cur
	curFrom uint64
	floor   uint64 // the copies before it are evicted
	order   []Key  // every copy, in index order; order[head:] is live
	recs    []Rec  // recs[i]: the key's record as of the copy order[i]
	head    int
	base    uint64 // the sequence number of order[0]; never reused
	hashed  [16]byte
	hashOf  uint64 // the hash of hashed, when hashOK
	hashOK  bool
}

// Rec is what the window knows of a key.
type Rec struct {
	Index   uint64 // the key's latest copy: the window runs from it
	Applied uint64 // the copy that was applied (or the oldest one known)
	Value   any    // the local Apply result, when this process applied it
	Imaged  bool   // known from an image's window only: Value is unknown
}

// Key is one copy of a key in the window, as images record it.
type Key struct {
	Index uint64   `json:"i"`
	Key   [16]byte `json:"k"`
}

// New returns an empty window of window indexes.
func New(window uint64) *Window {
	d := &Window{window: window, seed: maphash.MakeSeed()}
	d.cur.reset(window, 0)
	d.prev.reset(window, 0)
	return d
}

// SetWindow makes window the window of the next decisions. The journal sets
// the cluster's window before it applies a user entry (learnWindow), so no
// decision is made under another.
func (d *Window) SetWindow(window uint64) { d.window = window }

// Verdict is what the applier does with a copy of a user entry.
type Verdict int

const (
	Apply     Verdict = iota // the first copy: applied, recorded
	Duplicate                // within the window of the key's latest copy: skipped, recorded
	Expired                  // past its since's window: skipped, not recorded
)

// Judge decides the copy of env at index, on every replica and in every
// rebuild alike (it depends on the window and the entry alone). A copy
// carrying since (the journal's own re-proposals) expires when it lands
// more than a window after since: every copy of one proposal lands after
// since, so the copies that do not expire lie within one window of each
// other and the first of them is the only one applied, however far apart
// they land. An expired copy is not recorded (it was not applied); its
// proposer, hearing of it, proposes again with a newer since.
func (d *Window) Judge(index uint64, env envelope.Envelope) (Rec, Verdict) {
	return judge(index, env, d.window, d.Seen)
}

// judge is Judge's rule given the window and the lookup of a key's latest
// copy within it.
func judge(index uint64, env envelope.Envelope, window uint64, seen func(uint64, [16]byte) (Rec, bool)) (Rec, Verdict) {
	if r, dup := seen(index, env.Key); dup {
		return r, Duplicate
	}
	if env.Bounded && index > env.Since && index-env.Since > window {
		return Rec{}, Expired
	}
	return Rec{}, Apply
}

// Seen reports the key's latest copy within the window ending at index
// (exclusive), and so whether the copy at index is a duplicate.
func (d *Window) Seen(index uint64, key [16]byte) (Rec, bool) {
	r, ok := d.lookup(key)
	if !ok || r.Index < d.floor || index-r.Index > d.window {
		return Rec{}, false
	}
	return r, true
}

// lookup returns the record of key's latest live copy.
func (d *Window) lookup(key [16]byte) (Rec, bool) {
	h, c := d.hash(key), d.copies()
	if _, seq, ok := d.cur.find(h, key, c); ok {
		return d.recs[seq-d.base], true
	}
	if _, seq, ok := d.prev.find(h, key, c); ok {
		return d.recs[seq-d.base], true
	}
	return Rec{}, false
}

// hash returns key's hash, kept for the key last hashed: the applier
// looks a key up (Judge) and then records it (Record).
func (d *Window) hash(key [16]byte) uint64 {
	if key != d.hashed || !d.hashOK {
		d.hashed, d.hashOf, d.hashOK = key, hashKey(d.seed, key), true
	}
	return d.hashOf
}

// copies is the order as the indexes read it.
func (d *Window) copies() copies {
	return copies{order: d.order, base: d.base, live: d.base + uint64(d.head)}
}

// push appends the copy of key at index with its record, and indexes it
// in the current generation.
func (d *Window) push(index uint64, key [16]byte, r Rec) {
	seq := d.base + uint64(len(d.order))
	d.order = append(d.order, Key{Index: index, Key: key})
	d.recs = append(d.recs, r)
	d.cur.put(d.seed, d.hash(key), key, seq, d.copies())
}

// Add records the copy of key at index: applied with result value, or, when
// seen, a duplicate (which keeps the applied copy's index and value).
func (d *Window) Add(index uint64, key [16]byte, value any) {
	prev, dup := d.Seen(index, key)
	v := Apply
	if dup {
		v = Duplicate
	}
	d.Record(index, key, prev, v, value)
}

// Record is Add of a copy Judge has just decided (prev and v are what it
// returned; v is not Expired), without looking the key up again: the
// applier's path, once per user entry on every replica.
func (d *Window) Record(index uint64, key [16]byte, prev Rec, v Verdict, value any) {
	r := Rec{Index: index, Applied: index, Value: value}
	if v == Duplicate {
		r = prev
		r.Index = index
	}
	if index >= d.curFrom && index-d.curFrom >= d.window {
		d.rotate(index)
	}
	d.push(index, key, r)
	d.Evict(index)
}

// rotate starts a new generation at index: the generation before the
// current one holds only copies more than a window before index, which
// the Evict of index forgets, so it is dropped whole (and its table
// reused).
func (d *Window) rotate(index uint64) {
	d.prev, d.cur = d.cur, d.prev
	d.cur.reset(d.window, d.base+uint64(len(d.order)))
	d.curFrom = index
}

// Evict forgets the copies that fall out of the window ending at index.
func (d *Window) Evict(index uint64) {
	if index > d.window {
		d.floor = max(d.floor, index-d.window)
	}
	// An evicted copy is left as it is until the reclaim below overwrites
	// it (its record's value, for the garbage collector, too): a write to
	// it now would touch a line long out of the caches, once an entry.
	for d.head < len(d.order) && d.order[d.head].Index < d.floor {
		d.head++
	}
	// Reclaim the evicted front once it is half the slice (amortised O(1)).
	if d.head > 1024 && d.head*2 >= len(d.order) {
		n := copy(d.order, d.order[d.head:])
		copy(d.recs, d.recs[d.head:])
		clear(d.recs[n:])
		d.order, d.recs = d.order[:n], d.recs[:n]
		d.base += uint64(d.head)
		d.head = 0
	}
}

// Live returns the keys in the window, oldest first.
func (d *Window) Live() []Key { return d.order[d.head:] }

// Reset replaces the state with the copies keys lists (an image's window,
// in index order).
func (d *Window) Reset(keys []Key) {
	d.base += uint64(len(d.order))
	clear(d.recs) // their values, for the garbage collector
	d.order, d.recs, d.head = d.order[:0], d.recs[:0], 0
	d.cur.reset(d.window, d.base)
	d.prev.reset(d.window, d.base)
	d.curFrom, d.floor = 0, 0
	if len(keys) > 0 {
		d.curFrom = keys[0].Index
	}
	for _, k := range keys {
		r, ok := d.lookup(k.Key)
		d.push(k.Index, k.Key, imaged(r, ok, k))
	}
}

// imaged is the record of k's key once an image's list of copies reaches
// k, given the key's record so far (ok: it has one): the first copy listed
// is the applied one (its value unknown here), a later one a duplicate
// the window slid to.
func imaged(r Rec, ok bool, k Key) Rec {
	if !ok {
		return Rec{Index: k.Index, Applied: k.Index, Imaged: true}
	}
	r.Index = k.Index
	return r
}
