package frontend

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metatree/metatree/cancel"
	"github.com/metatree/metatree/catalog"
	fe "github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/internal/demo"
	"github.com/metatree/metatree/examples/internal/httpjson"
	"github.com/metatree/metatree/examples/internal/ops"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/image"
	"github.com/metatree/metatree/journal"
)

// routes mounts the API of examples/API.md; the public frontend serves
// the member endpoints (raft, images, heartbeats) beside it.
func (f *Frontend) routes() http.Handler {
	mux := http.NewServeMux()
	api := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, f.when(func() http.Handler { return httpjson.Handler(h) }))
	}
	// Operations: probes and metrics need no token.
	mux.HandleFunc("GET /livez", ops.Livez)
	mux.Handle("GET /readyz", httpjson.Handler(f.readyz))
	mux.Handle("GET /metrics", f.when(func() http.Handler { return f.metrics }))
	if f.cfg.Pprof {
		ops.MountPprof(mux)
	}
	api("POST /v1/members/{id}/promote", f.promoteMember)
	api("POST /v1/leader", f.postLeader)
	api("GET /v1/status", f.getStatus)
	api("GET /v1/catalog/{path...}", f.getNode)
	api("PUT /v1/catalog/{path...}", f.putNode)
	api("DELETE /v1/catalog/{path...}", f.deleteNode)
	api("POST /v1/txn", f.postTxn)
	api("GET /v1/find", f.find)
	api("GET /v1/watch", f.watch)
	api("GET /v1/members", f.getMembers)
	api("POST /v1/members", f.postMember)
	api("DELETE /v1/members/{id}", f.deleteMember)
	api("POST /v1/checkpoint", f.postCheckpoint)
	api("POST /v1/alarm/clear", f.postAlarmClear)
	api("POST /v1/queries", f.postQuery)
	api("GET /v1/queries/{id}", f.getQuery)
	mux.Handle("/", httpjson.NotFound)
	return mux
}

// when serves h once Start has wired every part, and 503 before and from
// Close on.
func (f *Frontend) when(h func() http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.ready.Load() {
			// Close the connection rather than drain the body: a peer's
			// raft stream is an endless request body, and the server would
			// otherwise read it before it sends this answer.
			w.Header().Set("Connection", "close")
			httpjson.WriteError(w, httpjson.Errorf(http.StatusServiceUnavailable, "starting", "frontend %d is starting or stopping", f.cfg.ID))
			return
		}
		h().ServeHTTP(w, r)
	})
}

