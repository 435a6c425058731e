package journal

import (
	"errors"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal/internal/membership"
)

func TestConfigValidation(t *testing.T) {
	sm := &orderSM{}
	base := func() Config {
		return Config{ID: 1, Dir: t.TempDir(), Addr: "x:1", StateMachine: sm, Bootstrap: true}
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.ID = 0 }, "ID must be non-zero"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir is required"},
		{"no addr", func(c *Config) { c.Addr = "" }, "Addr is required"},
		{"no state machine", func(c *Config) { c.StateMachine = nil }, "StateMachine is required"},
		{"bootstrap and join", func(c *Config) { c.Join = "y:2" }, "exclusive"},
		{"observer bootstrap", func(c *Config) { c.Role = Observer }, "must be a Follower"},
		{"ticks", func(c *Config) { c.ElectionTicks, c.HeartbeatTicks = 2, 2 }, "ElectionTicks"},
		{"inflight", func(c *Config) { c.MaxInflightBytes = 10 }, "MaxInflightBytes"},
		{"stale", func(c *Config) { c.StaleAfter = time.Millisecond }, "StaleAfter"},
		{"margin", func(c *Config) { c.CompactMargin, c.DedupeWindow = 10, 20 }, "CompactMargin"},
		{"scheme", func(c *Config) { c.Scheme = "ftp" }, "Scheme"},
		{"entry larger than a frame", func(c *Config) { c.MaxEntryBytes = 8 << 20 }, "MaxEntryBytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base()
			tc.mod(&cfg)
			cfg.fillDefaults()
			err := cfg.validate()
			require.ErrorContains(t, err, tc.want)
		})
	}
	cfg := base()
	cfg.fillDefaults()
	require.NoError(t, cfg.validate())
	require.Equal(t, 100*time.Millisecond, cfg.TickInterval)
	require.Equal(t, 10, cfg.ElectionTicks)
	require.Equal(t, 30*time.Second, cfg.StaleAfter)
	require.Equal(t, uint64(20_000), cfg.CompactMargin)
}

// A membership version of a newer format is not malformed: it halts the
// applier rather than being skipped (journal/internal/envelope tests the
// envelope's kinds alike).
func TestMembershipCodec(t *testing.T) {
	_, err := membership.Decode([]byte(`{"v":99}`))
	require.ErrorIs(t, err, ErrUnknownVersion)
	_, err = membership.Decode([]byte(`nope`))
	require.ErrorIs(t, err, ErrMalformed)
}

// A proposer woken by fail (the loop or the applier stopped) leaves the
// waiter map with its answer: the applier resolving the same key afterwards
// (the rest of its batch) does not block on the full channel, and neither
// does Close, which waits for the applier.
func TestFailThenResolveDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := &Journal{log: slog.New(slog.DiscardHandler)}
		j.mu.waiters = map[[16]byte]*waiter{}
		j.mu.appliedCh = make(chan struct{})
		key := [16]byte{4, 2}
		var w waiter
		j.addWaiter(key, &w)
		j.fail(errors.New("disk gone"))
		resolved := make(chan struct{})
		go func() {
			j.resolve(key, applyResult{index: 7})
			close(resolved)
		}()
		synctest.Wait()
		select {
		case <-resolved:
		default:
			t.Fatal("resolve blocked on a waiter fail already answered")
		}
		r := <-w.c
		require.ErrorIs(t, r.err, ErrClosed)
		require.ErrorContains(t, r.err, "disk gone")
		require.Zero(t, j.nwaiters.Load())
	})
}
