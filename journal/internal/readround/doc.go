// Package readround holds the state of a journal node's ReadIndex rounds,
// which its linearizable reads (journal.Journal.ReadBarrier) share.
//
// Linearizable reads share ReadIndex rounds, as etcd's server does in its
// linearizableReadLoop: at most one ReadIndex is in flight per node, and the
// ReadBarrier calls that arrive while it is answer all ride the next one. A
// caller never rides a round sent before it arrived (the leader's answer
// would not cover writes acknowledged in between), so a round takes the
// callers that arrive until it is sent, and no more. Under load each
// caller waits for at most the round in flight plus its own, and the node
// sends one ReadIndex (one heartbeat round on the leader) for all of them.
//
// No goroutine runs the rounds. The caller that finds none in flight
// gathers one: it yields while the callers runnable now join it, then
// seals and sends it through the raft loop. When a round's ReadState
// arrives, the raft loop releases its callers and, if callers wait for the
// next round, hands that round to one of them to gather and send in the
// same way. The callers it just released join that round while it
// gathers, instead of waiting for the one after: sent straight from the
// raft loop, the next round would leave them behind, and under a steady
// load the callers would split into two groups whose rounds alternate,
// each caller waiting two rounds (BenchmarkReadBarrier's reads/round).
//
// A sender whose context ends before the raft loop takes its round passes
// the sending on to another caller of the round. The raft loop keeps the
// round in flight moving at its ticks ([Rounds.Tick]), so that a lost or
// abandoned round never holds back the callers of the next one, whose
// deadlines may all be shorter than any wait for a caller of its own: a
// round no caller sent within [UnsentTicks] it sends itself, and a sent
// round left unanswered for the journal's resend ticks (a lost request or answer, a
// leader that changed) it sends again under the same request context,
// while a leader is known. The answer to any copy releases the round, and
// the others match nothing.
//
// A round's request context is the run's prefix, drawn at random at Open,
// and the round's number in the run. An answer releases a round only if it
// carries the round's whole context: an answer to a round of an earlier run
// of this node (delayed on the network, or confirmed by the leader after
// the restart) names an index from before writes acknowledged meanwhile,
// and round numbers start again at 1 in every run. etcd's request ids are
// unique across restarts in the same way (idutil.Generator: member id and
// start time).
//
// # Goroutines
//
// [Rounds] is safe for concurrent use and starts no goroutine. The
// journal's ReadBarrier callers call [Rounds.Join], [Rounds.Riders],
// [Rounds.Seal] and [Round.PassTurn]; its raft loop calls
// [Rounds.MarkSent], [Rounds.Answered] and [Rounds.Tick].
package readround
