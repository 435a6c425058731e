// Package offline is the journal's offline tooling: it reads and writes a
// node's data dir while no journal runs on it, for tools such as metactl
// and for a restore.
//
//   - [Inspect] opens a stopped node's dir read-only: its VERSION, ROLE
//     and MEMBERS files and its Pebble log. [Inspector.Status] says what
//     the dir records, [Inspector.Problems] checks what can be checked
//     offline, [Inspector.Entries] decodes the log ([DecodeEntry]), and
//     [Inspector.VerifyDigests] replays it into a state machine and
//     compares the state with the digests the voters reported at the
//     consistency check marks.
//   - [Seed] writes the journal part of a new dir from which journal.Open
//     starts one node as the only voter of a new cluster whose state is an
//     image (a restore, or a cluster forced anew from a backup), with the
//     membership [NewClusterMembership] derives from the image's.
//
// # Contract
//
// Every function here works on a data dir that no running journal holds:
// Inspect takes the dir's LOCK as a node does and fails with
// journal.ErrLocked while a node holds it (Pebble cannot be read beside
// its writer), and no node can start on the dir while an Inspector is
// open; Seed refuses a dir that already holds a VERSION file or a
// journal. What they read and write is the running journal's own format:
// the same encodings of the membership, the entry envelope and the dir's
// files (journal/internal), which the golden files in
// journal/testdata/golden fix.
//
// # Goroutines
//
// None: the package starts no goroutine, and an Inspector is not safe for
// concurrent use.
package offline
