//go:build race

package journal_test

// raceEnabled is set when the tests run with the race detector, which
// allocates beside the code it watches (TestProposeAllocations).
const raceEnabled = true
