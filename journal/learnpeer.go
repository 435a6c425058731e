package journal

import "github.com/metatree/metatree/journal/internal/membership"

// A member that missed a membership change (cut off, or down, while a node
// joined) has no address for the members that change added: its membership
// names only the members it applied. When one of them leads, its appends
// reach this node, but this node cannot answer them, so the leader never
// learns how far behind it is and never sends it what it misses (entries,
// or an image), and the node stays behind for ever. The HTTP transport
// therefore stamps its requests with the sender's address
// (rafthttp.HeaderAddr), and the receiving node, while its membership
// does not name the sender, takes that address for it: it can answer,
// catch up, and apply the join, whose address replaces the one it
// learned.

// learnPeer takes addr as the address of member id while the applied
// membership does not name one: the transport can then reach id, and a
// snapshot id sends is fetched from it. A removed member is not learned,
// nor a sender while ForceNewCluster's fence refuses every one.
func (j *Journal) learnPeer(id uint64, addr string) {
	if addr == "" || id == j.id || j.fenceUntil.Load() != 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	m := j.mu.membership
	if m.Members[id].Addr != "" || m.IsRemoved(id) || j.mu.learned[id] == addr {
		return
	}
	if j.mu.learned == nil {
		j.mu.learned = map[uint64]string{}
	}
	j.mu.learned[id] = addr
	j.log.Info("a member this node has not applied the addition of reached it; taking the address it gives",
		"member", id, "addr", addr, "membership_index", m.Index)
	// Under j.mu: setMembership, which forgets a learned address once the
	// membership names the member or records its removal, runs before or
	// after this, never between the check and SetPeer.
	j.tr.SetPeer(id, addr)
}

// peerAddr returns the address of member id: the membership's, else the
// one learned from its requests ("" when neither).
func (j *Journal) peerAddr(m *membership.Membership, id uint64) string {
	if addr := m.Members[id].Addr; addr != "" {
		return addr
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.mu.learned[id]
}

// settleLearned forgets the learned addresses that m makes moot (called by
// setMembership with j.mu held): a member m names has its address from
// the log now, and one m records as removed leaves the transport with the
// other removed peers.
func (j *Journal) settleLearned(m *membership.Membership) {
	for id := range j.mu.learned {
		switch {
		case m.IsRemoved(id):
			delete(j.mu.learned, id)
			j.loop.removedPeers = append(j.loop.removedPeers, id)
		case m.Members[id].Addr != "":
			delete(j.mu.learned, id)
		}
	}
}
