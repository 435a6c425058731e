package rafthttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/operr"
	"github.com/metatree/metatree/journal/internal/errs"
)

// A peer's error comes back as its sentinel, with the peer's message
// naming the package once.
func TestWireErrorRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		remote error
		want   string
		is     []error
	}{
		{
			name:   "wrapped sentinel",
			remote: operr.Errorf("journal: propose: %w: %w", errs.ErrNoLeader, context.DeadlineExceeded),
			want:   "journal: remote: propose: no leader: context deadline exceeded",
			is:     []error{errs.ErrNoLeader},
		},
		{
			name:   "bare sentinel",
			remote: errs.ErrRemoved,
			want:   "journal: remote: removed from the cluster",
			is:     []error{errs.ErrRemoved},
		},
		{
			name:   "message without the sentinel's text",
			remote: fmt.Errorf("journal: wal: %w", &http.MaxBytesError{Limit: 10}),
			want:   "journal: remote: malformed: too large: wal: http: request body too large",
			is:     []error{errTooLarge},
		},
		{
			name:   "proposal the leader's state machine refuses",
			remote: fmt.Errorf("%w: %w", errs.ErrInvalidProposal, errors.New("catalog: unknown format version: batch version 104")),
			want:   "journal: remote: invalid proposal: catalog: unknown format version: batch version 104",
			is:     []error{errs.ErrInvalidProposal},
		},
		{
			name:   "closed peer",
			remote: operr.Errorf("journal: read barrier: %w", errs.ErrClosed),
			want:   "journal: unreachable: remote: read barrier: closed",
			is:     []error{errs.ErrUnreachable, errs.ErrClosed},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, we := wireErrorOf(tc.remote)
			require.NotEqual(t, http.StatusInternalServerError, status)
			got := we.err(status)
			require.EqualError(t, got, tc.want)
			for _, s := range tc.is {
				require.ErrorIs(t, got, s)
			}
			// A local wrapper names the package once too.
			wrapped := operr.Errorf("journal: forward: %w", got)
			require.Equal(t, "journal: forward: "+tc.want[len("journal: "):], wrapped.Error())
			require.ErrorIs(t, wrapped, tc.is[0])
		})
	}
}

// An answer without a known code keeps the peer's text and names the
// status, or the code inside a stream.
func TestWireErrorUnknownCode(t *testing.T) {
	we := wireError{Code: "internal", Error: "journal: disk on fire"}
	require.EqualError(t, we.err(http.StatusInternalServerError), "journal: remote: HTTP 500: disk on fire")
	require.EqualError(t, we.err(0), "journal: remote: internal: disk on fire")
	for _, c := range errorCodes {
		require.False(t, errors.Is(we.err(500), c.err), "an unknown code wraps no sentinel, yet it is %v", c.err)
	}
}
