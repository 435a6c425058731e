package journal

import (
	"context"
	"time"
)

// untilStop returns a context derived from parent that also ends when the
// journal stops, and after timeout if it is positive, for the journal's
// own background proposals (membership records, the cluster version, the
// no-space alarm). The goroutine that watches the stop ends with the
// context, so the caller's deferred cancel releases it.
func (j *Journal) untilStop(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if timeout > 0 {
		var cancelTimeout context.CancelFunc
		ctx, cancelTimeout = context.WithTimeout(ctx, timeout)
		inner := cancel
		cancel = func() { cancelTimeout(); inner() }
	}
	go func() {
		select {
		case <-j.stopc:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
