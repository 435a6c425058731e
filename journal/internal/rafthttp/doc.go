// Package rafthttp is the journal's HTTP transport: raft messages between
// the members of one cluster, snapshots, forwarded proposals and joins,
// over HTTP. Package journal wraps it as journal.HTTPTransport and
// delivers to it through a [Node].
//
// # Contract
//
// The journal configures a [Transport] explicitly: [Options] (client, TLS,
// logger, queue and body bounds, timeouts, clock) at [New], then the local
// node id, the [Node] it delivers to and the [Identity] (cluster id and
// token) at [Transport.Start]. Every request it sends carries the
// identity and the node ids in headers ([HeaderCluster], [HeaderToken],
// [HeaderFrom], [HeaderTo]); its [Transport.Handler] refuses a request
// whose cluster id or token differ, that is addressed to another node, or
// (with TLS) whose client certificate does not name its sender.
//
// Raft messages travel on one long-lived streaming POST per peer
// ([PathStream]) in frames ([AppendFrame]: a length, then length-prefixed
// protobuf messages), each the stream's node's own but for the
// proposals and read requests raft relays in another member's name; a
// stream that carries any other message in another node's name, or a
// MsgSnap, ends as malformed. A MsgSnap goes alone on a request of its own
// ([PathSnapshot]), and the transport reports its outcome once through
// Node.ReportSnapshot. [Transport.Send] never blocks on the network: it
// queues (bounded in messages and bytes) and drops what does not fit,
// reporting the peer unreachable. Proposals ([PathPropose]) and joins
// ([PathJoin]) are request and answer. An error crosses the wire as a
// code and comes back as the same sentinel of journal/internal/errs
// ([WriteError]), so errors.Is holds on the sending side; a peer that
// could not be reached gives an error wrapping ErrUnreachable.
//
// # Goroutines
//
// The Transport owns one sender goroutine per peer (started by
// [Transport.SetPeer], stopped by [Transport.RemovePeer] once the peer's
// queue is delivered or after HandshakeTimeout), one per snapshot in
// flight, and the request goroutine of each open stream. [Transport.Close]
// stops them all and waits for them; after it the Handler answers
// ErrClosed and the Node is not called again. The Handler runs on the
// host's HTTP server goroutines and calls the Node from them.
package rafthttp
