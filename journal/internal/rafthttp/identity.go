package rafthttp

import (
	"fmt"
	"net/http"

	"github.com/metatree/metatree/internal/peerid"
	"github.com/metatree/metatree/journal/internal/errs"
)

// checkIdentity applies the member-identity rule to a peer request that
// speaks for member claimed: a verified client certificate, when there is
// one, must name claimed, and with TLS configured there must be one. A
// refusal is answered 403 (errs.ErrPeerIdentity) and counted.
func (t *Transport) checkIdentity(w http.ResponseWriter, r *http.Request, claimed uint64) bool {
	err := peerid.Check(r, claimed, t.opts.TLS != nil)
	if err == nil {
		return true
	}
	t.refused.Add(1)
	t.log.Warn("refused a peer request", "path", r.URL.Path, "claimed", claimed, "remote", r.RemoteAddr, "err", err)
	WriteError(w, fmt.Errorf("%w: %w", errs.ErrPeerIdentity, err))
	return false
}

// RefusedPeers returns how many peer requests the Handler refused for the
// sender's identity: a certificate that did not name it (or, with TLS,
// none), or a stream carrying a message in another member's name that
// raft does not relay.
func (t *Transport) RefusedPeers() uint64 { return t.refused.Load() }
