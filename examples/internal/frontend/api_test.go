package frontend

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	fe "github.com/metatree/metatree/examples/frontend"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/examples/internal/worker"
	"github.com/metatree/metatree/journal"
)

// A write on a halted node answers 503 halted, not 503 closed (the error
// also wraps ErrClosed), naming the index; a write the cluster version
// cannot carry answers 409 unsupported_version.
func TestAPIErrorFormatVersions(t *testing.T) {
	halt := fmt.Errorf("journal: propose: %w: %w", journal.ErrClosed,
		&journal.HaltError{Index: 42, What: "entry", Version: 3, Err: journal.ErrUnknownVersion})
	_, encErr := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCheck, Path: "/a",
		Cond: catalog.Cond{Match: map[string]catalog.Value{"state": catalog.String("x")}}}}}.EncodeVersion(catalog.BatchV1)
	for _, tc := range []struct {
		err    error
		status int
		code   string
	}{
		{halt, http.StatusServiceUnavailable, "halted"},
		{encErr, http.StatusConflict, "unsupported_version"},
	} {
		var he *httpjson.Error
		if !errors.As(apiError(tc.err), &he) || he.Status != tc.status || he.Code != tc.code {
			t.Errorf("apiError(%v) = %v, want %d %s", tc.err, apiError(tc.err), tc.status, tc.code)
		}
	}
	var he *httpjson.Error
	if !errors.As(apiError(halt), &he) || !strings.Contains(he.Message, "index 42") || !strings.Contains(he.Message, "version 3") {
		t.Errorf("halted message %v does not name the index and version", he)
	}
}

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
		{fmt.Errorf("journal: propose: %w: %w", journal.ErrInvalidProposal, catalog.ErrUnknownVersion), http.StatusBadRequest, "bad_request"},
		// A write that may have applied says so, whatever ended its wait.
		{fmt.Errorf("journal: propose: %w: a copy may still apply: %w: %w", journal.ErrOutcomeUnknown, journal.ErrNoLeader, context.DeadlineExceeded), http.StatusServiceUnavailable, "outcome_unknown"},
	} {
		var he *httpjson.Error
		require.True(t, errors.As(apiError(tc.err), &he), "%v", tc.err)
		require.Equal(t, tc.status, he.Status, "%v", tc.err)
		require.Equal(t, tc.code, he.Code, "%v", tc.err)
	}
}

// A stopped applier's reason is in the status answer as "error"; a
// running one's answer has no such key.
func TestStatusNamesTheStoppedApplier(t *testing.T) {
	running := map[string]any{}
	addStatusError(running, journal.Status{})
	if _, ok := running["error"]; ok {
		t.Fatalf("running applier: %v", running)
	}
	halt := &journal.HaltError{Index: 42, What: "entry", Version: 3, Err: journal.ErrUnknownVersion}
	stopped := map[string]any{}
	addStatusError(stopped, journal.Status{Err: halt})
	if stopped["error"] != halt.Error() {
		t.Fatalf("halted applier: error %q, want %q", stopped["error"], halt.Error())
	}
}

func TestNegativeRequestTimeoutIsRefused(t *testing.T) {
	_, err := Start(t.Context(), Config{Config: fe.Config{ID: 1, Dir: t.TempDir(), Addr: freeAddr(t), Bootstrap: true, Insecure: true, RequestTimeout: -time.Second}})
	require.ErrorContains(t, err, "request timeout -1s: want a positive duration")
}

// TestStartRefusesWithoutCredentials: a frontend or a worker given no
// credential (token, TLS files, auth file) refuses to start with
// secure.ErrNoCredentials naming the flags, before it opens anything;
// Insecure lets it start.
func TestStartRefusesWithoutCredentials(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fe")
	_, err := Start(t.Context(), Config{Config: fe.Config{ID: 1, Dir: dir, Addr: freeAddr(t), Bootstrap: true}})
	require.ErrorIs(t, err, secure.ErrNoCredentials)
	require.ErrorContains(t, err, "-token, -tls-cert/-tls-key/-tls-ca or -auth-file")
	_, statErr := os.Stat(dir)
	require.ErrorIs(t, statErr, fs.ErrNotExist, "the refused frontend created its data dir")

	_, err = worker.Start(worker.Config{ID: 11, Addr: freeAddr(t)})
	require.ErrorIs(t, err, secure.ErrNoCredentials)
	require.ErrorContains(t, err, "-token or -tls-cert/-tls-key/-tls-ca")
	w, err := worker.Start(worker.Config{ID: 11, Addr: freeAddr(t), Insecure: true})
	require.NoError(t, err)
	require.NoError(t, w.Close())
	w, err = worker.Start(worker.Config{ID: 12, Addr: freeAddr(t), Token: "t"})
	require.NoError(t, err)
	require.NoError(t, w.Close())
}

// A member in corruption alarm answers reads and writes 503 corrupt (the
// refusal wraps ErrClosed too), and its status names the alarm: the kind,
// the index, the member and both digests; a member without one has a null
// alarm.
func TestCorruptionAlarmAnswers503CorruptAndShowsInStatus(t *testing.T) {
	ce := &journal.CorruptError{Index: 77, Format: 2, Local: []byte{0xaa}, Majority: []byte{0xbb}, Agreeing: []uint64{1, 3}}
	for _, err := range []error{
		fmt.Errorf("journal: propose: %w: %w", journal.ErrClosed, ce),
		fmt.Errorf("journal: read barrier: %w", ce),
		ce,
	} {
		var he *httpjson.Error
		require.True(t, errors.As(apiError(err), &he), "%v", err)
		require.Equal(t, http.StatusServiceUnavailable, he.Status, "%v", err)
		require.Equal(t, "corrupt", he.Code, "%v", err)
		require.Contains(t, he.Message, "index 77")
	}
	require.Nil(t, alarmJSON(journal.Status{ID: 2}))
	require.Nil(t, alarmJSON(journal.Status{ID: 2, Err: &journal.HaltError{Index: 4, What: "entry", Err: journal.ErrUnknownVersion}}))
	require.Equal(t, map[string]any{"kind": "corrupt", "index": uint64(77), "members": []uint64{2},
		"local": "aa", "majority": "bb", "digest_format": 2, "agreeing": []uint64{1, 3}, "detail": ce.Error()},
		alarmJSON(journal.Status{ID: 2, Err: ce}))
}
