package clock

import (
	"sync/atomic"
	"time"
	"unsafe"
)

// Stepped is the real clock with a wall clock that an operator, NTP or a
// resumed VM can step (Step): its Now reads the wall time moved by every
// step so far and the monotonic time unmoved, as time.Now does on a
// machine whose clock was set. A difference of two readings of one
// process (Sub, Since, Until) therefore ignores the steps, and what reads
// the wall time alone (Unix, UnixNano, Format, a time sent to another
// process or journaled) sees them. Its timers, tickers and AfterFunc run
// on the monotonic clock, unmoved. Safe for concurrent use.
//
// Inside a testing/synctest bubble time.Now carries no monotonic
// reading, and a difference of two readings is one of their wall
// readings: there a step moves every reading, as on a machine without a
// monotonic clock.
type Stepped struct {
	off atomic.Int64 // the wall clock's offset, nanoseconds
}

// Step moves the wall clock by d (negative: back).
func (s *Stepped) Step(d time.Duration) { s.off.Add(int64(d)) }

// Offset returns the sum of the steps so far.
func (s *Stepped) Offset() time.Duration { return time.Duration(s.off.Load()) }

// Now returns time.Now with the wall reading moved by Offset and the
// monotonic reading kept.
func (s *Stepped) Now() time.Time { return stepWall(time.Now(), s.Offset()) }

// NewTicker wraps time.NewTicker (monotonic).
func (*Stepped) NewTicker(d time.Duration) (<-chan time.Time, func()) { return Real{}.NewTicker(d) }

// NewTimer wraps time.NewTimer (monotonic).
func (*Stepped) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	return Real{}.NewTimer(d)
}

// AfterFunc wraps time.AfterFunc (monotonic).
func (*Stepped) AfterFunc(d time.Duration, f func()) func() bool { return Real{}.AfterFunc(d, f) }

// timeLayout mirrors time.Time's fields: wall holds, with the
// hasMonotonic bit set, the wall clock's seconds and nanoseconds, and ext
// the monotonic reading. Package time offers no way to move one reading
// without the other; TestSteppedMovesTheWallReadingOnly checks the
// layout against the time package of the toolchain.
type timeLayout struct {
	wall uint64
	ext  int64
	loc  *time.Location
}

const hasMonotonic = 1 << 63

// stepWall returns t with its wall reading moved by d and its monotonic
// reading (if any) kept.
func stepWall(t time.Time, d time.Duration) time.Time {
	u := t.Add(d) // moves both readings, or drops the monotonic one
	tl, ul := (*timeLayout)(unsafe.Pointer(&t)), (*timeLayout)(unsafe.Pointer(&u))
	if tl.wall&hasMonotonic != 0 && ul.wall&hasMonotonic != 0 {
		ul.ext = tl.ext
	}
	return u
}
