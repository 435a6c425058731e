package frontend

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/journal"
)

// TestAPIErrorsOfFaults: the write refusals of issue 19 reach clients with
// the statuses and codes examples/API.md names.
func TestAPIErrorsOfFaults(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: the batch would leave 5 nodes (quota 4)", catalog.ErrQuota), http.StatusInsufficientStorage, "quota"},
		{fmt.Errorf("journal: propose: %w: 1 bytes free", journal.ErrNoSpace), http.StatusInsufficientStorage, "no_space"},
		{fmt.Errorf("%w: %w: sync journal/000002.log: io", journal.ErrClosed, fmt.Errorf("%w: x", journal.ErrHalted)), http.StatusServiceUnavailable, "halted"},
	} {
		var he *httpjson.Error
		require.True(t, errors.As(apiError(tc.err), &he), "%v", tc.err)
		require.Equal(t, tc.status, he.Status, "%v", tc.err)
		require.Equal(t, tc.code, he.Code, "%v", tc.err)
	}
}
