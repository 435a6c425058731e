// Package envelope encodes and decodes the journal's entry envelope: the
// bytes of every normal raft entry the journal writes (a user entry with
// its idempotency key, a leader timestamp, a cluster version raise, a
// consistency check's mark, report or clear). The format is fixed by the
// golden files in journal/testdata/golden.
//
// Decoding never panics: bytes that do not decode fail with
// errs.ErrMalformed, a kind or operation of a newer format with
// errs.ErrUnknownVersion, which the journal never skips. A decoded
// envelope's data aliases the entry. The package holds no state and starts
// no goroutine; its functions are safe for concurrent use.
package envelope
