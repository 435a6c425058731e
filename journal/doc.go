// Package journal is metatree's replicated log: every write goes through it,
// every frontend replays it. It drives go.etcd.io/raft/v3 (one RawNode owned
// by one goroutine), keeps entries and hard state in Pebble on disk
// (journal/internal/raftstore), and talks to its peers over HTTP (an
// http.Handler the host mounts under /raft/). Entries are opaque bytes; the
// host plugs in the state machine.
//
// # Using a Journal
//
//  1. Build a [Config]: the node's ID (non-zero, never reused), its data dir
//     and the address peers reach it at, a [StateMachine], and optionally a
//     [Snapshots] hook (the image package). Every tunable has a documented
//     default; [Open] copies the config, fills defaults and validates it.
//  2. Pick the start mode. The first node of a new cluster sets
//     Config.Bootstrap. Every other node sets Config.Join to the address of
//     any running member (the helper) and its Role: [Follower] (a voter) or
//     [Observer] (a raft learner). A node whose data dir already has a
//     VERSION file restarts from it and ignores both; a cluster id, token or
//     role that disagrees with the dir or the cluster is an error at
//     startup ([ErrClusterMismatch], [ErrRoleMismatch]). A second process on
//     the same dir fails at once ([ErrLocked]).
//  3. Call [Open], then mount [Journal.Handler] under "/raft/" on the HTTP
//     server listening at Config.Addr (or pass a custom [Transport], e.g.
//     journal/journaltest's in-memory network).
//  4. Write with [Journal.Propose] on any node. A non-leader hands the
//     proposal to raft, which forwards it to the leader inside the peer
//     stream (batched with other traffic; re-proposed with the same key if
//     it does not apply within two election timeouts, since a leader may
//     drop a forwarded proposal silently); membership changes are forwarded
//     over HTTP ([Transport].Forward). Propose returns only after the entry
//     is applied on the calling node, so the caller reads its own write
//     there (the leader may apply it a moment later).
//     Retries after a lost acknowledgement carry the same idempotency key
//     ([Journal.ProposeWithKey]) and apply once. Without a reachable leader Propose fails
//     when its context ends, with an error wrapping [ErrNoLeader]. An error
//     means the write did not and will not apply, unless it wraps
//     [ErrOutcomeUnknown]. A state machine that is a [ProposalChecker]
//     (catalog.Tree) has every proposal checked before it enters the log,
//     on the proposing node and again on the leader: bytes it does not
//     read fail with [ErrInvalidProposal] instead of halting every
//     replica's applier.
//  5. Read the state machine directly: local reads are bounded-stale.
//     [Journal.CheckFresh] fails with [ErrStale] when the last leader
//     timestamp replayed here is older than Config.StaleAfter (the leader
//     journals its clock every StaleAfter/2). [Journal.ReadBarrier] makes
//     the next reads linearizable (raft ReadIndex, on any node, observers
//     included); concurrent calls on a node share ReadIndex rounds.
//  6. Manage members with [Journal.AddMember], [Journal.RemoveMember]
//     (refuses to leave no reachable quorum unless forced:
//     [ErrUnsafeRemoval]), [Journal.Promote] and
//     [Journal.TransferLeadership]. Watch [Journal.Status] and
//     [Journal.Leadership] for leader changes. A removed node reports
//     Status().Removed once it applies its removal or once a member
//     refuses its messages with [ErrRemoved].
//  7. The image package's checkpointer gets the journal as an [ImageLog]
//     ([ImageLogOf]): it replays the log with [ImageLog.ReadEntries] and
//     records each image with [ImageLog.ImageWritten], which makes the image
//     raft's snapshot and compacts the log behind it, up to an earlier image
//     (keeping at least Config.CompactMargin entries; never while a snapshot
//     is being sent), so that the log always starts right after an image the
//     image store keeps: a resumed watch can rebuild the state at any index
//     the log holds from that image and the entries after it. How much the log
//     holds: with an image every T entries and T at least the margin, the cut
//     is the image before the newest, so the log holds up to 2T entries (plus
//     those applied between two checks of the checkpointer); with the defaults
//     (the image checkpointer's Threshold of 100,000 entries) about 200,000
//     entries.
//  8. Call [Journal.Close]. It is idempotent and returns when every
//     goroutine the journal started has exited.
//
// # What the journal promises
//
// raft runs with AsyncStorageWrites. The proposals that arrive together
// enter raft as one MsgProp, so one Ready, one append per follower and one
// write carry them all (the loop yields once it has a proposal, letting the
// proposers woken with its sender queue theirs). The raft loop never waits
// for the disk: each Ready's entries, HardState and snapshot go to an append
// goroutine that writes everything queued meanwhile in one Pebble batch,
// synced when raft requires it (group commit across Readys), and only then
// are the messages that depend on that write stepped or sent (a follower's
// acknowledgement, a vote, the node's own acknowledgement as leader).
// raft hands out committed entries only once they are durable locally; they
// go, in order, to the applier. Nothing is acknowledged, applied or voted
// for before the write that makes it durable has returned. The applier runs
// on its own goroutine behind a queue bounded in bytes and batches, so a
// slow state machine never stops ticks or raft's traffic: a full queue
// holds back only the committed entries (raft hands out no more until the
// applier makes room). Membership changes are applied to raft on
// the loop, and the members' addresses travel in the conf change entries, so
// they are as durable as the log; the applier writes the membership
// records, MEMBERS and ROLE as it passes each change, and the append
// goroutine records images for [ImageLog.ImageWritten], so no fsync runs on
// the loop. A received raft snapshot is first made durable through
// [Snapshots.Fetch], then stepped into raft; one raft does not take is
// released ([FetchReleaser]); raft is always told how a snapshot it sent
// ended (ReportSnapshot). On restart raft starts from the index of the
// image [Snapshots.LoadLatest] loaded (an older one when the newest is
// unusable), with the membership as of that index, and the log after it is
// replayed.
//
// # The data dir
//
//	VERSION   cluster_id=… and token=… (written once, last, at bootstrap
//	          or join: without it Open bootstraps or joins again; a
//	          bootstrap's first entry is in the log before it)
//	ROLE      role=follower | observer (rewritten when the node is promoted)
//	MEMBERS   the newest membership with every member's address (synced at
//	          join and as each membership change applies, so a restarted
//	          node can reach its peers before it has replayed its log)
//	LOCK      held while the journal is open
//	EMERGENCY_BALLAST  space held in reserve (Config.BallastBytes);
//	          released when the disk is nearly full, written again once
//	          it has room; safe to delete by hand
//	journal/  Pebble: entries, HardState, raft snapshot metadata,
//	          membership records (journal/internal/raftstore)
//
// # Storage failures
//
// A failed write or fsync of the journal halts the node: every write from
// then on fails with [ErrHalted] naming the file and the operation, reads
// go on under the staleness guard, and only a restart (which recovers from
// what is durable) clears it; a retried fsync could vouch for pages the
// failed one dropped. This holds wherever Pebble writes (the WAL, its
// rotation, a flush, a compaction, the MANIFEST): Pebble would panic on a
// failed WAL rotation, so the store reports such a failure to Pebble as a
// success, halts, and changes nothing on disk after it (see raftstore's
// haltFS). A read of the log that fails halts the node too: raft panics on
// it, and the journal recovers that panic and stops its loop. Before the
// disk fills, the node refuses new writes with
// [ErrNoSpace] (free space under Config.ReserveBytes) and takes them again
// by itself once space is freed.
//
// A follower whose disk fills still receives appends, so a member under
// its reserve also raises its no-space alarm ([Member.NoSpace], a
// membership update replicated to every node, as etcd's NOSPACE alarm):
// while a voter's alarm is raised every node refuses new writes with
// [ErrNoSpace] naming that member, raft's own traffic goes on, and the
// member clears the alarm by itself once it has space.
//
// ROLE and MEMBERS only move forward: replaying the log after a restart
// rewrites neither with a membership older than the one MEMBERS holds.
//
// # Entries
//
// Each normal entry is an envelope: a user entry (idempotency key and the
// user's bytes, and for a copy the journal may re-propose, the commit index
// its proposer knew first: a copy landing more than the dedupe window
// indexes after it is skipped, so re-proposals apply once), or a leader
// timestamp. The [StateMachine] sees user data only. An entry whose key
// reached the log within the dedupe window before it (applied or itself
// skipped) is skipped on every replica: the decision depends only on the
// window and the entries in it, which travel with images in the membership
// blob, so replicas, restarts and shadow checkpoints stay identical. The
// window is the cluster's, not each member's: the bootstrap member's
// Config.DedupeWindow, recorded by the cluster's first membership change
// and carried by every membership record, image and restore after it
// (a cluster bootstrapped before the window was recorded uses each
// member's own). A member keeps at least the cluster's window of log
// behind its newest image, whatever its Config.CompactMargin.
//
// # Format versions
//
// Each member reads the format versions up to its Config.MaxVersion and
// advertises it when it joins or restarts with another one; the leader
// journals the cluster version, the highest version every voter and
// observer reads, raising it once all of them do and never lowering it
// ([Status.ClusterVersion], [Journal.WaitClusterVersion]). Writers write no
// newer format than the cluster version. An entry this node cannot read (an
// envelope kind, a cluster version above its maximum, a state-machine
// result whose [Halter.Halt] is non-nil) is never skipped: the applier
// stops before it with a [*HaltError] ([ErrHalted]), the node serves reads
// under the staleness guard and refuses writes, and a restart with a binary
// that reads it resumes there. A restart or join below the cluster version
// fails with [ErrVersion], and so does a join below a raise the leader has
// proposed and not yet applied. Every replica refuses alike, when it
// applies, a membership change admitting a member below the cluster
// version and a raise above what a member reads, so no member is left
// unable to read the log. Version 3 adds the consistency checks'
// entries, version 4 catalog batches that name an owner.
//
// # Consistency checks
//
// When the [StateMachine] is a [Digester] (catalog.Tree is), the replicas
// compare their state through the log every Config.CheckInterval (default
// 1s): the leader journals a mark, every member records its digest at the
// mark and reports it in an entry, and every member compares its own with
// the digest a majority of the voters reported. A member that differs
// raises the corruption alarm, a [*CorruptError] ([ErrCorrupt]) in
// [Status.Err], the metric metatree_journal_corrupt and the log: it stops
// applying, serving reads ([Journal.ReadBarrier], [Journal.CheckFresh])
// and taking part in raft (a leader so gives way), while the healthy
// majority goes on. Replace it: it restores from a healthy member's
// image. A member without a digest of its own at a mark (it restored from
// an image past it) does not compare, so images, restarts and compaction
// raise no alarm; the checks run once the cluster version is 3. A mark
// names the digest format compared at it: a [FormatDigester] states more
// than one, and the leader names the newer one (2) only from cluster
// version 5, when every member computes it, so a rolling upgrade switches
// every member at the same mark.
//
// Every member also tallies the others' reports, so [Status.Alarm] shows
// the cluster's alarm on healthy members too, naming the voters that
// differ; when no digest has a majority of the voters, every member
// refuses writes ([ErrCorrupt]) until [Journal.ClearAlarm]. A member that
// restarted or installed an image serves no reads until a comparison at a
// mark after its image agreed (the check at start: [Journal.CheckFresh]
// fails with [ErrStale] and [Journal.ReadBarrier] waits), except where no
// check can run (a sole voter, a cluster below version 3).
// journal/offline's Inspector.VerifyDigests makes the same comparison
// offline.
//
// # Concurrency
//
// A *Journal is safe for concurrent use. StateMachine.Apply is called from
// one goroutine, in log order.
//
// A node runs the raft loop (the only goroutine that calls into raft), the
// append goroutine (raft's appends and the image records, to the store),
// the applier (StateMachine.Apply, the membership files) and a few
// helpers (the free space watch, the version advertisement, the removal
// probe, the image requests, the halt watch). The Journal type groups its
// fields by who may touch them: the loop's state (loopState), the append
// goroutine's (appenderState) and the applier's (applierState), which no
// other goroutine touches once it runs; what Open sets and only reads
// after; and the channels, atomics and locked values the goroutines share.
//
// # Package layout
//
// Package journal is the API and the node: Open, the raft loop, the
// append goroutine, the applier, proposals, membership changes, images
// and the consistency checks. Each concern that stands alone is an
// internal package, with its contract and its goroutines in its doc.go:
//
//	internal/raftstore   the raft log, HardState and membership records in Pebble
//	internal/rafthttp    the HTTP transport (HTTPTransport wraps it): streams, frames, wire errors
//	internal/envelope    the codec of the entry envelope (user entries, timestamps, versions, checks)
//	internal/dedupe      the dedupe window that decides which copy of a key applies
//	internal/readround   the ReadIndex rounds that ReadBarrier calls share
//	internal/diskguard   the free space guard, the emergency ballast, the no-space rule
//	internal/errs        the sentinel errors, which journal re-exports under the same names
//	internal/membership  the member set (Member, Role) and its encoding, the conf change context
//	internal/datadir     the data dir's VERSION, ROLE and MEMBERS files
//	internal/consistency the tally of the consistency checks' reports (CorruptError, Alarm)
//
// journal/offline reads and writes a stopped node's data dir (Inspect,
// Seed, VerifyDigests); journal/journaltest runs clusters in memory for
// tests.
package journal
