package clock

import "time"

// Clock is a time source.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTicker returns a channel that delivers ticks every d, and a func
	// that stops them.
	NewTicker(d time.Duration) (c <-chan time.Time, stop func())
	// NewTimer returns a channel that delivers the time once, after d, and
	// a func that stops the timer (false when it already fired or stopped).
	NewTimer(d time.Duration) (c <-chan time.Time, stop func() bool)
	// AfterFunc calls f on its own goroutine after d; stop cancels the call
	// (false when f already started or the call was already cancelled).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// Real is the clock of package time.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// NewTicker wraps time.NewTicker.
func (Real) NewTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// NewTimer wraps time.NewTimer.
func (Real) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// AfterFunc wraps time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
