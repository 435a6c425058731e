// Package journaltest helps downstream projects test code built on the
// journal without real processes, and by default without sockets or disks,
// as net/http/httptest does for HTTP.
//
// [Network] is an in-memory network that implements journal.Transport for
// each node (one [Network.Transport] per node) with controls a test can
// flip at any time: [Network.Partition], [Network.Isolate], [Network.Drop],
// [Network.Delay] and [Network.Heal]. Random choices (drops, jitter) come
// from a seeded generator, so a failing run can be replayed with its seed.
//
// [Cluster] starts N journal nodes on one Network, each on its own
// in-memory filesystem (or a t.TempDir on disk), with fast ticks, and offers
// what tests need next: [Cluster.WaitLeader], [Cluster.Crash] (power cut:
// unsynced writes are lost), [Cluster.Stop], [Cluster.Restart] and
// [Cluster.WaitApplied]. Everything is closed by t.Cleanup.
//
// With [Options.Transport] set to [HTTP] the nodes talk over journal's own
// HTTP transport instead, each serving its Journal.Handler on a loopback
// port (mutual TLS with [Options.TLS]): the real wire, for tests and
// benchmarks of the transport itself; faults are then injected by stopping
// or crashing nodes, not on links. [Options.WrapFS] wraps each node's
// filesystem, to count or slow its syncs. With [HTTPInProcess] the nodes
// run journal's HTTP transport with no socket: its client is
// [HandlerClient], an http.RoundTripper that calls the handler of the node
// a request's host names ("node1", "node2", ...) directly, streaming the
// response through a pipe, so that the cluster runs in a synctest bubble
// on virtual time. Options.Configure sees each node's
// *journal.HTTPTransport in Config.Transport before Open.
//
// [Options.Host] runs a [Host] beside each run of a node, as a host
// process wires its own components (an image store, say) around the
// journal. With [Options.Unstarted] no node starts with the cluster: a
// test forms it one [Cluster.Restart] at a time, under faults, and
// [Cluster.RestartCrashingAt] cuts the power at a chosen disk step of a
// bootstrap, a join or a restart ([CrashFS] counts the steps).
//
// Message delivery is real concurrency (one goroutine per sending
// direction), not a deterministic simulation: use it to test behaviour that
// must hold under any interleaving, and the seed to vary the faults.
package journaltest
