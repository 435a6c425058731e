package ratelimit

import (
	"sync"
	"time"
)

// Every is the interval between two warnings of one kind.
const Every = 10 * time.Second

// Log rate-limits one kind of warning. The zero value is ready; it is safe
// for concurrent use.
type Log struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether a warning may be logged at now, and how many were
// suppressed since the last one.
func (l *Log) Allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < Every {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}
