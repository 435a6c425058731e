package journal_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
)

// TestJoinTokenNeverInURL: a joining node sends its join token in a
// header, never in the URL a proxy or an access log would record.
func TestJoinTokenNeverInURL(t *testing.T) {
	const token = "join-tok-4f2a"
	var mu sync.Mutex
	var urls, headers []string
	helper := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		urls = append(urls, r.URL.String())
		headers = append(headers, r.Header.Get("X-Metatree-Token"))
		mu.Unlock()
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer helper.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := journal.Open(ctx, journal.Config{ID: 2, Dir: t.TempDir(), Addr: "127.0.0.1:1", Join: strings.TrimPrefix(helper.URL, "http://"),
		Token: token, StateMachine: &countSM{}})
	require.Error(t, err)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, urls, "the joiner asked the helper")
	for i, u := range urls {
		require.NotContains(t, u, token, "request URL %q", u)
		require.Equal(t, token, headers[i], "the token travels in its header")
	}
}
