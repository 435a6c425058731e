// Package heartbeat gives every process a start epoch and turns restarts,
// deaths and removals of cluster members into events that every frontend
// sees in the same order.
//
// It replaces Doris's HeartbeatMgr plus the BE start time and FE start
// UUID of apache/doris#23704:
//
//  1. Every process draws a fresh Epoch (a UUID that begins with its start
//     time) when it starts. The journal pairs it with an ordered generation
//     when it is recorded: every transition of a member record bumps its
//     generation, so an older view (a lagging leader) can never flip an
//     epoch back; and one answer from a process that started before the
//     recorded one (a late response of a replaced process) records
//     nothing.
//  2. Member records (frontends and workers) live in the catalog under
//     MembersPath ("/_cluster/members/<id>", kind "member", attributes
//     addr, kind, role, epoch, generation, epoch_generation, status,
//     since, term, died) and change only through journal proposals, so
//     they are the same on every frontend and survive images.
//  3. While a frontend is the raft leader, its Membership runs the monitor:
//     every Interval it heartbeats every member in parallel, each request
//     with its own Timeout, carrying the leader's id and raft term and the
//     frontends' published epochs. It journals only transitions: restarted
//     (a new epoch answered), dead (DeadAfter misses in a row, over at least
//     DeadAfter intervals, and not before Grace has passed since it was
//     elected), alive (a first answer). An epoch declared dead ended for
//     good: a member that answers again with it (it was only cut off) is
//     told so in the next heartbeat (Request.Ended), draws a fresh epoch
//     and answers with that, and its return is journaled as a restart, so
//     a fence on the ended epoch (Fence, OwnerOf) never holds again.
//     Misses that fall in the leader's own pause (a tick that comes late)
//     convict nobody. Each transition is fenced twice: by the record's
//     last change (catalog precondition) and by the leader's claim at
//     MonitorPath, so a deposed leader changes nothing.
//  4. On every frontend, Membership replays the member records from the
//     catalog (a watch, and a full re-read after an image load) and hands
//     each transition to Config.OnEvent in log order. A re-read that finds
//     a record some transitions later (an image folded them) delivers what
//     they did all the same: a death the record names (its died
//     attribute) after the view, or a later generation with the same
//     epoch, is a death in between (Dead, then the return); see Event.
//  5. A Responder (package heartbeat/responder: an http.Handler mounted at
//     responder.Path on every member) answers
//     with its current epoch (a fresh one once told that the log ended its
//     epoch), refuses lower raft terms before taking any lock
//     while the higher term's sender keeps beating (after StaleAfter of
//     silence a lower term is accepted again, so a forged or vanished term
//     fences no one off for ever), tracks the frontends' epochs from the leader's lists and emits an Event
//     when a frontend restarted, was declared dead (it is then published
//     with a temporary epoch, never before), came back or was removed. A
//     member that hears from no leader emits nothing: silence is never
//     evidence.
//
// The package is split by who runs what: package heartbeat/epoch holds the
// epoch and the events both sides share, package heartbeat/responder the
// member side (a worker links it, and neither the catalog nor the
// journal), and this package the frontend side: the member records in the
// catalog, their replay and the leader's monitor.
//
// Goroutines: a Membership owns two, started by New and stopped by Close:
// one follows the catalog's member records and delivers their events, the
// other runs the monitor, which while this frontend leads probes each member
// (and journals its transitions) on goroutines it starts and waits for
// before it returns. Config.OnEvent runs in New, then on the first, one
// call at a time.
//
// Package cancel consumes the Events. Wiring on a frontend (see Example):
//
//	reg := cancel.New(cancel.Config{})
//	ms, err := heartbeat.New(heartbeat.Config{
//		ID: id, Epoch: epoch.New(), Tree: tree,
//		Journal: j,                 // a *journal.Journal
//		OnEvent: func(ev epoch.Event) { reg.Apply(ev) },
//	})
//	mux.Handle(responder.Path, ms.Handler())
//
// and on a worker, see package heartbeat/responder.
package heartbeat