// apiError maps the library's errors to the statuses of examples/API.md.
func apiError(err error) error {
	var he *httpjson.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &he):
		return he
	case errors.Is(err, journal.ErrOutcomeUnknown):
		// Before the causes it wraps (no leader, a deadline, a halt): the
		// write may have applied, so the client reads before writing again.
		return httpjson.Errorf(http.StatusServiceUnavailable, "outcome_unknown", "%v", err)
	case errors.Is(err, journal.ErrCorrupt):
		// Before ErrClosed, which a refusal on a member in alarm wraps too.
		return httpjson.Errorf(http.StatusServiceUnavailable, "corrupt", "%v", err)
	case errors.Is(err, journal.ErrHalted):
		return httpjson.Errorf(http.StatusServiceUnavailable, "halted", "%v", err)
	case errors.Is(err, journal.ErrRemoved):
		return httpjson.Errorf(http.StatusGone, "removed", "%v", err)
	case errors.Is(err, journal.ErrStale):
		return httpjson.Errorf(http.StatusServiceUnavailable, "stale", "%v", err)
	case errors.Is(err, journal.ErrNoLeader), errors.Is(err, journal.ErrNotLeader),
		errors.Is(err, journal.ErrUnreachable), errors.Is(err, context.DeadlineExceeded):
		return httpjson.Errorf(http.StatusServiceUnavailable, "no_leader", "%v", err)
	case errors.Is(err, journal.ErrTooLarge):
		return httpjson.Errorf(http.StatusRequestEntityTooLarge, "too_large", "%v", err)
	case errors.Is(err, journal.ErrBusy):
		return httpjson.Errorf(http.StatusServiceUnavailable, "busy", "%v", err)
	case errors.Is(err, journal.ErrNotCaughtUp):
		return httpjson.Errorf(http.StatusConflict, "not_caught_up", "%v", err)
	case errors.Is(err, journal.ErrUnsafeRemoval):
		return httpjson.Errorf(http.StatusConflict, "unsafe_removal", "%v", err)
	case errors.Is(err, catalog.ErrNotFound), errors.Is(err, heartbeat.ErrNotFound), errors.Is(err, journal.ErrUnknownMember):
		return httpjson.Errorf(http.StatusNotFound, "not_found", "%v", err)
	case errors.Is(err, journal.ErrNoSpace):
		return httpjson.Errorf(http.StatusInsufficientStorage, "no_space", "%v", err)
	case errors.Is(err, catalog.ErrQuota):
		return httpjson.Errorf(http.StatusInsufficientStorage, "quota", "%v", err)
	case errors.Is(err, catalog.ErrConflict):
		return httpjson.Errorf(http.StatusConflict, "conflict", "%v", err)
	case errors.Is(err, catalog.ErrExists), errors.Is(err, heartbeat.ErrExists):
		return httpjson.Errorf(http.StatusConflict, "exists", "%v", err)
	case errors.Is(err, catalog.ErrNotEmpty):
		return httpjson.Errorf(http.StatusConflict, "not_empty", "%v", err)
	case errors.Is(err, catalog.ErrInvalid), errors.Is(err, catalog.ErrInvalidName),
		errors.Is(err, catalog.ErrMalformed), errors.Is(err, heartbeat.ErrInvalid),
		errors.Is(err, journal.ErrInvalidProposal), errors.Is(err, fe.ErrReserved):
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "%v", err)
	case errors.Is(err, journal.ErrHalted):
		return httpjson.Errorf(http.StatusServiceUnavailable, "halted", "%v", err)
	case errors.Is(err, catalog.ErrUnsupportedVersion):
		return httpjson.Errorf(http.StatusConflict, "unsupported_version", "%v", err)
	case errors.Is(err, journal.ErrClosed), errors.Is(err, image.ErrClosed):
		return httpjson.Errorf(http.StatusServiceUnavailable, "closed", "%v", err)
	}
	return err
}

