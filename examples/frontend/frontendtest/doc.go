// Package frontendtest is a test kit for services that embed
// examples/frontend. Its Network is an in-process network of host:port
// addresses with partitions, on which real HTTP servers and clients run
// unchanged inside a testing/synctest bubble.
package frontendtest
