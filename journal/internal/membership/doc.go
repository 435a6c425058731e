// Package membership is the journal's record of its cluster's members: the
// [Role] and [Member] types (package journal exports them as journal.Role
// and journal.Member), the [Membership] as of a log index with its JSON
// encoding, and the [ConfContext] a membership change carries in its raft
// ConfChange. The encodings are fixed by the golden files in
// journal/testdata/golden: the running journal writes them into its log's
// membership records, its images and the MEMBERS file, and the offline
// tools (journal/offline) read and write the same.
//
// Decoding never panics: bytes that do not decode fail with
// errs.ErrMalformed, a membership of a newer version with
// errs.ErrUnknownVersion. A Membership is plain data and not safe for
// concurrent use: its owner changes it (the journal's raft loop applies
// changes to a copy it then publishes). The package starts no goroutine.
package membership
