package frontend

import (
	"fmt"
	"log/slog"

	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/internal/peerid"
)

// security is what the TLS flags and the auth file give a frontend: the
// certificate files (nil: plain HTTP) and the client API tokens (nil: the
// API is open).
type security struct {
	files  *peerid.Files
	tokens *secure.Tokens
}

// loadSecurity reads the TLS files and the auth file the config names, and
// warns about whatever is left unprotected.
func loadSecurity(cfg Config, log *slog.Logger) (security, error) {
	var sec security
	var err error
	if sec.files, err = secure.LoadTLS(cfg.TLSCert, cfg.TLSKey, cfg.TLSCA); err != nil {
		return sec, fmt.Errorf("TLS: %w", err)
	}
	if cfg.AuthFile != "" {
		if sec.tokens, err = secure.LoadAuthFile(cfg.AuthFile); err != nil {
			return sec, err
		}
	}
	if sec.tokens == nil {
		log.Warn("no -auth-file: the client API is open to anyone who reaches the port")
	}
	if sec.files == nil {
		log.Warn("no -tls-cert/-tls-key/-tls-ca: members and clients talk plain HTTP; the join token alone guards the member endpoints")
	}
	return sec, nil
}
