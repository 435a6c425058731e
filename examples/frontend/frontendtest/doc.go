// Package frontendtest is a test kit for services that embed
// examples/frontend. Its Network is an in-process network of host:port
// addresses with symmetric and one-way partitions, addresses taken down,
// and delayed and reset links, on which real HTTP servers and clients run
// unchanged. Its Cluster runs frontends, the production assembly
// (frontend.Start with the Listener, Dial and FS seams), and workers (a
// heartbeat responder with its epoch feeding a cancel registry, as the
// example worker runs one) on one Network: leader, partitions, heal, stop,
// graceful shutdown and restart of frontends and workers, frontends that
// join the running cluster (JoinFrontend, as a metaserver's -join does)
// and workers added again after their removal (ReaddWorker), power cuts that
// lose what was not synced (on in-memory filesystems), an operator's
// recoveries (ForceNewCluster after a quorum loss, as a metaserver's
// -force-new-cluster does; Backup and Restore into a new cluster, as
// metactl backup and restore do), and queries
// spanning a coordinator frontend and workers (Cluster.StartQuery) that
// are cancelled when any of them restarts or dies.
//
// The whole kit runs inside a testing/synctest bubble, Pebble on the test's
// temp dir or on in-memory filesystems: heartbeat rounds, deaths and
// elections then take virtual time.
package frontendtest
