package journal

import "time"

// monotonicClock is a Config.Clock that reports elapsed time apart from its
// wall time, as a real machine's monotonic clock does: tests' clocks
// implement it to make the wall clock jump while time runs on evenly.
type monotonicClock interface {
	// Monotonic returns the time elapsed since an arbitrary fixed origin.
	Monotonic() time.Duration
}

// stampClock is the clock the staleness guard reads, on the leader (the
// timestamps it journals) and on every other node (the age of the last
// one replayed): the wall time at Open plus the monotonic time elapsed
// since. A step of the wall clock after Open (NTP, an operator, a VM
// resumed) moves neither the leader's timestamps nor a node's idea of
// their age, so it can neither make healthy nodes stale nor hide a stale
// one; the monotonic clock is only slewed, never stepped. What remains is
// the skew between the machines' wall clocks as each process started,
// which must stay well within StaleAfter.
type stampClock struct {
	clock    Clock
	wall     time.Time     // clock.Now() at Open
	monoBase time.Duration // Monotonic() at Open, for a monotonicClock
}

func newStampClock(c Clock) stampClock {
	s := stampClock{clock: c, wall: c.Now()}
	if m, ok := c.(monotonicClock); ok {
		s.monoBase = m.Monotonic()
	}
	return s
}

// now returns the wall time at Open advanced by the monotonic time since.
// For the real clock, Now().Sub(wall) is monotonic already (both readings
// carry the monotonic clock).
func (s stampClock) now() time.Time {
	if m, ok := s.clock.(monotonicClock); ok {
		return s.wall.Add(m.Monotonic() - s.monoBase)
	}
	return s.wall.Add(s.clock.Now().Sub(s.wall))
}
