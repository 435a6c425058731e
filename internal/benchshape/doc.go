// Package benchshape holds what the module's benchmarks share: the shape of
// a Doris-like catalog ([Doris]) and the process's CPU time
// ([ProcessCPU]). Only tests import it; it imports nothing of metatree, so
// the catalog's own tests can use it too.
package benchshape
