package secure

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseAuthFile(t *testing.T) {
	good := "# token role\n\n  tok-r   read\n\t# indented comment\ntok-w write\r\ntok-a\tadmin  \n"
	tk, err := ParseAuthFile(strings.NewReader(good))
	require.NoError(t, err)
	for token, want := range map[string]Role{"tok-r": RoleRead, "tok-w": RoleWrite, "tok-a": RoleAdmin} {
		role, ok := tk.Role(token)
		require.True(t, ok, token)
		require.Equal(t, want, role, token)
	}
	for _, token := range []string{"", "tok", "tok-r ", "TOK-R", "tok-rr", "#"} {
		_, ok := tk.Role(token)
		require.False(t, ok, "%q", token)
	}

	bad := []struct{ name, file, msg string }{
		{"empty", "", "no token"},
		{"comments only", "# a\n  # b\n", "no token"},
		{"no role", "secret\n", "line 1: want \"<token> <role>\""},
		{"three fields", "a read b\n", "line 1: want"},
		{"unknown role", "# c\nsecret root\n", "line 2: role \"root\""},
		{"role case", "secret Admin\n", "role \"Admin\""},
		{"twice", "s read\ns admin\n", "line 2: the token is listed twice"},
		{"long line", strings.Repeat("x", maxAuthLine+1) + " read\n", "over"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAuthFile(strings.NewReader(tc.file))
			require.ErrorContains(t, err, tc.msg)
			require.NotContains(t, err.Error(), "secret", "an error never shows a token")
		})
	}
}

func TestParseBearer(t *testing.T) {
	for _, tc := range []struct{ header, token string }{
		{"Bearer abc", "abc"},
		{"bearer abc", "abc"},
		{"BEARER  a.b-c_d~e+f/g==", "a.b-c_d~e+f/g=="},
	} {
		got, err := ParseBearer(tc.header)
		require.NoError(t, err, tc.header)
		require.Equal(t, tc.token, got)
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic abc", "Bearerabc", "Bearer a b", "Bearer a\tb", "Bearer é", "Token abc"} {
		_, err := ParseBearer(h)
		require.ErrorIs(t, err, ErrNoBearer, "%q", h)
	}
}

func TestRequiredRole(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         Role
	}{
		{"GET", "/livez", RoleNone}, {"GET", "/readyz", RoleNone}, {"GET", "/metrics", RoleNone},
		{"POST", "/raft/stream", RoleNone}, {"GET", "/image/latest", RoleNone}, {"POST", "/_heartbeat", RoleNone},
		{"GET", "/v1/status", RoleRead}, {"GET", "/v1/catalog/a", RoleRead}, {"GET", "/v1/members", RoleRead},
		{"GET", "/v1/watch", RoleRead}, {"GET", "/v1/find", RoleRead}, {"GET", "/v1/queries/q", RoleRead},
		{"PUT", "/v1/catalog/a", RoleWrite}, {"DELETE", "/v1/catalog/a", RoleWrite},
		{"POST", "/v1/txn", RoleWrite}, {"POST", "/v1/queries", RoleWrite},
		{"POST", "/v1/members", RoleAdmin}, {"DELETE", "/v1/members/3", RoleAdmin},
		{"POST", "/v1/members/3/promote", RoleAdmin}, {"POST", "/v1/leader", RoleAdmin},
		{"POST", "/v1/checkpoint", RoleAdmin}, {"POST", "/v1/catalog/a", RoleAdmin},
		{"PATCH", "/v1/txn", RoleAdmin}, {"GET", "/debug/pprof/", RoleAdmin},
	} {
		require.Equal(t, tc.want, RequiredRole(tc.method, tc.path), "%s %s", tc.method, tc.path)
	}
}

func TestAuthorize(t *testing.T) {
	tk, err := ParseAuthFile(strings.NewReader("r read\nw write\na admin\n"))
	require.NoError(t, err)
	var sawToken string
	h := Authorize(tk, "join", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sawToken = r.Header.Get(TokenHeader) }))
	do := func(method, path, auth string) int {
		req := httptest.NewRequest(method, path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	require.Equal(t, 401, do("GET", "/v1/status", ""))
	require.Equal(t, 401, do("GET", "/v1/status", "Bearer nope"))
	require.Equal(t, 200, do("GET", "/v1/status", "Bearer r"))
	require.Equal(t, 403, do("PUT", "/v1/catalog/x", "Bearer r"))
	require.Equal(t, 200, do("PUT", "/v1/catalog/x", "Bearer w"))
	require.Equal(t, 403, do("DELETE", "/v1/members/2", "Bearer w"))
	require.Equal(t, 200, do("DELETE", "/v1/members/2", "Bearer a"))
	require.Equal(t, 200, do("GET", "/livez", ""))
	require.Equal(t, 200, do("GET", "/image/latest", "Bearer w"))
	require.Empty(t, sawToken, "a write token does not stand for the join token")
	require.Equal(t, 200, do("GET", "/image/latest", "Bearer a"))
	require.Equal(t, "join", sawToken, "an admin token stands for the join token on image downloads")
}

func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer  x==", "Basic a", "", "Bearer \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		token, err := ParseBearer(header)
		if err != nil {
			require.ErrorIs(t, err, ErrNoBearer)
			require.Empty(t, token)
			return
		}
		require.NotEmpty(t, token)
		for i := 0; i < len(token); i++ {
			require.True(t, isToken68(token[i]))
		}
		again, err := ParseBearer("Bearer " + token)
		require.NoError(t, err)
		require.Equal(t, token, again)
	})
}

func FuzzParseAuthFile(f *testing.F) {
	for _, s := range []string{"a read\nb write\n# c\n\nd admin", "x", "a read\na read", "\xff admin"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, file string) {
		tk, err := ParseAuthFile(strings.NewReader(file))
		if err != nil {
			require.Nil(t, tk)
			return
		}
		require.NotEmpty(t, tk.entries)
		for _, e := range tk.entries {
			role, ok := tk.Role(string(e.token))
			require.True(t, ok)
			require.Equal(t, e.role, role)
			require.NotContains(t, string(e.token), " ")
			require.NotEqual(t, byte('#'), e.token[0])
		}
	})
}

// TestRequireCredentialsNamesTheFlags: without a credential and without
// -insecure the refusal is ErrNoCredentials naming the flags; either one
// lets the member start.
func TestRequireCredentialsNamesTheFlags(t *testing.T) {
	err := RequireCredentials(false, false, "-token or -tls-cert/-tls-key/-tls-ca")
	require.ErrorIs(t, err, ErrNoCredentials)
	require.Contains(t, err.Error(), "-token or -tls-cert/-tls-key/-tls-ca")
	require.Contains(t, err.Error(), "-insecure")
	require.NoError(t, RequireCredentials(true, false, "-token"))
	require.NoError(t, RequireCredentials(false, true, "-token"))
}
