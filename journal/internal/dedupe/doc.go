// Package dedupe is the journal's dedupe window: the idempotency keys that
// reached the log in the last window indexes, and the rule ([Window.Judge])
// that decides whether a copy of a user entry applies, is a duplicate, or
// expired. The decision depends only on the window and the entries in it,
// so every replica, restart and rebuild decides alike; the journal carries
// the window's keys ([Key]) in its membership records and images.
//
// A Window is not safe for concurrent use: the journal's applier owns its
// window, and a rebuild owns the one it builds. The package starts no
// goroutine.
package dedupe