func (f *Frontend) getStatus(w http.ResponseWriter, _ *http.Request) error {
	st := f.journal.Status()
	role := "follower"
	if st.Role == journal.Observer {
		role = "observer"
	}
	out := map[string]any{
		"id": st.ID, "cluster_id": st.ClusterID, "epoch": f.Epoch().String(),
		"role": role, "state": raftState(st), "leader": st.Leader, "term": st.Term,
		"applied": st.Applied, "committed": st.Committed, "image": st.Image, "stale": st.Stale,
		"cluster_version": st.ClusterVersion,
		"checkpoint":      checkpointJSON(f.ckpt.Status()),
	}
	addStatusError(out, st)
	out["alarm"] = alarmJSON(st)
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

// alarmJSON is /v1/status's "alarm": nil, or this member's corruption
// alarm (its catalog differs from the majority's) with the index, the
// member and the digests.
func alarmJSON(st journal.Status) map[string]any {
	var ce *journal.CorruptError
	if !errors.As(st.Err, &ce) {
		return clusterAlarmJSON(st.Alarm)
	}
	return map[string]any{"kind": "corrupt", "index": ce.Index, "members": []uint64{st.ID},
		"local": hex.EncodeToString(ce.Local), "majority": hex.EncodeToString(ce.Majority), "digest_format": ce.Format,
		"agreeing": ce.Agreeing, "detail": ce.Error()}
}

// addStatusError adds, while the applier is stopped (Status.Err: halted
// at an entry this binary cannot read, or a failed store), the reason as
// "error", so that an operator sees why applied stopped moving.
func addStatusError(out map[string]any, st journal.Status) {
	if st.Err != nil {
		out["error"] = st.Err.Error()
	}
}

// checkpointJSON is the checkpointer's state in the status answer.
func checkpointJSON(cs image.CheckpointStatus) map[string]any {
	out := map[string]any{"running": cs.Running, "last_index": cs.Last.Index, "written": cs.Written,
		"adopted": cs.Adopted, "last_source": cs.LastSource, "failures": cs.Failures}
	if cs.LastError != nil {
		out["last_error"] = cs.LastError.Error()
	}
	return out
}

// raftState names raft's state as examples/API.md does.
func raftState(st journal.Status) string {
	switch {
	case st.Role == journal.Observer:
		return "learner"
	case st.State == journal.StateLeader:
		return "leader"
	case st.State == journal.StateCandidate || st.State == journal.StatePreCandidate:
		return "candidate"
	}
	return "follower"
}

// nodeJSON is a node as the API shows it.
type nodeJSON struct {
	ID       uint64                   `json:"id"`
	Path     string                   `json:"path"`
	Name     string                   `json:"name"`
	Kind     string                   `json:"kind"`
	Attrs    map[string]catalog.Value `json:"attrs"`
	Created  uint64                   `json:"created"`
	Modified uint64                   `json:"modified"`
	Children []string                 `json:"children,omitempty"`
	// Owner: the member whose epoch owns the node, which goes (or, with
	// OnOwnerLost "orphan", is marked) when that epoch ends.
	Owner       *ownerJSON `json:"owner,omitempty"`
	OnOwnerLost string     `json:"on_owner_lost,omitempty"`
}

func (f *Frontend) view(n catalog.Node, children bool) nodeJSON {
	v := nodeJSON{ID: n.ID, Path: n.Path, Name: n.Name, Kind: n.Kind, Attrs: n.Attrs, Created: n.Created, Modified: n.Modified}
	v.Owner, v.OnOwnerLost = f.ownerView(n.Path)
	if v.Attrs == nil {
		v.Attrs = map[string]catalog.Value{}
	}
	if children {
		v.Children = f.tree.Children(n.Path)
		if v.Children == nil {
			v.Children = []string{}
		}
	}
	return v
}

// catalogPath turns the {path...} wildcard into a catalog path.
func catalogPath(r *http.Request) (string, error) {
	p := "/" + strings.Trim(r.PathValue("path"), "/")
	if err := catalog.ValidPath(p); err != nil {
		return "", httpjson.Errorf(http.StatusBadRequest, "bad_request", "%v", err)
	}
	return p, nil
}

// writable refuses writes under the cluster's own records (members,
// heartbeat monitor): they change only through /v1/members and the
// heartbeats, and a client deleting them would unregister every node.
func writable(p string) error {
	if fe.Reserved(p) {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "%s is reserved for the cluster's own records", p)
	}
	return nil
}

// readable refuses a read that this frontend cannot serve as asked: a
// linearizable read waits for a ReadIndex; a local read fails while this
// frontend is stale.
func (f *Frontend) readable(r *http.Request) error {
	switch c := r.URL.Query().Get("consistency"); c {
	case "linearizable":
		ctx, cancel := context.WithTimeout(r.Context(), f.cfg.RequestTimeout)
		defer cancel()
		return apiError(f.journal.ReadBarrier(ctx))
	case "", "local":
		return apiError(f.journal.CheckFresh())
	default:
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "consistency %q: want local or linearizable", c)
	}
}

func (f *Frontend) getNode(w http.ResponseWriter, r *http.Request) error {
	p, err := catalogPath(r)
	if err != nil {
		return err
	}
	if err := f.readable(r); err != nil {
		return err
	}
	n, ok := f.tree.Get(p)
	if !ok {
		return httpjson.Errorf(http.StatusNotFound, "not_found", "no node at %s", p)
	}
	httpjson.Write(w, http.StatusOK, f.view(n, true))
	return nil
}

type putBody struct {
	Kind       string                   `json:"kind"`
	Attrs      map[string]catalog.Value `json:"attrs"`
	IfModified uint64                   `json:"if_modified"`
	IfAbsent   bool                     `json:"if_absent"`
	// Owner makes the PUT a create of a node owned by this member's epoch
	// (see owned.go); OnOwnerLost says what its end does to the node.
	Owner       *memberEpoch `json:"owner"`
	OnOwnerLost string       `json:"on_owner_lost"`
	// IfEpoch: the write applies only while this member's epoch is
	// current.
	IfEpoch *memberEpoch `json:"if_epoch"`
}

