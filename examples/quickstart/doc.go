// Command quickstart runs a whole metatree cluster in one process: three
// frontends and two workers over loopback HTTP, with data dirs in a
// temporary directory. It writes a small catalog, reads it back on every
// frontend, runs demo queries and creates a task node owned by a worker's
// epoch, restarts that worker and shows the task node go with the queries
// the restart cancels, closes the leader and shows the failover, brings
// the old leader back, forces a checkpoint, and prints a timeline as it
// goes.
//
//	go run ./examples/quickstart
package main
