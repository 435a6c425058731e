package heartbeat

import "context"

// ownWriteKey marks the context of a Membership's own proposals. Its type
// is unexported, so no other package can make such a context.
type ownWriteKey struct{}

// OwnWrite reports whether ctx is the context a Membership proposes its own
// member records (under ClusterPath) with. A host that refuses its users'
// writes there at the journal (journal.Config.ProposalGuard) lets these
// through.
func OwnWrite(ctx context.Context) bool {
	own, _ := ctx.Value(ownWriteKey{}).(bool)
	return own
}

// ownWriteContext returns ctx marked as a Membership's own write.
func ownWriteContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, ownWriteKey{}, true)
}
