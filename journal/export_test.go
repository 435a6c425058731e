package journal

import (
	"context"

	"go.etcd.io/raft/v3/raftpb"
)

// CheckRemovalForTest runs on the raft loop the check that
// RemoveMember(id, false) runs on the leader, and returns its verdict
// without proposing anything.
func (j *Journal) CheckRemovalForTest(ctx context.Context, id uint64) error {
	cc := &raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode.Enum(), NodeId: new(id)}
	var err error
	if derr := j.do(ctx, func() { err = j.checkConfChange(cc, false) }); derr != nil {
		return derr
	}
	return err
}
