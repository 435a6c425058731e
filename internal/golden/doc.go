// Package golden compares the bytes a test encodes with a file checked in
// under the package's testdata, for the on-disk and on-wire formats a
// version of metatree writes. A golden test encodes a fixed input and
// compares it with the file (Check), and decodes the file and checks what
// it holds (Read), so an encoder's output for the same input never changes
// unless the format's version does, and files written by this version stay
// readable by every later one.
//
// Running a package's tests with -update rewrites the files from what the
// tests encode; review the diff. A changed file of an existing format
// version is a format change: give it a new version (a new file) instead,
// and keep the old file and its decoding test.
package golden
