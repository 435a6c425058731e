// Package diskguard keeps a journal's data dir from filling: a [Guard]
// measures the free space of the dir's filesystem, refuses new writes
// (errs.ErrNoSpace) while it is under the reserve, and keeps an emergency
// ballast file ([BallastName]) that it releases when the disk is nearly
// full and writes again once there is room. [Alarm] is the cluster-wide
// rule: writes are refused while a voter's no-space alarm is raised.
//
// A Guard is safe for concurrent use and starts no goroutine: the journal
// calls [Guard.Check] from its watchSpace goroutine, every
// Config.SpaceCheckInterval, and reads [Guard.Refuse] on every proposal.
// A filesystem that cannot report its usage (an in-memory one) turns the
// guard off.
package diskguard
