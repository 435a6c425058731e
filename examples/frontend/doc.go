// Package frontend runs a metatree frontend inside a Go service: the five
// packages (catalog, journal, image, heartbeat, cancel) wired into one
// process that holds the whole catalog in memory, replicated through a
// raft journal in Pebble, bounded by images, with heartbeats watching
// every member and a cancel registry turning their restarts and deaths
// into cancelled queries. It is the assembly the example binaries, the
// quickstart and the end-to-end tests run.
//
// A host does four things:
//
//  1. Start a frontend from one [Config]: an id, a data dir, the address
//     peers reach it at, Bootstrap (the first member) or Join (any running
//     member), a credential (Token, the TLS files, or Insecure on purpose:
//     without one Start refuses with [ErrNoCredentials]), and, in
//     Config.Handler, the host's own HTTP API, served on the same port as
//     the member endpoints. Start serves the port before it opens the
//     journal, so that a joining frontend answers its peers at once.
//  2. Read the catalog from [Frontend.Tree] (local reads; a linearizable
//     read first calls [journal.Journal.ReadBarrier] on
//     [Frontend.Journal]), watch it with catalog.Tree.Watch, and resume a
//     watch with catalog.Tree.WatchFrom and [Frontend.History].
//  3. Write with [Frontend.Write]: a catalog.Batch in, the
//     *catalog.Result and one error out, encoded at the cluster's format
//     version, applied on this frontend when it returns.
//  4. Stop with [Frontend.Shutdown] (hand leadership off, let requests
//     finish, then Close) or [Frontend.Close]; both return once every
//     goroutine has exited.
//
// Queries that must stop when a member restarts register with
// [Frontend.Registry] against the epochs in [Frontend.Members]; members
// join and leave through [Frontend.AddMember] and [Frontend.RemoveMember],
// which keep raft's membership and heartbeat's records in step.
//
// Start owns the steps a hand-wired assembly must not miss. With the
// *image.Store as the journal's Snapshots, an image fsync failure halts
// the journal and the journal gets a checkpoint when a joining follower
// needs a newer image than the newest one, with no wiring; this frontend is registered as a heartbeat member (workers
// refuse fragments from an unknown coordinator); the records of
// frontends that left raft are pruned by each new leader; Close stops the
// parts in the right order.
//
// Mutual TLS: a member's certificate carries the URI SAN of [MemberURI];
// [LoadCertificates] gives a host the same reloading TLS configurations
// the frontend uses, and [MemberOf] and [CheckMember] the identity checks
// of the library's member endpoints.
package frontend
