// Command metactl inspects, checks, backs up and restores metatree data
// dirs and images. Its command line, output and exit codes are fixed by
// examples/API.md ("metactl"):
//
//	metactl image status FILE|DIR
//	metactl image verify FILE
//	metactl image dump FILE
//	metactl journal status DIR
//	metactl journal entries DIR [-from N] [-to M]
//	metactl check [-dedupe-window N] DIR
//	metactl backup -from HOST:PORT -out FILE [-token T] [-tls-cert F -tls-key F -tls-ca F]
//	metactl restore -image FILE -dir DIR -id N -addr HOST:PORT [-token T]
//
// JSON goes to stdout (one object, or JSON lines for dumps and entries),
// problems to stderr. Exit codes: 0 success, 1 a problem found or an
// operation failed, 2 bad usage. The offline commands change nothing they
// read; the journal ones refuse a data dir a running metaserver holds
// (images can be read while it runs, and backup reads a running member).
package main
