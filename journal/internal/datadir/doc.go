// Package datadir reads and writes the files of a journal's data dir
// beside its raft store: VERSION and ROLE (key=value files) and MEMBERS
// (the newest membership), each replaced durably (internal/durable). The
// running journal and the offline tools (journal/offline) share it, so
// both write and read the same formats; the golden files in
// journal/testdata/golden fix them.
//
// The package holds no state and starts no goroutine; its functions are
// safe for concurrent use on different dirs, and a dir's files are its
// owner's (the journal that holds the dir's lock, or the tool that does).
package datadir
