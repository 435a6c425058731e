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
// another frontend), unique creates under a precondition retried through
// other frontends, linearizable reads (a read barrier on any frontend,
// then its tree) and local reads. Meanwhile a nemesis injects one fault
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
// and a follower cut off while the others write and checkpoint past it,
// so that it catches up by installing an image.
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
// index they saw, from the first index its log holds an image for
// (Journal.FirstIndex()-1), or from an older index the log may no longer
// hold. Task nodes are created owned by a worker's current epoch
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
//     take effect at any time after its call;
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
//     fault too, on a running cluster;
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
//     on it throughout: one leader, with a quorum over clean links, clean
//     links to the coordinator and the worker, the coordinator running
//     (Result.Bounded counts them);
//   - every ended process cancels, by the end of the run, every part that
//     depends on it: the coordinator's part for a worker's, each fragment
//     for the coordinator's (the run ends the death bound and a heartbeat
//     interval after the recovery, and, while a sole voter's disk is
//     still slow, waits up to RecoveryBound more for them, as for a
//     write);
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
// fence on it held again).
//
// # Open defects
//
// None known. CI's long run reports its failing seeds without failing;
// the fixed seeds of the plain test gate.
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
// whole history, and the most common fault schedule came back in 3 to 5
// of the 20 (two series of 20). A replay therefore reruns the same kind of run, not the same one: a
// failure that depends on a rare interleaving may need the seed run a few
// times (-seeds with -from S reruns nearby seeds too).
package sim
