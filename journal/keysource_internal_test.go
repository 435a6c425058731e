package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Keys from one source differ across more than one buffer fill, are
// version 4 UUIDs, and cost no allocation.
func TestKeySourceKeys(t *testing.T) {
	var k keySource
	seen := map[[16]byte]bool{}
	for range 3 * keyBatch {
		key := k.next()
		require.False(t, seen[key], "key %x handed out twice", key)
		seen[key] = true
		require.Equal(t, byte(0x40), key[6]&0xf0, "version nibble of %x", key)
		require.Equal(t, byte(0x80), key[8]&0xc0, "variant bits of %x", key)
	}
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = k.next() }))
}
