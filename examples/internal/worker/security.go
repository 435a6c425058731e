package worker

import (
	"crypto/subtle"
	"net/http"

	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/internal/peerid"
)

// memberOnly serves h to members only: with TLS files a request needs a
// member certificate verified against the CA, with a token the cluster's
// token (constant-time compare); with neither, anyone.
func memberOnly(files *peerid.Files, token string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if files != nil {
			if _, err := peerid.FromRequest(r); err != nil {
				httpjson.WriteError(w, httpjson.Errorf(http.StatusForbidden, "forbidden", "members only: %v", err))
				return
			}
		} else if token != "" && subtle.ConstantTimeCompare([]byte(r.Header.Get(secure.TokenHeader)), []byte(token)) != 1 {
			httpjson.WriteError(w, httpjson.Errorf(http.StatusForbidden, "forbidden", "members only: wrong or missing token"))
			return
		}
		h.ServeHTTP(w, r)
	})
}
