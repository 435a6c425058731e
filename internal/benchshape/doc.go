// Package benchshape holds what the module's benchmarks share: the shape of
// a Doris-like catalog ([Doris]), the process's and a thread's CPU time
// ([ProcessCPU], [ThreadCPU]), and BenchmarkMemoryLatency, which measures
// the machine's memory latency that cold reads are quoted against. Only
// tests import it; it imports nothing of metatree, so the catalog's own
// tests can use it too.
package benchshape
