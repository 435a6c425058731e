// Package frontendtest is a test kit for services that embed
// examples/frontend. Its Network is an in-process network of host:port
// addresses with symmetric and one-way partitions, addresses taken down,
// and delayed and reset links, on which real HTTP servers and clients run
// unchanged (inside a testing/synctest bubble too). Its Cluster runs
// frontends, the production assembly (frontend.Start with the Listener,
// Dial and FS seams), on one Network: leader, partitions, heal, stop,
// graceful shutdown and restart, and, on in-memory filesystems, power cuts
// that lose what was not synced.
package frontendtest
