package frontend

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	fe "github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/heartbeat/responder"
	"github.com/metatree/metatree/journal"
)

// readyz answers 200 when this frontend may take traffic: it serves, is a
// member of the cluster, knows a leader, has applied what was committed
// when it started, and is not stale; 503 with the first reason otherwise.
func (f *Frontend) readyz(w http.ResponseWriter, _ *http.Request) error {
	if !f.ready.Load() {
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": "starting"})
		return nil
	}
	if err := f.Ready(); err != nil {
		reason := strings.TrimPrefix(err.Error(), fe.ErrNotReady.Error()+": ")
		httpjson.Write(w, http.StatusServiceUnavailable, map[string]any{"ready": false, "reason": reason})
		return nil
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"ready": true})
	return nil
}

// memberJSON is one entry of GET /v1/members. Applied and Lag (frontends)
// come from the leader's raft progress, LastHeartbeatMS and Version from
// the leader's heartbeats: a non-leader asks the leader for them, and
// leaves them out when it cannot reach it.
type memberJSON struct {
	ID              uint64  `json:"id"`
	Addr            string  `json:"addr"`
	Kind            string  `json:"kind"`
	Role            string  `json:"role,omitempty"`
	Epoch           string  `json:"epoch"`
	Status          string  `json:"status"`
	Since           string  `json:"since,omitempty"`
	Applied         *uint64 `json:"applied,omitempty"`
	Lag             *uint64 `json:"lag,omitempty"`
	LastHeartbeatMS *int64  `json:"last_heartbeat_ms,omitempty"`
	Version         string  `json:"version,omitempty"`
}

// proxiedHeader marks a request one frontend passed on to the leader, so
// the leader answers it itself.
const proxiedHeader = "X-Metatree-Proxied"

func (f *Frontend) getMembers(w http.ResponseWriter, r *http.Request) error {
	if err := f.readable(r); err != nil {
		return err
	}
	if !f.journal.Status().IsLeader() && r.Header.Get(proxiedHeader) == "" {
		if f.proxyToLeader(w, r, nil) {
			return nil
		}
	}
	httpjson.Write(w, http.StatusOK, f.memberView(r.Context()))
	return nil
}

// memberView lists the members, with the leader's figures when this
// frontend leads.
func (f *Frontend) memberView(ctx context.Context) []memberJSON {
	st := f.journal.Status()
	roles := map[uint64]journal.Role{}
	for _, m := range st.Members {
		roles[m.ID] = m.Role
	}
	progress := map[uint64]journal.Progress{}
	var answers map[uint64]heartbeat.Answer
	if st.IsLeader() {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		prs, err := f.journal.Progress(pctx)
		cancel()
		if err == nil {
			for _, p := range prs {
				progress[p.ID] = p
			}
		}
		answers = f.members.Answers()
	}
	now := time.Now()
	out := []memberJSON{}
	for _, m := range f.members.Members() {
		j := memberJSON{ID: m.ID, Addr: m.Addr, Kind: m.Kind.String(), Role: m.Role, Epoch: m.PublishedEpoch().String(), Status: m.Status.String()}
		if !m.Since.IsZero() {
			j.Since = m.Since.UTC().Format(time.RFC3339Nano)
		}
		if role, ok := roles[m.ID]; ok && m.Kind == epoch.KindFrontend {
			j.Role = role.String() // the journal's, which promotion changes
		}
		if p, ok := progress[m.ID]; ok {
			applied, lag := p.Match, p.Lag
			if m.ID == st.ID {
				applied, lag = st.Applied, 0
			}
			j.Applied, j.Lag = &applied, &lag
		}
		if st.IsLeader() {
			if m.ID == st.ID {
				zero := int64(0)
				j.LastHeartbeatMS, j.Version = &zero, responder.DefaultVersion()
			} else if a, ok := answers[m.ID]; ok {
				ms := now.Sub(a.Last).Milliseconds()
				j.LastHeartbeatMS, j.Version = &ms, a.Version
			}
		}
		out = append(out, j)
	}
	return out
}

// promoteMember makes an observer a follower; 409 not_caught_up while it
// trails the leader's log by more than -promote-max-lag entries.
func (f *Frontend) promoteMember(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "member id %q is not a positive integer", r.PathValue("id"))
	}
	if m, ok := f.members.Member(id); !ok || m.Kind != epoch.KindFrontend {
		return httpjson.Errorf(http.StatusNotFound, "not_found", "no frontend %d", id)
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.cfg.RequestTimeout)
	defer cancel()
	if err := f.journal.Promote(ctx, id); err != nil {
		return apiError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"id": id, "role": "follower"})
	return nil
}

// postLeader transfers leadership to the voter named in the body and
// answers once it leads. A non-leader passes the request to the leader.
func (f *Frontend) postLeader(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID uint64 `json:"id"`
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<10))
	if err != nil {
		return httpjson.Errorf(http.StatusRequestEntityTooLarge, "too_large", "body over 1 KiB")
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	if err := httpjson.Decode(w, r, &body); err != nil {
		return err
	}
	st := f.journal.Status()
	voter := false
	for _, m := range st.Members {
		voter = voter || (m.ID == body.ID && m.Role == journal.Follower)
	}
	if !voter {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "%d is not a voting frontend (follower) of this cluster", body.ID)
	}
	if st.Leader == body.ID {
		httpjson.Write(w, http.StatusOK, map[string]any{"leader": body.ID})
		return nil
	}
	if !st.IsLeader() && r.Header.Get(proxiedHeader) == "" {
		if f.proxyToLeader(w, r, raw) {
			return nil
		}
		return httpjson.Errorf(http.StatusServiceUnavailable, "no_leader", "the leader (%d) cannot be reached", st.Leader)
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.cfg.RequestTimeout)
	defer cancel()
	if err := f.journal.TransferLeadership(ctx, body.ID); err != nil {
		return apiError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"leader": body.ID})
	return nil
}

// proxyToLeader sends r (with body) to the leader's API and copies its
// answer to w. It returns false, having written nothing, when no leader is
// known or it cannot be reached.
func (f *Frontend) proxyToLeader(w http.ResponseWriter, r *http.Request, body []byte) bool {
	st := f.journal.Status()
	var addr string
	for _, m := range st.Members {
		if m.ID == st.Leader && st.Leader != st.ID {
			addr = m.Addr
		}
	}
	if addr == "" {
		return false
	}
	ctx, cancel := context.WithTimeout(r.Context(), f.cfg.RequestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, r.Method, "http://"+addr+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set(proxiedHeader, strconv.FormatUint(f.cfg.ID, 10))
	// The caller's own credential travels on: the leader checks it as
	// this node did (every member reads the same auth file).
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		f.logger.Debug("passing a request to the leader failed", "leader", st.Leader, "err", err)
		return false
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, io.LimitReader(resp.Body, 16<<20))
	return true
}
