package wire

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/metatree/metatree/heartbeat/epoch"
)

// TemporaryEpoch returns the temporary epoch published for a member whose
// last real epoch was last and which was declared dead at generation gen.
// It is a pure function of journaled data, so every frontend and every
// leader computes the same one, and a worker that missed the list naming
// the death derives the one the frontends publish: a leader change never
// makes a dead member look as if it restarted again. It never equals a
// real epoch (epoch.Epoch.Temporary reports true).
func TemporaryEpoch(last epoch.Epoch, gen uint64) epoch.Epoch {
	var buf [24]byte
	copy(buf[:16], last[:])
	binary.BigEndian.PutUint64(buf[16:], gen)
	sum := sha256.Sum256(buf[:])
	var e epoch.Epoch
	copy(e[:], sum[:16])
	e[6] = e[6]&0x0f | 0x80 // version 8: "custom", never produced by epoch.New
	e[8] = e[8]&0x3f | 0x80 // RFC 4122 variant
	return e
}
