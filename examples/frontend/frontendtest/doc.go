// Package frontendtest is a test kit for services that embed
// examples/frontend. Its Network is an in-process network of host:port
// addresses with partitions, on which real HTTP servers and clients run
// unchanged (inside a testing/synctest bubble too). Its Cluster runs
// frontends, the production assembly (frontend.Start with the Listener and
// Dial seams), on one Network: leader, partitions, heal, stop and restart.
package frontendtest
