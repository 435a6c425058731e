// Command sim runs the cluster simulator (examples/internal/sim) over many
// seeds:
//
//	go run ./examples/sim -seeds N      run N seeds
//	go run ./examples/sim -duration D   run seeds until D of wall-clock time has passed
//	go run ./examples/sim -seed S -v    replay seed S, tracing every fault
//
// It prints one report line per seed (a failed one with its failures and
// the command that replays it) and, as its last line,
//
//	sim: seeds=N failed=F simulated=H h wall=S s
//
// and exits 1 when a seed failed, 2 on bad usage.
//
// Each seed runs inside a testing/synctest bubble, whose only entry point
// is synctest.Test with a *testing.T. The command therefore runs its seeds
// as one test through testing.Main, the testing package's entry point for
// programs that run tests without go test. Its reports and summary go to
// stdout; the testing package's own lines (a failed test's name, PASS or
// FAIL) go to stderr.
package main
