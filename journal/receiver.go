package journal

import (
	"context"

	"go.etcd.io/raft/v3/raftpb"
)

// receiver is the journal's inbound side, the Receiver that Open hands to
// Transport.Start. Only a transport calls these methods, so they live on
// this value rather than on *Journal, whose method set is the user's API.
type receiver struct{ j *Journal }

var _ Receiver = receiver{}

func (r receiver) Receive(ctx context.Context, msgs []*raftpb.Message) error {
	return r.j.receive(ctx, msgs)
}

func (r receiver) HandleForward(ctx context.Context, req *ForwardRequest) (*ForwardResponse, error) {
	return r.j.handleForward(ctx, req)
}

func (r receiver) HandleJoin(ctx context.Context, req *JoinRequest) (*JoinResponse, error) {
	return r.j.handleJoin(ctx, req)
}

func (r receiver) ReportUnreachable(id uint64)       { r.j.reportUnreachable(id) }
func (r receiver) ReportRemoved(id uint64)           { r.j.reportRemoved(id) }
func (r receiver) ReportSnapshot(id uint64, ok bool) { r.j.reportSnapshot(id, ok) }
