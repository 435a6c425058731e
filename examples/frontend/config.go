package frontend

import (
	"log/slog"

	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// WithDefaults returns a copy of c in which every zero tunable holds its
// default: the configuration Start runs with. The tunables the frontend
// hands to a part take that part's default (journal.Config.WithDefaults,
// heartbeat.Config.WithDefaults, image.CheckpointerConfig.WithDefaults),
// so each default lives in one place. Required fields (ID, Dir, Addr) and
// the credentials stay as they are, and so do Listen (empty binds Addr and
// leaves the source of outgoing connections to the kernel) and Role
// (unset: follower on a join, the data dir's on a restart); nothing is
// validated.
func (c Config) WithDefaults() Config {
	j := journal.Config{StaleAfter: c.StaleAfter, CompactMargin: c.CompactMargin,
		PromoteMaxLag: c.PromoteMaxLag, ReserveBytes: c.ReserveBytes}.WithDefaults()
	c.StaleAfter, c.CompactMargin, c.PromoteMaxLag, c.ReserveBytes = j.StaleAfter, j.CompactMargin, j.PromoteMaxLag, j.ReserveBytes
	h := heartbeat.Config{Interval: c.HeartbeatInterval, DeadAfter: c.DeadAfter}.WithDefaults()
	c.HeartbeatInterval, c.DeadAfter = h.Interval, h.DeadAfter
	k := image.CheckpointerConfig{Threshold: c.CheckpointEntries, Interval: c.CheckpointInterval}.WithDefaults()
	c.CheckpointEntries, c.CheckpointInterval = k.Threshold, k.Interval
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}
