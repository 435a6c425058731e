// Package cancel cancels queries whose coordinator or workers restarted,
// died or were removed, with a typed cause.
//
// A Registry serves both sides of apache/doris#23704:
//
//   - On a frontend (coordinator side), a query registers with its
//     coordinator (node and epoch) and the workers that hold its fragments,
//     and gets a context that is cancelled when any of them restarts, is
//     declared dead or is removed. context.Cause returns a *CanceledError
//     naming the node, the epoch the query ran against, the epoch that
//     replaced it and why (errors.Is with ErrNodeRestarted, ErrNodeDead or
//     ErrNodeRemoved).
//   - On a worker, each fragment registers with its coordinator only, and is
//     cancelled when that coordinator's epoch changes or it is declared dead
//     or removed. A fragment from a coordinator no heartbeat has named yet
//     is refused with ErrUnknownNode, since nothing would cancel it.
//
// The registry learns about members from epoch.Events passed to
// [Registry.Apply], in log order: from heartbeat.Membership on a frontend,
// from heartbeat.Responder on a worker. Registering against an epoch that an
// earlier event already superseded fails at once with the same cause, so a
// query that races an event either fails to register or is cancelled by
// it: none escapes, and none is cancelled twice. A participant's epoch
// that no event has named (the caller learnt it first) is judged by the
// events that follow, and by the epochs' start times
// (epoch.Epoch.StartedBefore): an event that shows the member at an
// epoch that started later ends it, and one that shows it at an epoch
// that started earlier leaves it be, whatever transitions it skipped.
//
// Costs: an event takes time in proportion to the queries on the node it
// names (a per-node index), never to all live queries; memory is bounded by
// the live queries plus a few tombstones per member (a node known only
// from registrations is forgotten with its last query, a removed one after
// Config.MaxRemoved more removals); cancel callbacks run
// outside the registry's lock, each on its own goroutine, recovered from
// panics, so a slow or panicking callback delays nothing else.
package cancel
