// Package catalogtest holds what tests of other packages need of the
// catalog and nothing a host needs: SetAttr, which makes one replica's
// tree differ from the others' without going through the log, for tests
// of the checks that compare replicas (digests, image checks).
//
// It is for tests only. It owns no goroutines and keeps no state.
package catalogtest
