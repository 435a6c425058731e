package envelope

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/errs"
)

func TestEnvelopeCodec(t *testing.T) {
	key := [16]byte{7}
	env, err := Decode(EncodeUser(key, []byte("abc")))
	require.NoError(t, err)
	require.Equal(t, KindUser, env.Kind)
	require.Equal(t, key, env.Key)
	require.Equal(t, "abc", string(env.Data))
	env, err = Decode(EncodeUserSince(key, 99, []byte("abc")))
	require.NoError(t, err)
	require.Equal(t, KindUser, env.Kind)
	require.Equal(t, key, env.Key)
	require.Equal(t, uint64(99), env.Since)
	require.Equal(t, "abc", string(env.Data))
	env, err = Decode(EncodeUserSince(key, 0, nil))
	require.NoError(t, err)
	require.True(t, env.Bounded, "since 0 (a node that knows no commit yet) still bounds the copies")
	env, err = Decode(EncodeTimestamp(42))
	require.NoError(t, err)
	require.Equal(t, int64(42), env.TS)
	for _, bad := range [][]byte{nil, {KindUser, 1, 2}, {KindTimestamp, 1}, {KindUserSince, 1}, {KindVersion, 0, 0, 0, 0}, {KindVersion, 2}} {
		_, err := Decode(bad)
		require.ErrorIs(t, err, errs.ErrMalformed, "%v", bad)
	}
	_, err = Decode([]byte{9})
	require.ErrorIs(t, err, errs.ErrUnknownVersion, "a kind of a newer format is not malformed")
}
