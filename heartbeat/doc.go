// Package heartbeat gives every process a start epoch and turns restarts,
// deaths and removals of cluster members into events that every frontend
// sees in the same order.
//
// It replaces Doris's HeartbeatMgr plus the BE start time and FE start
// UUID of apache/doris#23704:
//
//  1. Every process draws a fresh Epoch (a UUID) when it starts.
//  2. Member records (frontends and workers) live in the catalog under
//     /_cluster/members/<id> and change only through journal proposals, so
//     they are the same on every frontend and survive images.
//  3. The raft leader's Monitor probes every member each interval, in
//     parallel, with a per-request deadline. It journals only transitions:
//     restarted (a new epoch answered), dead (DeadAfter misses in a row) and
//     alive again. Transitions are fenced by the leader's claim record, so a
//     deposed leader's proposal fails its precondition and changes nothing.
//  4. Membership, on every frontend, watches the member records and delivers
//     the transitions as Events in log order.
//  5. A Responder (an http.Handler, on workers and frontends) answers the
//     leader's heartbeats with its epoch, ignores lower raft terms, tracks
//     the frontends' epochs from the requests and emits Events when a
//     frontend restarted, died or was removed.
//
// Package cancel consumes the Events.
package heartbeat
