package secure

import (
	"net/http"
	"strings"

	"github.com/metatree/metatree/examples/internal/httpjson"
)

// RequiredRole is the role a client API request needs, per the table of
// examples/API.md: RoleNone outside /v1/ (health, metrics and the member
// endpoints, which check their own credentials), RoleRead for a GET
// under /v1/, RoleWrite for catalog writes, transactions and queries, and
// RoleAdmin for everything else under /v1/ (members, leadership,
// checkpoints) and for /debug/.
func RequiredRole(method, path string) Role {
	switch {
	case strings.HasPrefix(path, "/debug/"):
		return RoleAdmin
	case !strings.HasPrefix(path, "/v1/"):
		return RoleNone
	case method == http.MethodGet || method == http.MethodHead:
		return RoleRead
	case strings.HasPrefix(path, "/v1/catalog/") && (method == http.MethodPut || method == http.MethodDelete),
		path == "/v1/txn" && method == http.MethodPost,
		path == "/v1/queries" && method == http.MethodPost:
		return RoleWrite
	}
	return RoleAdmin
}

// Authorize wraps the API handler: a request that needs a role must carry
// "Authorization: Bearer <token>" with a token of that role or stronger;
// without a known token it is answered 401 unauthenticated, with a weaker
// one 403 forbidden. With tokens nil everything passes (the API is open).
//
// Image downloads (/image/) are member traffic guarded by the join token;
// an admin token stands for it (metactl backup), so such a request goes on
// with the join token set.
func Authorize(tokens *Tokens, joinToken string, next http.Handler) http.Handler {
	if tokens == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		need := RequiredRole(r.Method, r.URL.Path)
		if need == RoleNone {
			if strings.HasPrefix(r.URL.Path, "/image/") {
				r = adminForImages(tokens, joinToken, r)
			}
			next.ServeHTTP(w, r)
			return
		}
		token, err := ParseBearer(r.Header.Get("Authorization"))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metatree"`)
			httpjson.WriteError(w, httpjson.Errorf(http.StatusUnauthorized, "unauthenticated", "%s %s needs a %s token: %v", r.Method, r.URL.Path, need, err))
			return
		}
		role, ok := tokens.Role(token)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metatree", error="invalid_token"`)
			httpjson.WriteError(w, httpjson.Errorf(http.StatusUnauthorized, "unauthenticated", "%s %s: unknown token", r.Method, r.URL.Path))
			return
		}
		if role < need {
			httpjson.WriteError(w, httpjson.Errorf(http.StatusForbidden, "forbidden", "%s %s needs the %s role; the token's is %s", r.Method, r.URL.Path, need, role))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// adminForImages returns r with the join token set when it carries an
// admin bearer token, else r unchanged.
func adminForImages(tokens *Tokens, joinToken string, r *http.Request) *http.Request {
	token, err := ParseBearer(r.Header.Get("Authorization"))
	if err != nil {
		return r
	}
	if role, ok := tokens.Role(token); !ok || role < RoleAdmin {
		return r
	}
	r = r.Clone(r.Context())
	r.Header.Set(TokenHeader, joinToken)
	return r
}
