// Package errs holds the journal's sentinel errors, so that the journal's
// internal packages (the HTTP transport, the envelope codec, the disk
// guard, the read rounds) return the very values package journal exports:
// journal re-exports each one under the same name (journal.ErrNotLeader is
// errs.ErrNotLeader) and documents it there. It holds no state and starts
// no goroutine.
package errs
