package journal

import "github.com/metatree/metatree/journal/internal/membership"

// The dedupe window decides which copies of a key apply (dedupe.Window.Judge), so
// it is replicated state: every replica, and every rebuild of the state (a
// restart, an image install, a shadow checkpoint's replay, metactl check's
// replay, a restore, a forced new cluster), uses the same one. It is the
// cluster's, recorded in the membership (membership.Window): the member
// that bootstraps the cluster says its Config.DedupeWindow in the
// cluster's first conf change, and every membership record after it, and
// so every image and every restore from one, carries it. A member learns
// it from its loaded membership or image at Open, from the first conf
// change when it replays the log from its start, or from an installed
// image's membership, each before it applies a user entry the window
// decides. A cluster bootstrapped by a version that did not record it
// keeps using each member's own Config.DedupeWindow.

// dedupeWindow returns the cluster's dedupe window, or Config.DedupeWindow
// while the node knows of none. Safe for concurrent use.
func (j *Journal) dedupeWindow() uint64 {
	if w := j.window.Load(); w != 0 {
		return w
	}
	return j.cfg.DedupeWindow
}

// learnWindow takes the cluster's dedupe window from m, when m records
// one, for the applier's dedupe state and every rebuild. It runs before
// the goroutines start or on the applier, as the applier passes m's index.
func (j *Journal) learnWindow(m *membership.Membership) {
	if m == nil || m.Window == 0 {
		return
	}
	j.window.Store(m.Window)
	j.applier.dedupe.SetWindow(m.Window)
}

// compactMargin is the least number of entries the log keeps behind the
// newest image: Config.CompactMargin, or the cluster's dedupe window when
// it is wider (a rebuild of the window from the log needs its entries;
// Config.validate checks the margin against the local window only).
func (j *Journal) compactMargin() uint64 {
	return max(j.cfg.CompactMargin, j.dedupeWindow())
}
