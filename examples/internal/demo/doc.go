// Package demo runs the example binaries' demo queries: a query on a
// frontend, its fragments on workers, each a context that sleeps for the
// query's duration unless package cancel cancels it first. It also holds the
// fragment protocol between the two binaries.
package demo