// putNode creates the node, or updates its attributes when it exists. With
// an owner it only creates: 409 exists when the node exists.
func (f *Frontend) putNode(w http.ResponseWriter, r *http.Request) error {
	p, err := catalogPath(r)
	if err != nil {
		return err
	}
	if err := writable(p); err != nil {
		return err
	}
	var body putBody
	if err := httpjson.Decode(w, r, &body); err != nil {
		return err
	}
	op := catalog.Op{Type: catalog.OpCreate, Path: p, Kind: body.Kind, Set: body.Attrs, Cond: catalog.Cond{Modified: body.IfModified}}
	createOnly := body.IfAbsent || body.Owner != nil
	if body.Owner == nil && body.OnOwnerLost != "" {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "on_owner_lost without an owner")
	}
	if _, exists := f.tree.Get(p); exists && !createOnly {
		// An update must find the node as this frontend saw it; if it
		// vanished meanwhile the batch fails rather than recreating it.
		op.Type = catalog.OpUpdate
	} else if body.Kind == "" {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "creating %s needs a kind", p)
	}
	var checks epochChecks
	if body.IfEpoch != nil {
		if err := checks.ifEpoch(body.IfEpoch); err != nil {
			return err
		}
	}
	if body.Owner != nil {
		if op.Owner, err = f.owner(&checks, "owner", body.Owner, body.OnOwnerLost); err != nil {
			return err
		}
	}
	batch := func() catalog.Batch { return catalog.Batch{Ops: append(slices.Clip(checks.ops), op)} }
	res, err := f.write(r, &checks, batch())
	if op.Type == catalog.OpCreate && !createOnly && res != nil && errors.Is(res.Err, catalog.ErrExists) {
		// The node was created after this frontend looked: by another
		// client, or before this frontend (a follower that lags) applied
		// it. The PUT updates it, as it would have.
		op.Type = catalog.OpUpdate
		res, err = f.write(r, &checks, batch())
	}
	if err != nil {
		return err
	}
	n, _ := f.tree.Get(p)
	httpjson.Write(w, http.StatusOK, map[string]any{"index": res.Index, "node": f.view(n, false)})
	return nil
}

func (f *Frontend) deleteNode(w http.ResponseWriter, r *http.Request) error {
	p, err := catalogPath(r)
	if err != nil {
		return err
	}
	if err := writable(p); err != nil {
		return err
	}
	q := r.URL.Query()
	op := catalog.Op{Type: catalog.OpDelete, Path: p, Recursive: q.Get("recursive") == "true"}
	if s := q.Get("if_modified"); s != "" {
		if op.Cond.Modified, err = strconv.ParseUint(s, 10, 64); err != nil {
			return httpjson.Errorf(http.StatusBadRequest, "bad_request", "if_modified %q: %v", s, err)
		}
	}
	res, err := f.commit(r.Context(), catalog.Batch{Ops: []catalog.Op{op}})
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"index": res.Index})
	return nil
}

type txnOp struct {
	Op         string                   `json:"op"`
	Path       string                   `json:"path"`
	Kind       string                   `json:"kind"`
	Attrs      map[string]catalog.Value `json:"attrs"`
	IfModified uint64                   `json:"if_modified"`
	IfAbsent   bool                     `json:"if_absent"`
	// IfMatch: the node's attributes hold these values (catalog.Cond.Match;
	// batch format 2, refused with unsupported_version while the cluster
	// version is 1).
	IfMatch   map[string]catalog.Value `json:"if_match"`
	Recursive bool                     `json:"recursive"`
	// Owner (create only): the node goes when this member's epoch ends,
	// or is marked, with OnOwnerLost "orphan" (catalog.Op.Owner; batch
	// format 3, refused with unsupported_version while the cluster
	// version is below 4).
	Owner       *memberEpoch `json:"owner"`
	OnOwnerLost string       `json:"on_owner_lost"`
}

