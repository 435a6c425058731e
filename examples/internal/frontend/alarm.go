package frontend

import (
	"encoding/hex"
	"fmt"
	"net/http"

	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/journal"
)

// clusterAlarmJSON is /v1/status's "alarm" on a member whose own catalog
// agrees with the majority's (or that has no digest of its own at the
// mark): the cluster's alarm as the log tells it, naming the voters that
// differ, or, with "no_majority", every voter that reported when no digest
// had a majority (writes then stop cluster-wide). nil when there is none.
func clusterAlarmJSON(a *journal.Alarm) map[string]any {
	if a == nil {
		return nil
	}
	out := map[string]any{"kind": "corrupt", "index": a.Index, "members": a.Members, "no_majority": a.NoMajority}
	if a.NoMajority {
		out["detail"] = fmt.Sprintf("at index %d no state digest had a majority of the voters (voters %v reported): writes stop cluster-wide until the members that differ are replaced and the alarm is cleared (POST /v1/alarm/clear)", a.Index, a.Members)
	} else {
		out["majority"] = hex.EncodeToString(a.Majority)
		out["digest_format"] = a.Format
		out["detail"] = fmt.Sprintf("at index %d voters %v reported a state digest other than the majority's %s (digest format %d): replace them, then clear the alarm (POST /v1/alarm/clear)", a.Index, a.Members, hex.EncodeToString(a.Majority), a.Format)
	}
	return out
}

// postAlarmClear clears the cluster's consistency alarm (admin role):
// once the members it names were replaced, the alarm, and with it the
// cluster-wide stop of writes when no digest had a majority, ends on every
// member. It answers the status's alarm as this member sees it afterwards
// (null).
func (f *Frontend) postAlarmClear(w http.ResponseWriter, r *http.Request) error {
	if err := f.journal.ClearAlarm(r.Context()); err != nil {
		return apiError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"alarm": alarmJSON(f.journal.Status())})
	return nil
}
