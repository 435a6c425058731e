package heartbeattest

import (
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/internal/wire"
)

// TemporaryEpoch returns the temporary epoch the cluster publishes for a
// member whose last real epoch was last and which was declared dead at
// generation gen: the NewEpoch of the Dead event a frontend or a worker
// delivers for that death.
func TemporaryEpoch(last epoch.Epoch, gen uint64) epoch.Epoch {
	return wire.TemporaryEpoch(last, gen)
}