func (f *Frontend) postTxn(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Ops []txnOp `json:"ops"`
		// IfEpoch: the txn applies only while this member's epoch is
		// current.
		IfEpoch *memberEpoch `json:"if_epoch"`
	}
	if err := httpjson.Decode(w, r, &body); err != nil {
		return err
	}
	if len(body.Ops) == 0 {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "a txn needs at least one op")
	}
	var checks epochChecks
	if body.IfEpoch != nil {
		if err := checks.ifEpoch(body.IfEpoch); err != nil {
			return err
		}
	}
	var ops []catalog.Op
	for i, o := range body.Ops {
		op := catalog.Op{Path: o.Path, Cond: catalog.Cond{Modified: o.IfModified, Absent: o.IfAbsent, Match: o.IfMatch}}
		if o.Op != "check" {
			if fe.Reserved(path.Clean("/" + o.Path)) {
				return httpjson.Errorf(http.StatusBadRequest, "bad_request", "ops[%d]: %s is reserved for the cluster's own records", i, o.Path)
			}
		}
		switch o.Op {
		case "create":
			op.Type, op.Kind, op.Set = catalog.OpCreate, o.Kind, o.Attrs
		case "update":
			op.Type, op.Kind, op.Set = catalog.OpUpdate, o.Kind, o.Attrs
		case "delete":
			op.Type, op.Recursive = catalog.OpDelete, o.Recursive
		case "check":
			op.Type = catalog.OpCheck
			if !o.IfAbsent && o.IfModified == 0 && len(o.IfMatch) == 0 {
				op.Cond.Exists = true
			}
		default:
			return httpjson.Errorf(http.StatusBadRequest, "bad_request", "ops[%d].op %q: want create, update, delete or check", i, o.Op)
		}
		if o.Owner == nil && o.OnOwnerLost != "" {
			return httpjson.Errorf(http.StatusBadRequest, "bad_request", "ops[%d]: on_owner_lost without an owner", i)
		}
		if o.Owner != nil {
			if op.Type != catalog.OpCreate {
				return httpjson.Errorf(http.StatusBadRequest, "bad_request", "ops[%d]: an owner is for a create, not %s", i, o.Op)
			}
			var err error
			if op.Owner, err = f.owner(&checks, fmt.Sprintf("ops[%d].owner", i), o.Owner, o.OnOwnerLost); err != nil {
				return err
			}
		}
		ops = append(ops, op)
	}
	res, err := f.write(r, &checks, catalog.Batch{Ops: append(checks.ops, ops...)})
	if err != nil {
		return err
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"index": res.Index})
	return nil
}

// find answers through the catalog's secondary index. A query-string value
// is text; it also matches an integer or boolean attribute it parses as.
func (f *Frontend) find(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	kind, attr := q.Get("kind"), q.Get("attr")
	if kind == "" || attr == "" || !q.Has("value") {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "find needs kind, attr and value")
	}
	if err := f.readable(r); err != nil {
		return err
	}
	raw := q.Get("value")
	candidates := []catalog.Value{catalog.String(raw)}
	if i, err := strconv.ParseInt(raw, 10, 64); err == nil {
		candidates = append(candidates, catalog.Int(i))
	}
	if b, err := strconv.ParseBool(raw); err == nil {
		candidates = append(candidates, catalog.Bool(b))
	}
	out := []nodeJSON{}
	for _, v := range candidates {
		for _, n := range f.tree.Find(kind, attr, v) {
			out = append(out, f.view(n, false))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	httpjson.Write(w, http.StatusOK, out)
	return nil
}

func (f *Frontend) postMember(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID   uint64 `json:"id"`
		Addr string `json:"addr"`
		Kind string `json:"kind"`
		Role string `json:"role"`
	}
	if err := httpjson.Decode(w, r, &body); err != nil {
		return err
	}
	kind, err := epoch.ParseKind(body.Kind)
	if err != nil || body.ID == 0 || body.Addr == "" {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "a member needs a non-zero id, an addr and kind frontend or worker")
	}
	if _, port, err := net.SplitHostPort(body.Addr); err != nil || port == "" {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "addr %q: want host:port", body.Addr)
	}
	if body.Role != "" && body.Role != "follower" && body.Role != "observer" {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "role %q: want follower or observer", body.Role)
	}
	// A frontend becomes a raft member first; it then starts with -join.
	if err := f.AddMember(r.Context(), heartbeat.Member{ID: body.ID, Addr: body.Addr, Kind: kind, Role: body.Role}); err != nil {
		return apiError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"id": body.ID})
	return nil
}

