// Package fakejournal is the in-memory journal that the tests of image and
// heartbeat run against, in place of a raft cluster: one Log whose entries
// commit at consecutive indexes, in one order, and apply to every attached
// replica's state machine, as raft does when nothing fails.
//
// A Log serves both sides a journal has towards its users:
//   - the proposer's (package heartbeat's Journal): Replica(id) proposes an
//     entry, returns once it is applied with that replica's result, and
//     reports the term and leadership that replica believes (SetLease,
//     SetLeader); SlowCommits gives every commit a latency, and a proposal
//     whose caller gives up meanwhile commits all the same;
//   - the image store's (package image's Journal): ReadEntries, FirstIndex,
//     TermAt, MembershipAt and ImageWritten, which compacts the log up to the
//     newest recorded image at least the margin (SetMargin, default 10)
//     behind the new one, as the journal does; InstallSnapshot replaces the
//     log by a snapshot.
//
// Term and membership are functions of the index (TermAt is 1 + index/1000,
// MembershipAt "voters=1,2,3@<index/1000>"), so two Logs with the same
// entries agree on them.
//
// Goroutines: a Log owns none. Every method is safe for concurrent use;
// Commit, Propose and InstallSnapshot apply entries to the state machines
// under the Log's lock, one entry at a time, in index order. A state
// machine must not call back into the Log from Apply.
//
// It is for tests only, and imports neither the journal nor the image
// package, whose internal tests use it.
package fakejournal
