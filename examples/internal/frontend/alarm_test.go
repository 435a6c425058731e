package frontend

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/examples/internal/secure"
	"github.com/metatree/metatree/journal"
)

// A member whose own catalog agrees shows the cluster's alarm in
// /v1/status: the voters that differ and the majority's digest, or, when
// no digest had a majority, every voter that reported and no_majority; a
// member without an alarm shows null.
func TestStatusShowsTheClusterAlarmOnHealthyMembers(t *testing.T) {
	require.Nil(t, alarmJSON(journal.Status{ID: 1}))
	got := alarmJSON(journal.Status{ID: 1, Alarm: &journal.Alarm{Index: 40, Format: 2, Members: []uint64{3}, Majority: []byte{0xab}}})
	require.Equal(t, "corrupt", got["kind"])
	require.Equal(t, uint64(40), got["index"])
	require.Equal(t, []uint64{3}, got["members"])
	require.Equal(t, "ab", got["majority"])
	require.Equal(t, 2, got["digest_format"], "the format of the digests compared")
	require.Equal(t, false, got["no_majority"])
	require.Contains(t, got["detail"], "index 40")

	got = alarmJSON(journal.Status{ID: 1, Alarm: &journal.Alarm{Index: 50, Members: []uint64{1, 2, 3}, NoMajority: true}})
	require.Equal(t, true, got["no_majority"])
	require.Equal(t, []uint64{1, 2, 3}, got["members"])
	require.NotContains(t, got, "majority")
	require.Contains(t, got["detail"], "writes stop cluster-wide")

	// The member's own alarm comes first: it names the member itself.
	ce := &journal.CorruptError{Index: 60, Local: []byte{1}, Majority: []byte{2}, Agreeing: []uint64{1, 2}}
	got = alarmJSON(journal.Status{ID: 3, Err: ce, Alarm: &journal.Alarm{Index: 60, Members: []uint64{3}, Majority: []byte{2}}})
	require.Equal(t, []uint64{3}, got["members"])
	require.Equal(t, "01", got["local"])
}

// A write refused cluster-wide because no digest had a majority answers
// 503 corrupt, naming the index.
func TestWriteRefusedWithoutAMajorityAnswers503Corrupt(t *testing.T) {
	err := fmt.Errorf("journal: propose: %w: at index 12 the voters [1 2 3] reported state digests of which none has a majority", journal.ErrCorrupt)
	var he *httpjson.Error
	require.True(t, errors.As(apiError(err), &he))
	require.Equal(t, http.StatusServiceUnavailable, he.Status)
	require.Equal(t, "corrupt", he.Code)
	require.Contains(t, he.Message, "index 12")
}

// POST /v1/alarm/clear needs the admin role, and on a member that knows
// of no alarm answers 200 with a null alarm.
func TestAlarmClearIsAnAdminRequestThatAnswersTheAlarm(t *testing.T) {
	require.Equal(t, secure.RoleAdmin, secure.RequiredRole(http.MethodPost, "/v1/alarm/clear"))

	f, ctx := startLeader(t)
	rec := httptest.NewRecorder()
	f.routes().ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/alarm/clear", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var out map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Contains(t, out, "alarm")
	require.Nil(t, out["alarm"])
}