func (f *Frontend) deleteMember(w http.ResponseWriter, r *http.Request) error {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil || id == 0 {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "member id %q is not a positive integer", r.PathValue("id"))
	}
	// Raft first, then the record; a record that cannot be removed now
	// (this frontend removed itself, or a forced removal left no quorum)
	// is left for the next leader, and the removal still succeeded. An
	// unknown member is heartbeat.ErrNotFound: 404.
	err = f.RemoveMember(r.Context(), id, r.URL.Query().Get("force") == "true")
	if errors.Is(err, fe.ErrRecordLeft) {
		httpjson.Write(w, http.StatusOK, map[string]any{"id": id, "pending": fmt.Sprintf("the member record: %v", err)})
		return nil
	}
	if err != nil {
		return apiError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"id": id})
	return nil
}

func (f *Frontend) postCheckpoint(w http.ResponseWriter, r *http.Request) error {
	info, err := f.ckpt.Checkpoint(r.Context())
	if err != nil {
		return apiError(err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"index": info.Index})
	return nil
}

// maxQueryMS bounds a demo query's duration (and keeps it far from the
// overflow of time.Duration).
const maxQueryMS = 7 * 24 * 3600 * 1000

// postQuery starts a demo query coordinated by this frontend: it registers
// the query against the current epochs of this frontend and its workers,
// sends each worker a fragment (waiting, up to RequestTimeout, for a worker
// that has not yet answered a heartbeat or heard of this coordinator), and
// answers once every worker runs its fragment.
func (f *Frontend) postQuery(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		ID         string   `json:"id"`
		Workers    []uint64 `json:"workers"`
		DurationMS int64    `json:"duration_ms"`
	}
	if err := httpjson.Decode(w, r, &body); err != nil {
		return err
	}
	if body.ID == "" || len(body.Workers) == 0 || body.DurationMS <= 0 {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "a query needs an id, workers and a positive duration_ms")
	}
	if body.DurationMS > maxQueryMS {
		return httpjson.Errorf(http.StatusBadRequest, "bad_request", "duration_ms %d: at most %d (a week)", body.DurationMS, maxQueryMS)
	}
	seen := map[uint64]bool{}
	for _, id := range body.Workers {
		if seen[id] {
			return httpjson.Errorf(http.StatusBadRequest, "bad_request", "worker %d listed twice", id)
		}
		seen[id] = true
	}
	if _, ok := f.runs.Get(body.ID); ok {
		return httpjson.Errorf(http.StatusConflict, "exists", "query %q exists", body.ID)
	}
	if err := f.CanCoordinate(); err != nil {
		return apiError(err)
	}
	var workers []cancel.Member
	var addrs []string
	for _, id := range body.Workers {
		m, ok, err := f.worker(r.Context(), id)
		if err != nil {
			return apiError(err)
		}
		if !ok {
			return httpjson.Errorf(http.StatusBadRequest, "bad_request", "%d is not a worker of this cluster", id)
		}
		workers = append(workers, cancel.Member{Node: id, Epoch: m.PublishedEpoch()})
		addrs = append(addrs, m.Addr)
	}
	epoch := f.Epoch()
	q, err := f.registry.Register(context.Background(), cancel.Member{Node: f.cfg.ID, Epoch: epoch}, workers)
	if err != nil {
		return httpjson.Errorf(http.StatusConflict, "cancelled", "%v", err)
	}
	frag := demo.Fragment{Query: body.ID, Coordinator: f.cfg.ID, CoordinatorEpoch: epoch.String(), DurationMS: body.DurationMS}
	ctx, cancelDispatch := context.WithTimeout(r.Context(), f.cfg.RequestTimeout)
	defer cancelDispatch()
	for i, addr := range addrs {
		if err := f.dispatch(ctx, body.Workers[i], addr, frag); err != nil {
			q.Finish()
			f.withdraw(addrs[:i], body.ID, err.Error())
			return httpjson.Errorf(http.StatusServiceUnavailable, "dispatch_failed", "worker %d: %v", body.Workers[i], err)
		}
	}
	onDone := func(v demo.RunView) {
		if v.State == demo.Cancelled {
			f.withdraw(addrs, body.ID, v.Cause)
		}
	}
	if err := f.runs.Start(body.ID, demo.RunView{ID: body.ID}, q, time.Duration(body.DurationMS)*time.Millisecond, onDone); err != nil {
		return httpjson.Errorf(http.StatusConflict, "exists", "%v", err)
	}
	httpjson.Write(w, http.StatusOK, map[string]any{"id": body.ID, "state": demo.Running})
	return nil
}

