package responder

import (
	"crypto/subtle"
	"errors"
	"net/http"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/internal/peerid"
)

// TokenHeader carries the cluster's token on a heartbeat request.
const TokenHeader = "X-Metatree-Token"

// errBadToken is a heartbeat without the token the member requires.
var errBadToken = errors.New("heartbeat: wrong or missing token")

// authenticate checks a heartbeat's credential before anything of it is
// looked at: the token when the config has one, and with PeerCerts a
// verified certificate naming the heartbeat's leader. A refusal is
// counted; it changes no other state.
func (r *Responder) authenticate(req *http.Request, hb *Request) error {
	var err error
	if r.cfg.Token != "" && subtle.ConstantTimeCompare([]byte(req.Header.Get(TokenHeader)), []byte(r.cfg.Token)) != 1 {
		err = errBadToken
	} else if cerr := peerid.Check(req, hb.Leader, r.cfg.PeerCerts); cerr != nil {
		err = operr.Errorf("heartbeat: from leader %d: %w", hb.Leader, cerr)
	}
	if err != nil {
		r.refused.Add(1)
		r.log.Warn("heartbeat refused", "leader", hb.Leader, "remote", req.RemoteAddr, "err", err)
	}
	return err
}
