package journal

import (
	"context"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/metatree/metatree/journal/internal/membership"
)

// Transport carries all traffic between the nodes of one journal cluster.
//
// The journal talks to its peers only through this interface, so the same
// Journal runs over the default HTTP transport ([NewHTTPTransport], which is
// what [Open] uses when Config.Transport is nil) or over an in-memory network
// in tests (journal/journaltest). A Transport serves exactly one local node.
//
// Lifecycle, driven by the Journal that owns it:
//
//  1. Open calls Start once, before raft starts, with the local node id and
//     the Receiver through which the transport delivers inbound traffic.
//  2. SetPeer/RemovePeer are called whenever the membership changes (at
//     startup from the durable membership, then as conf changes apply).
//     SetPeer with a known id updates its address.
//  3. Send, Forward and Join may be called from any goroutine.
//  4. Close is called once by Journal.Close after raft has stopped; it stops
//     every goroutine the transport owns and waits for them. After Close the
//     transport must not call the Receiver.
//
// Delivery contract:
//
//   - Send never blocks on the network: it queues the messages (bounded, in
//     bytes and counts) and returns. A message that cannot be queued or
//     delivered is dropped and the journal is told via
//     Receiver.ReportUnreachable (raft retransmits; drops are normal).
//     A delivery the peer refuses with ErrRemoved is reported through
//     Receiver.ReportRemoved.
//     Messages to one peer should be delivered in order when delivered.
//   - A message of type MsgSnap must be delivered on its own (not behind
//     bulk traffic) and the transport MUST call Receiver.ReportSnapshot(to,
//     ok) exactly once for it, after the receiving node's
//     Receiver.Receive returned (ok = it returned nil). Receive does the
//     image fetch for MsgSnap before it returns, so this can take a while.
//   - Forward delivers a membership change to the node `to` (the leader
//     as this node knows it) and returns the leader's answer. The leader
//     also takes a data proposal this way; the journal sends its own inside
//     raft's messages (MsgProp). Errors the leader returns
//     must come back so that errors.Is works against the journal sentinels
//     (ErrNotLeader, ErrNoLeader, ErrUnsafeRemoval, ErrClosed, ...); a
//     transport failure is returned wrapped in ErrUnreachable.
//   - Join is sent to a helper by address (the joining node knows no ids
//     yet) and returns the helper's answer, with the same error rules.
//
// Security: the HTTP transport stamps every request with the cluster id and
// token and rejects requests whose id or token differ; with Config.TLS it
// also refuses a request whose client certificate does not name its
// sender. An in-memory transport may skip that.
type Transport interface {
	Start(local uint64, r Receiver) error
	SetPeer(id uint64, addr string)
	RemovePeer(id uint64)
	Send(msgs []*raftpb.Message)
	Forward(ctx context.Context, to uint64, req *ForwardRequest) (*ForwardResponse, error)
	Join(ctx context.Context, helperAddr string, req *JoinRequest) (*JoinResponse, error)
	Close() error
}

// Receiver is the journal's inbound side, handed to Transport.Start: a
// value the Journal makes for its transport alone (these calls are not
// part of *Journal). Its methods are safe for concurrent use and never
// block on raft's loop for longer than their context allows.
type Receiver interface {
	// Receive steps inbound raft messages into the local node. For a
	// MsgSnap it first makes the image durable (Snapshots.Fetch from the
	// sender's address) and returns only once raft has it, or an error.
	Receive(ctx context.Context, msgs []*raftpb.Message) error
	// HandleForward proposes a forwarded entry on this node, which must be
	// the leader (ErrNotLeader otherwise), and returns after it is applied
	// here with its index.
	HandleForward(ctx context.Context, req *ForwardRequest) (*ForwardResponse, error)
	// HandleJoin adds the joining node to the cluster (through the leader)
	// and returns the cluster id and membership.
	HandleJoin(ctx context.Context, req *JoinRequest) (*JoinResponse, error)
	// ReportUnreachable and ReportSnapshot feed raft's flow control.
	ReportUnreachable(id uint64)
	// ReportRemoved tells the local node that peer id refused its
	// messages with ErrRemoved: the peer applied the local node's removal.
	// A transport calls it whenever a delivery fails with that error.
	ReportRemoved(id uint64)
	ReportSnapshot(id uint64, ok bool)
}

// ForwardKind says what a forwarded proposal carries.
type ForwardKind uint8

const (
	// ForwardData is a user entry (ForwardRequest.Data is the user's bytes).
	ForwardData ForwardKind = 1
	// ForwardConfChange is a membership change (Data is an encoded
	// raftpb.ConfChange whose Context holds the peer's address).
	ForwardConfChange ForwardKind = 2
)

// ForwardRequest is a proposal sent by a non-leader to the leader.
type ForwardRequest struct {
	Kind ForwardKind
	// Key is the idempotency key: the leader (and every replica, at apply
	// time) applies an entry with a key it applied recently only once.
	Key [16]byte
	// Force allows a membership change that would leave the cluster without
	// a safe quorum (RemoveMember with force).
	Force bool
	Data  []byte
}

// ForwardResponse is the leader's answer: the entry is applied on the
// leader at Index (for a duplicate key, the index of the first copy).
type ForwardResponse struct {
	Index uint64
}

// JoinRequest asks a running member to admit a new node.
type JoinRequest struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	Role Role   `json:"role"`
	// ClusterID, when set, is the cluster the node expects to join: a
	// helper in another cluster refuses before admitting it.
	ClusterID string `json:"cluster_id,omitempty"`
	// MaxVersion is the newest format version the joining node reads (0:
	// it did not say, counted as OldestVersion); a cluster at a higher
	// version refuses it with ErrVersion.
	MaxVersion uint32 `json:"max_version,omitempty"`
	Token      string `json:"-"` // carried out of band by the HTTP transport header
}

// JoinResponse tells the joining node which cluster it joined and who is in
// it, so it can reach its peers before it has replayed the log.
type JoinResponse struct {
	ClusterID string   `json:"cluster_id"`
	Members   []Member `json:"members"`
	// ClusterVersion is the cluster's format version when the node was
	// admitted (0: the helper did not say).
	ClusterVersion uint32 `json:"cluster_version,omitempty"`
}

// Member is one node of the cluster as the membership records it: its ID,
// Addr and Role; MaxVersion, the newest format version it advertised when
// it joined (0: it did not say, counted as OldestVersion); and NoSpace, its
// no-space alarm: its data dir's disk is under Config.ReserveBytes. While
// a voter's is raised, the cluster refuses new writes (ErrNoSpace); the
// member clears it once it has space.
type Member = membership.Member