// dispatch sends frag to worker id at addr. It retries, until ctx ends,
// the refusals that time settles: the worker has not yet had a leader
// heartbeat that lists this coordinator (503 coordinator_unknown), or it
// cannot be reached and has never answered a heartbeat (its record is
// listed as soon as it is added, while the process may still be starting).
// Every other failure is returned at once.
func (f *Frontend) dispatch(ctx context.Context, id uint64, addr string, frag demo.Fragment) error {
	wait := 20 * time.Millisecond
	maxWait := cmp.Or(f.cfg.HeartbeatInterval, time.Second)
	for {
		err := f.sendFragment(ctx, addr, frag)
		if err == nil || !f.settlesWithTime(id, err) {
			return err
		}
		f.logger.Debug("fragment refused for now; retrying", "worker", id, "query", frag.Query, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (retried until %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// settlesWithTime reports whether err, from sending a fragment to worker
// id, is a refusal that a later attempt may not meet (see dispatch).
func (f *Frontend) settlesWithTime(id uint64, err error) bool {
	var refused *fragmentRefused
	if errors.As(err, &refused) {
		return refused.Code == "coordinator_unknown"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		m, ok := f.members.Member(id)
		return ok && m.Status == heartbeat.StatusAlive && m.Epoch.IsZero()
	}
	return false
}

// fragmentRefused is a worker's answer other than 200 to a fragment.
type fragmentRefused struct {
	Status  int
	Code    string
	Message string
}

func (e *fragmentRefused) Error() string {
	return fmt.Sprintf("status %d: %s", e.Status, e.Message)
}

func (f *Frontend) sendFragment(ctx context.Context, addr string, frag demo.Fragment) error {
	data, _ := json.Marshal(frag)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+demo.FragmentPath, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Message string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return &fragmentRefused{Status: resp.StatusCode, Code: e.Error, Message: e.Message}
	}
	return nil
}

// withdraw tells the workers to drop their fragments of a cancelled query;
// best effort: a worker that misses it still cancels on the coordinator's
// epoch change, and the fragment ends at its duration otherwise.
func (f *Frontend) withdraw(addrs []string, query, cause string) {
	for _, addr := range addrs {
		u := "http://" + addr + demo.FragmentPath + "/" + url.PathEscape(query) + "?cause=" + url.QueryEscape(cause)
		req, err := http.NewRequest(http.MethodDelete, u, nil)
		if err != nil {
			continue
		}
		if resp, err := f.client.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

func (f *Frontend) getQuery(w http.ResponseWriter, r *http.Request) error {
	v, ok := f.runs.Get(r.PathValue("id"))
	if !ok {
		return httpjson.Errorf(http.StatusNotFound, "not_found", "no query %q on this frontend", r.PathValue("id"))
	}
	httpjson.Write(w, http.StatusOK, v)
	return nil
}

// worker returns worker id's record as this frontend's membership holds
// it, and whether id is a worker. A worker added through another frontend
// a moment ago may not have reached this one yet: when id is unknown here,
// worker waits for a linearizable read (everything the cluster
// acknowledged is then applied here) and, if the catalog then holds id's
// record, for the membership to follow the catalog to it. An id that no
// acknowledged write made a member is refused without waiting further.
func (f *Frontend) worker(ctx context.Context, id uint64) (heartbeat.Member, bool, error) {
	if m, ok := f.members.Member(id); ok {
		return m, m.Kind == epoch.KindWorker, nil
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	if err := f.journal.ReadBarrier(ctx); err != nil {
		return heartbeat.Member{}, false, err
	}
	if _, ok := f.tree.Get(heartbeat.MemberPath(id)); !ok {
		return heartbeat.Member{}, false, nil
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if m, ok := f.members.Member(id); ok {
			return m, m.Kind == epoch.KindWorker, nil
		}
		select {
		case <-ctx.Done():
			return heartbeat.Member{}, false, fmt.Errorf("member %d's record is applied here, its membership is not yet: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}
