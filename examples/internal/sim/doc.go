// Package sim is a seeded simulator of a whole metatree cluster: three to
// five frontends (frontend.Start, the assembly the metaserver runs:
// catalog, journal, image store and checkpointer, heartbeats, cancel
// registry) in one process, over frontendtest's in-memory network, each
// on its own in-memory filesystem that loses what was not synced at a
// power cut (journaltest.CrashFS), inside a testing/synctest bubble: time
// is virtual, and two simulated minutes of a cluster take about a second.
//
// # What a run does
//
// One seed (math/rand/v2 PCG) draws the cluster's shape (three to five
// voters, or, one run in four, a sole voter with one to three
// observers), its compaction margin (32 or 64 entries, the dedupe window
// as wide) and image threshold (16 to 64 entries), and drives every
// choice. Four clients write and read through random frontends, leader,
// followers and observers alike: puts and compare-and-sets of a few
// registers (batches with a precondition), puts retried as a client that
// lost the acknowledgement does (the same idempotency key through
// another frontend; a retry that lands more than the dedupe window after
// the copy before it may apply again, as journal.ProposeWithKey says,
// and the history allows it), unique creates under a precondition retried through
// other frontends, linearizable reads (a read barrier on any frontend,
// then its tree) and local reads. One or two more clients do the same
// through the metaserver's HTTP API (examples/API.md): each frontend
// runs as the metaserver does, with the demo API mounted on it
// (frontendtest.Options.Start), and these clients reach a random one over
// the same network from their own address, whose links they delay and
// make reset connections now and then: PUTs of a register, retried
// through other frontends while the answer leaves the outcome unknown;
// txns with an if_match precondition; creates under a precondition
// (with attributes from a few hundred names, so that replicas number
// attribute keys past one byte in different orders); linearizable and
// local GETs. One run in two every frontend runs with the same catalog
// quota (-quota-nodes, -quota-bytes, or both) near what the workload
// reaches, so that creates and puts of longer values meet 507 quota now
// and then. In those runs a filler (filler.go) brings the catalog, every
// few seconds, to within a byte of its bytes quota (or to its node
// quota's last node) through the leader, holds it full for a few seconds
// and drains it; its last fill stays to the end of the run. While the
// catalog is full, the member records (exempt, catalog.Quota.Exempt)
// still journal the workers' restarts, stops and returns, which the
// query checks and the records check judge; Result.FullTransitions
// counts them. Meanwhile a nemesis injects one fault
// at a time: a frontend isolated (often the leader), a minority split
// off, one-way cuts out of or into a frontend, a flapping link, delayed
// links that reset connections, heal; a power cut and, after a while, a
// restart from what was synced; crash loops with a read in flight; the
// leader's power cut right after an acknowledged write while its link to
// a reader is cut, and reads through that reader at once after the
// restart; a sole voter's slow disk (WAL fsyncs of 1.5 to 2.2 s, longer
// than the election timeout, through power cuts and the recovery); a
// graceful restart (a leader hands off first); a leadership transfer; a
// checkpoint; a keyed put retried across a checkpoint of every frontend;
// a follower cut off while the others write and checkpoint past it,
// so that it catches up by installing an image; links that deliver
// requests twice, the copy up to 3 s late, after what was sent since
// (frontendtest.Faults.Duplicate: raft streams and the proposals and
// votes in them, membership changes, image fetches, and the leader's
// heartbeats to workers, whose lists of frontends then come back out of
// order); a member's wall clock set off from the others' (see below);
// and a full disk: a frontend's free space under the journal's reserve
// (its no-space alarm makes the cluster refuse writes with
// journal.ErrNoSpace), one time in three ENOSPC on every write that needs
// space (the journal halts, and the frontend is restarted once space is
// back), for up to 8.5 s, after which the alarm must clear; and, in a
// run of a sole voter and observers, an operator's promotion of an
// observer to a voter (through any frontend), after which the observer
// restarts as a voter. An operator also changes the membership
// (membership.go): a frontend joins the running cluster through a random
// member, as a metaserver started with -join does
// (frontendtest.Cluster.JoinFrontend), as a voter or as an observer that
// is then promoted half the time (at most three joins a run, each with a
// new id after the workers'; a join that fails is undone by removing its
// id); a frontend is removed, a voter (the leader half the time) once the
// run has more voters than it started with, else an observer, and its
// process runs on for up to 3 s with a client's writes and linearizable
// reads through it, recorded in the history (a removed frontend must
// refuse them or fail them, never acknowledge a write the cluster loses;
// over HTTP it answers 410 removed), then stops; half the time its id
// then tries to join again on an empty data dir, which the cluster must
// refuse; a removal that would leave too few reachable voters (of a sole
// voter, or of a follower while enough other followers are cut off past
// the election timeout) must be refused with journal.ErrUnsafeRemoval;
// and a worker is removed and, up to 3 s later, added again as a new
// process (frontendtest.Cluster.ReaddWorker), the worker faults waiting
// meanwhile. The run keeps at least the voters and the frontends it
// started with; the nemesis, the clients and the checks act on the
// frontends the cluster holds at the time, joined ones included (the
// replica-equality and differential checks run on them), and the ground
// truth samples every frontend that ever ran.
//
// # An operator's recovery
//
// One run in six loses a quorum for good and one in six restores a
// backup (disaster.go; a run of fewer than three voters restores in place
// of the loss), once, at the first fault after four to seven tenths of the run
// that finds a leader once every link is healed and every member runs.
// For the loss, the majority of the voters and every observer lose their
// power and are never restarted on their disks; half the time the leader
// survives, first cut off from the others while it proposes its own
// removal, so that the survivor's log ends in a removal of itself that
// never committed. The operator picks the surviving voter with the
// highest commit index, shuts the other survivors down, and restarts it
// with -force-new-cluster (frontendtest.Cluster.ForceNewCluster, the
// journal's force path). For the restore, the operator backs up a
// follower as metactl backup does (frontendtest.Cluster.Backup, after a
// read barrier and a checkpoint on it), lets the cluster run on for up
// to 3 s, shuts every frontend down, and restores the backup into a new
// cluster of one new frontend as metactl restore and a metaserver
// started on its dir do (frontendtest.Cluster.Restore: a new cluster id,
// a membership of that frontend alone). Either way new frontends (new
// ids, empty data dirs) then join the new cluster back to the run's
// shape, and one old frontend comes back: half the time on the disk it
// was lost with, a client's writes and reads through it recorded in the
// history (after a restore, it is the old cluster, which a sole voter's
// disk alone holds a quorum of: a write to every register through it,
// none of which the new cluster may hold), else as a join of its id on
// an empty dir, which must be refused. The workers, the clients and the
// faults go on.
//
// The old cluster's acknowledgements after the survivor's state was
// taken may be lost by design, so the checks split the run at the cut
// (cut.go). Before the operator's recovery every survivor (or the
// backed-up follower) applies all that is committed; a write
// acknowledged before then must be in the surviving state, any other
// write of the old cluster may or may not be, and the surviving state
// holds only values the old cluster's writes wrote: the history up to
// the new cluster's first linearizable read, with those writes' outcomes
// unknown and a read of each register's surviving value, is
// linearizable. From that read on, the new cluster's history is
// linearizable from the surviving state (a write of each register's value
// at the cut before everything else; a write still in flight across the
// cut may land on the new cluster). A unique create or an owned node the
// new cluster lacks is dropped only if the old cluster acknowledged it
// after the surviving state was taken; watch sessions of the old cluster
// are compared with the new cluster's up to the last index the two logs
// share (the survivor's commit index, the backup's image index). Every
// other check holds on the new cluster as on any: replica equality, the
// differential check (also right after the recovery), the watch, owned,
// query and records checks, a leader and an accepted write after the
// faults heal. The new cluster's membership must hold no old frontend but
// the survivor, and an old frontend that comes back must acknowledge
// nothing the new cluster lacks.
//
// # Wall clocks
//
// What reads the wall clock for a decision: the journal's staleness
// guard (the leader journals its clock; a non-leader compares the last
// stamp it applied with its own clock, read as the wall time at Open
// plus the monotonic time since, so a step after Open moves neither); a
// worker's responder (how long its leader has been silent, which decides
// whether a lower term is accepted: measured on the monotonic clock, so
// that a step is no silence, TestResponderFencesALowerTermAcrossAWallClockStep
// in package heartbeat); and the member records' Since, the leader's wall
// time at each transition, journaled, and compared by a worker between
// lists of different leaders to tell an incarnation from the one before
// (a frontend removed and added again under its id): two leaders' clocks
// further apart than the time between the removal and the re-add can
// make a worker take the new incarnation for the old one. The simulator
// re-adds removed workers, not removed frontends (a removed frontend's id
// is never reused), so it does not meet that either.
// Everything else measures intervals between two readings of one
// process (timers, tickers, the heartbeat monitor's misses and pauses,
// slow-operation logs), which a step of a real machine's clock does not
// move; epochs are random (UUIDs), image names are indexes.
//
// Each process a member runs starts on a clock.Stepped offset by the
// member's skew at that moment (frontendtest.Options.Clock,
// frontend.Config.Clock). The clock fault sets a member's skew, by up to
// 20 s either way or, one time in five, by up to two minutes (beyond the
// staleness guard's tolerance: local reads may then be refused or stale,
// and nothing else may break): a frontend restarts on it at once, a
// worker's next restart runs on it. The processes' wall clocks thus
// disagree, and the stamps and Since values they journal with them. A
// running process's clock is not stepped: inside a synctest bubble
// time.Now carries no monotonic reading, so a step would move every
// interval the process measures too, which a real step does not; a step
// in a process's life is tested outside the bubble instead, on the real
// clock (clock.Stepped moves the wall reading only).
//
// Every run also has one to three workers (frontendtest's: a heartbeat
// responder and a cancel registry each). Two query clients register
// queries across a random coordinator frontend (a voter or an observer)
// and some of the workers, against epochs the cluster has published
// (each worker knows the coordinator at its epoch from the leader's
// heartbeats, and, for two queries in three, the coordinator's registry
// knows each worker at its; the third registers against a worker's
// epoch that some frontend's member records show but the registry may
// not have heard of yet, an "ahead" part), and hold each for a while. A
// worker nemesis
// restarts workers (now and then twice in a row, before the cluster has
// seen the first restart), stops one for longer than the death bound, and
// takes one off the network for a while; the frontends' nemesis restarts
// and cuts the coordinators meanwhile. Two watchers watch the registers
// on random frontends, disconnect, and resume on another from the last
// index they saw (after an operator's recovery, at most the cut: the new
// cluster's own batches follow it), from the first index its log holds an image for
// (Journal.FirstIndex()-1), or from an older index the log may no longer
// hold; a third does the same through the API's watch stream (GET
// /v1/watch with from_index), its sessions checked alike. Task nodes are created owned by a worker's current epoch
// (heartbeat.OwnerOf; some to be orphaned rather than deleted), writes
// are fenced by it (heartbeat.Fence), and fences taken earlier are sent
// again once the frontend's catalog shows the epoch ended.
// Options.Extend is where further members join a run.
//
// # What it checks
//
// After the faults heal, every frontend runs again and the run requires a
// leader and an accepted write within RecoveryBound. With the clients
// stopped, each frontend reads every register linearizably, and then:
//
//   - the history of puts, compare-and-sets and linearizable reads, final
//     reads included, is linearizable (porcupine, internal/linearize's
//     register model); so no acknowledged write is lost. A write whose
//     error does not wrap journal.ErrOutcomeUnknown did not and will not
//     apply (journal.Propose's contract): it stays out of the history, so
//     a read of its value fails the check; a write of unknown outcome may
//     take effect at any time after its call. Over HTTP a 2xx is
//     acknowledged; no answer (a reset, a timeout, a frontend that
//     stopped) and 503 outcome_unknown are unknown; any other status
//     (4xx, 507, the other 503s) did not apply, as API.md says. A 507
//     quota is a refusal like the library's catalog.ErrQuota. A put
//     retried without a key is one operation an attempt (each may
//     apply); one retried under an idempotency key is one operation while
//     its copies land within the dedupe window of each other
//     (journal.ProposeWithKey's contract), and a second copy applied
//     within it fails the run;
//   - an HTTP answer API.md does not give (a 500, a 404 of a register, a
//     507 quota in a run without a quota) fails the run, and so does a
//     410 removed from a frontend whose removal was not asked for; a
//     local GET never shows a register modified earlier than one that
//     returned before it was sent, on the same catalog (the two HTTP
//     clients' GETs overlap);
//   - every acknowledged unique create is present on every frontend;
//   - a local read never sees an older index than the one before it on the
//     same catalog;
//   - every frontend reaches one applied index, with one catalog digest
//     (catalog.Tree.Digest);
//   - no frontend raised or reports a consistency alarm: the journal's
//     digest checks run on every frontend all along, and on a correct
//     cluster an alarm is a false one;
//   - the differential check: on every frontend, its newest image and the
//     image its log starts after (which its store must keep), each loaded
//     into a fresh catalog, and the log replayed onto it (ReadEntries, with
//     the applier's duplicate skipping) up to the live catalog's index,
//     give the live catalog's digest; it runs after every checkpoint
//     fault too, on a running cluster (at the end, the leader's clock
//     stamps and member records still journal, so a check whose log a
//     checkpoint compacts under it runs again);
//   - within RecoveryBound of the faults healing, every frontend's cancel
//     registry and member records show every running member (frontends
//     and workers) alive at the epoch it runs (records.go): the leader
//     journals each return and restart, and every frontend hands the
//     records' events to its registry;
//   - a restart never fails, and no goroutine is left when the cluster
//     closes (the bubble's own check, and goleak over the package).
//
// The members are judged against a ground truth: every process each
// member ran (workers as the simulator starts and stops them, frontends
// sampled every 100 ms) and, at each sample, which frontends considered
// themselves leader and which links to them were cut or faulty
// (frontendtest.Network.Link). Then:
//
//   - no query's part is cancelled unless a process it depends on ended
//     (a restart, a stop, a closed registry) or, for a death, was cut off
//     from a self-styled leader at some point of its life (a leader may
//     decide a death long before its proposal commits);
//   - a worker's restart or stop cancels the queries on its old process
//     within the README's bound (2 heartbeat intervals from the new
//     process's start, 4 from the stop), wherever the cluster could act
//     on it throughout: one leader, with a quorum of the voters of its
//     membership over clean links (observers, joined ones too, do not
//     count), clean links to the coordinator and the worker (for a stop,
//     all along: a delayed link delays the missed heartbeats), the
//     coordinator running and in the leader's membership, since a
//     removed frontend receives no entry (Result.Bounded counts them);
//   - a cancellation for a removal needs a removal of that member that
//     had started by then; every removed member's queries registered before the
//     removal returned have their dependent parts cancelled (the
//     coordinator's for a worker, every fragment for a coordinator)
//     within the death bound of its return, wherever the cluster could
//     act on it throughout (checkRemovalBound); for the members a
//     forced new cluster left out, within the death bound of the old
//     processes' silence plus the workers' StaleAfter, while which a
//     worker that heard a higher term from one of them refuses the forced
//     cluster (removal.fenced); a restored cluster names the one it
//     replaced, so the workers move to it at once;
//   - every ended process cancels, by the end of the run, every part that
//     depends on it: the coordinator's part for a worker's, each fragment
//     for the coordinator's (the run ends the death bound and a heartbeat
//     interval after the recovery, and, while a sole voter's disk is
//     still slow, waits up to RecoveryBound more for them, as for a
//     write). A query that finished while the process still ran has no
//     part left to cancel: the query records, as it finishes, which of
//     its members still run its processes, since the ground truth dates
//     a cut-off worker's end at the sample before the one that shows its
//     fresh epoch;
//   - every watch session delivers events after its resume index only, in
//     log order, each once; any two sessions that covered an index saw the
//     same events there (a missed, repeated or misplaced event shows as a
//     disagreement); the final sessions, resumed on a quiet cluster, reach
//     the final index and end on every register's final value; a resume
//     fails with catalog.ErrCompacted only from below FirstIndex()-1;
//   - on every frontend, all along and at the end, read at one index: an
//     owned node whose owner's record version has ended there is gone or,
//     if its create asked, marked orphaned; one whose version is current
//     is there; a write with a fence on an epoch that frontend had
//     already seen end (a restart to another epoch, or a death, also one
//     the worker came back from: a worker cut off past the death bound
//     returns with a fresh epoch) is refused. The ground truth takes a
//     worker's fresh epoch as a new process from the sample that first
//     shows it.
//
// # Defects it finds
//
// Review findings reintroduced alone on scratch branches are found by
// its checks: linearizability (a sole voter's read index below an
// acknowledged write, an applied write reported as failed), the
// differential check (the dedupe window lost after an image), the
// liveness check (a sole voter on a slow disk), the cancellation checks
// (a false cancel after a double restart), the watch checks (a resume
// from FirstIndex()-1 refused) and the owned checks (a worker declared
// dead that came back alive with the epoch the log had ended, so that a
// fence on it held again). A quota decided on a local detail is found by
// the digests at one index and the differential check: a create's size
// counted with the tree's own numbers of its attribute keys, often in the
// runs with a bytes quota; the node count taken with the free slots,
// rarely. The recovery's checks find -force-new-cluster applying the
// survivor's own uncommitted removal from its log's tail (the new
// cluster gives no linearizable read, and the survivor answers 410
// removed) in the runs where the leader survives its quorum loss, and a
// force that keeps the lost members in its membership in every forced
// run.
//
// Its long runs find defects of the library itself, whose tests live in
// their packages: a member that has not applied a node's addition
// (cut off while it joined) has no address for it, cannot answer it once
// it leads, and stays behind for ever, which the replica-equality and
// liveness checks find when the leader it knew is removed (journal,
// TestLaggingObserverFollowsALeaderWhoseJoinItHasNotApplied); and an
// image store that, while the log is whole, prunes the image the journal
// then compacts the log up to, which the watch checks find as a resume
// refused from the image the log starts after (image,
// TestPruneKeepsEveryImageWhileTheLogIsWhole); and a registry that
// cancels a query's part on a worker's newest process when it catches up
// past several of the worker's transitions to an older process, which
// the cancellation checks find as a query cancelled while its worker
// ran, rarely (cancel,
// TestPartOnAnUnnamedEpochSurvivesASkipToAnOlderEpoch).
//
// # Open defects
//
// The fixed seeds of the plain test and CI's long run (.ci/run, as many
// seeds as fit in 240 s) gate: a failed seed fails CI, which prints its
// failures and the command that replays it. No failure of unknown cause
// is open. A failed query check prints, beside the registry's samples and
// the ground truth (eventlog.go), the member transitions the leaders
// journaled, the events each frontend's member view delivered and the
// events that cancelled queries (translog.go): enough to tell a leader
// that journaled a stale answer from a registry that misjudged an event.
//
// The catalog's quota refusing the leader's member transitions leaves a
// coordinator's part never cancelled; catalog.Quota.Exempt lets those
// transitions through (the frontend exempts heartbeat.ClusterPath).
//
// A failed query check prints, under its sentence, the evidence to
// judge it by (eventlog.go): the query's start and finish, the member's
// processes in the ground truth, each change of what the coordinator's
// registry knew of the member (epoch, status, index of the last event),
// sampled with the ground truth, and the samples around the process's
// end: a coordinator that missed an event shows a registry that never
// saw the end, a ground truth that dates an end wrongly shows a process
// ending where the samples show nothing.
//
// # Replaying a seed
//
// A failed run's report names the seed and the command that replays it:
//
//	go run ./examples/sim -seed S -v
//
// (-v traces each fault with its simulated time), or, as a test,
//
//	METATREE_SIM_SEED=S go test -run TestSimulatedSeedsPassEveryCheck -v ./examples/internal/sim/
//
// # How deterministic it is
//
// Go does not make goroutine scheduling deterministic, and inside the
// bubble the order in which runnable goroutines run still varies: the
// seed fixes every choice the simulator makes, not the order in which the
// cluster's own goroutines meet them. Measured on seed 1 run 20 times
// (Result.History, a hash of every operation and outcome in order, and
// Result.FaultHistory, of the faults alone): no two runs had the same
// whole history, and no two the same fault schedule (the recoveries and
// membership operations wait on the cluster's state, which the order of
// its goroutines moves). A replay therefore reruns the same kind of run,
// not the same one: a
// failure that depends on a rare interleaving may need the seed run a few
// times (-seeds with -from S reruns nearby seeds too).
package sim
