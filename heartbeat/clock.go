package heartbeat

import "time"

// Clock is the time source: a subset of tailscale's tstime.Clock. Nil in a
// Config means the real clock. Tests run under testing/synctest with the
// real clock, or inject their own.
type Clock interface {
	Now() time.Time
	// NewTicker returns a channel delivering ticks every d and a stop func.
	NewTicker(d time.Duration) (<-chan time.Time, func())
	// AfterFunc calls f on its own goroutine after d; stop cancels it.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

func (realClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
