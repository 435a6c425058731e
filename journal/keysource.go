package journal

import (
	"crypto/rand"
	"sync"
)

// keyBatch is how many idempotency keys one read of crypto/rand fills.
const keyBatch = 64

// keySource hands out the random idempotency keys of Journal.Propose:
// version 4 UUIDs (122 random bits, as uuid.New makes them), so a key is
// unique across frontends and restarts. It reads crypto/rand keyBatch
// keys at a time into a buffer it owns, so a key costs no allocation and
// a read of the system's random source serves many proposals; the buffer
// is not shared with any other user of randomness (uuid.EnableRandPool
// would set process-wide state).
// The zero value is ready: its first key reads the buffer full.
type keySource struct {
	mu   sync.Mutex
	buf  [keyBatch * 16]byte
	left int // the unused bytes at the end of buf
}

// next returns a fresh random key. Each byte of the buffer goes out once.
func (k *keySource) next() [16]byte {
	var key [16]byte
	k.mu.Lock()
	if k.left == 0 {
		// crypto/rand.Read never fails: the runtime aborts the program
		// when the system's source does.
		_, _ = rand.Read(k.buf[:])
		k.left = len(k.buf)
	}
	copy(key[:], k.buf[len(k.buf)-k.left:])
	k.left -= 16
	k.mu.Unlock()
	key[6] = key[6]&0x0f | 0x40 // version 4
	key[8] = key[8]&0x3f | 0x80 // variant RFC 4122
	return key
}
