package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/metatree/metatree/catalog"
	fe "github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/frontend/frontendtest"
	"github.com/metatree/metatree/examples/internal/frontend"
	"github.com/metatree/metatree/internal/linearize"
)

// startAPI starts a frontend as the metaserver does: the public frontend
// with the demo HTTP API of examples/API.md mounted as its handler
// (frontendtest.Options.Start).
func startAPI(ctx context.Context, cfg fe.Config) (*fe.Frontend, error) {
	f, err := frontend.Start(ctx, frontend.Config{Config: cfg})
	if err != nil {
		return nil, err
	}
	return f.Frontend, nil
}

// outcome is what an HTTP write's answer says about the write, as
// examples/API.md states it.
type outcome int

const (
	// applied: a 2xx.
	applied outcome = iota
	// refused: an answer API.md says changed nothing (4xx, 507, and the
	// 503s other than outcome_unknown).
	refused
	// unknown: no answer (a reset connection, a timeout, a frontend that
	// stopped) or 503 outcome_unknown: the write may apply at any time.
	unknown
)

// apiAnswer is one HTTP answer: its status and, for an error, its code.
type apiAnswer struct {
	status int
	code   string
	body   []byte
	err    error // the request failed without an answer
}

func (a apiAnswer) outcome() outcome {
	switch {
	case a.err != nil:
		return unknown
	case a.status/100 == 2:
		return applied
	case a.status == http.StatusServiceUnavailable && a.code == "outcome_unknown":
		return unknown
	case a.status >= 500 && a.status != http.StatusServiceUnavailable && a.status != http.StatusInsufficientStorage:
		return unknown // a 500: never on purpose, and of no stated outcome
	}
	return refused
}

func (a apiAnswer) String() string {
	if a.err != nil {
		return a.err.Error()
	}
	return fmt.Sprintf("%d %s: %s", a.status, a.code, bytes.TrimSpace(a.body))
}

// httpClient is a client of the metaserver's HTTP API: it reaches the
// frontends over the simulator's network from its own address, whose
// links it faults now and then (delays, resets) on top of the nemesis's.
type httpClient struct {
	cl   *clients
	id   int
	addr string
	hc   *http.Client
}

// startHTTP starts n HTTP clients, numbered after the library clients.
func (cl *clients) startHTTP(ctx context.Context, n, first int, seed uint64) {
	for k := range n {
		id := first + k
		addr := fmt.Sprintf("client-%d:0", id)
		h := &httpClient{cl: cl, id: id, addr: addr, hc: &http.Client{Transport: cl.r.c.Network().Transport(addr)}}
		rng := rand.New(rand.NewPCG(seed, uint64(id)))
		cl.wg.Go(func() {
			defer h.hc.CloseIdleConnections()
			h.loop(ctx, rng)
		})
	}
}

func (h *httpClient) loop(ctx context.Context, rng *rand.Rand) {
	r := h.cl.r
	for seq := 0; think(ctx, rng); seq++ {
		up := r.running()
		if len(up) == 0 {
			continue
		}
		i := up[rng.IntN(len(up))]
		h.faultLinks(rng, up)
		value := fmt.Sprintf("h%d-%d", h.id, seq)
		switch p := rng.IntN(100); {
		case p < 25:
			h.put(ctx, rng, i, rng.IntN(keys), value, false)
		case p < 35:
			h.put(ctx, rng, i, rng.IntN(keys), value, true)
		case p < 50:
			h.cas(ctx, i, rng.IntN(keys), value)
		case p < 70:
			h.read(ctx, i, rng.IntN(keys))
		case p < 80:
			h.readLocal(ctx, i, rng.IntN(keys))
		default:
			h.create(ctx, rng, value)
		}
	}
}

// faultLinks, one operation in eight, delays this client's links to the
// frontends and makes them reset connections; otherwise it clears them.
func (h *httpClient) faultLinks(rng *rand.Rand, up []int) {
	net := h.cl.r.c.Network()
	faulty := rng.IntN(8) == 0
	for _, i := range up {
		f := frontendtest.Faults{}
		if faulty {
			f = frontendtest.Faults{Delay: time.Duration(rng.IntN(200)) * time.Millisecond, Jitter: 50 * time.Millisecond, Reset: 0.2}
		}
		net.SetFaults(h.addr, frontendtest.Addr(i), f)
		net.SetFaults(frontendtest.Addr(i), h.addr, f)
	}
}

// do sends one request to frontend i and reads its answer, within the
// frontends' request timeout and a margin for a forwarded write.
func (h *httpClient) do(ctx context.Context, i int, method, path string, body any) apiAnswer {
	ctx, cancel := context.WithTimeout(ctx, h.cl.r.timeout+2*time.Second)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return apiAnswer{err: err}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+frontendtest.Addr(i)+path, rd)
	if err != nil {
		return apiAnswer{err: err}
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		return apiAnswer{err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return apiAnswer{err: err}
	}
	a := apiAnswer{status: resp.StatusCode, body: data}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		a.code = e.Error
	}
	return a
}

// judge checks an answer that should never come on a correct cluster
// (a 500, or a status API.md does not give a write), naming the request.
func (h *httpClient) judge(what string, i int, a apiAnswer) {
	r := h.cl.r
	switch {
	case a.err != nil || a.status/100 == 2:
	case a.status == http.StatusInsufficientStorage && a.code == "quota":
		if r.cfg.Quota == (catalog.Quota{}) {
			r.failf("http %s through frontend %d: 507 quota without a quota: %v", what, i, a)
		}
		r.quotaRefusals.Add(1)
	case a.status == http.StatusInsufficientStorage && a.code == "no_space":
		// A full disk (the nemesis's fullDisk): refused, nothing changed.
	case a.status == http.StatusServiceUnavailable, a.status == http.StatusConflict && what == "cas":
	case h.removedAnswer(i, a):
	default:
		r.failf("http %s through frontend %d: %v", what, i, a)
	}
}

// removedAnswer reports whether a is frontend i's 410 removed after the
// simulator asked for its removal: a removed frontend still up answers
// every request so (API.md, DELETE /v1/members), and nothing applied.
func (h *httpClient) removedAnswer(i int, a apiAnswer) bool {
	return a.err == nil && a.status == http.StatusGone && a.code == "removed" && h.cl.r.removalAsked(uint64(i))
}

// put PUTs a register's value on frontend i. Retried, it is sent again,
// through another frontend, while the answer leaves its outcome unknown,
// as API.md lets a client (read before writing again). The API has no
// client idempotency key (the forwarding inside carries its own), so
// every attempt is an operation of its own in the history: an attempt of
// unknown outcome may apply after a later one, and after other clients'
// writes.
func (h *httpClient) put(ctx context.Context, rng *rand.Rand, i, k int, value string, retried bool) {
	r := h.cl.r
	in := linearize.KV{Put: true, Key: keyPath(k), Value: value}
	body := map[string]any{"kind": "register", "attrs": map[string]any{"v": value}}
	attempts := 1
	if retried {
		attempts = 3
	}
	for attempt := range attempts {
		if attempt > 0 {
			up := r.running()
			if len(up) == 0 || ctx.Err() != nil {
				return
			}
			i = up[rng.IntN(len(up))]
		}
		call := r.hist.call()
		a := h.do(ctx, i, http.MethodPut, "/v1/catalog"+keyPath(k), body)
		h.judge("put", i, a)
		switch a.outcome() {
		case applied:
			r.hist.done(h.id, call, in, nil, true)
			r.httpOK.Add(1)
			return
		case unknown:
			r.hist.done(h.id, call, in, nil, false)
		default:
			r.hist.failed(in)
			if a.status != http.StatusServiceUnavailable {
				return // refused for good: another frontend refuses it too
			}
		}
	}
}

// cas is a txn that sets the register if it holds the value a local GET
// of frontend i shows (fresh or stale: a stale one fails the
// precondition, a 409).
func (h *httpClient) cas(ctx context.Context, i, k int, value string) {
	r := h.cl.r
	n, ok := h.get(ctx, i, k, false)
	if !ok {
		return
	}
	expect := n.Attrs["v"].Str()
	in := linearize.KV{CAS: true, Key: keyPath(k), Expect: expect, Value: value}
	call := r.hist.call()
	a := h.do(ctx, i, http.MethodPost, "/v1/txn", map[string]any{"ops": []map[string]any{
		{"op": "update", "path": keyPath(k), "attrs": map[string]any{"v": value}, "if_match": map[string]any{"v": expect}},
	}})
	h.judge("cas", i, a)
	switch {
	case a.outcome() == applied:
		r.hist.done(h.id, call, in, true, true)
		r.httpOK.Add(1)
	case a.outcome() == unknown:
		r.hist.done(h.id, call, in, nil, false)
	case a.status == http.StatusConflict && a.code == "conflict":
		r.hist.done(h.id, call, in, false, true)
	default:
		r.hist.failed(in)
	}
}

// get reads register k on frontend i, linearizably or locally.
func (h *httpClient) get(ctx context.Context, i, k int, linearizable bool) (apiNode, bool) {
	path := "/v1/catalog" + keyPath(k)
	if linearizable {
		path += "?consistency=linearizable"
	}
	a := h.do(ctx, i, http.MethodGet, path, nil)
	if a.err != nil || a.status != http.StatusOK {
		if a.err == nil && a.status != http.StatusServiceUnavailable && !h.removedAnswer(i, a) {
			h.cl.r.failf("http get %s on frontend %d: %v", keyPath(k), i, a)
		}
		return apiNode{}, false
	}
	var n apiNode
	if err := json.Unmarshal(a.body, &n); err != nil {
		h.cl.r.failf("http get %s on frontend %d: %v in %s", keyPath(k), i, err, a.body)
		return apiNode{}, false
	}
	return n, true
}

// apiNode is the part of a GET's node the clients read.
type apiNode struct {
	Attrs    map[string]catalog.Value `json:"attrs"`
	Modified uint64                   `json:"modified"`
}

// read is a linearizable GET: its value joins the history.
func (h *httpClient) read(ctx context.Context, i, k int) {
	call := h.cl.r.hist.call()
	n, ok := h.get(ctx, i, k, true)
	if !ok {
		return // no outcome: a failed read constrains nothing
	}
	h.cl.r.hist.done(h.id, call, linearize.KV{Key: keyPath(k)}, n.Attrs["v"].Str(), true)
	h.cl.r.httpOK.Add(1)
}

// readLocal is a local GET: stale or not, the register it shows was
// modified no earlier than the one a previous local read of the same
// catalog showed, one that returned before this one was sent (the HTTP
// clients' GETs overlap: one sent earlier may return later, with an older
// register).
func (h *httpClient) readLocal(ctx context.Context, i, k int) {
	before := h.cl.r.c.Frontend(i)
	sent := time.Now()
	n, ok := h.get(ctx, i, k, false)
	after := h.cl.r.c.Frontend(i)
	if !ok || before == nil || before != after {
		return
	}
	cl := h.cl
	key := httpLocal{before.Tree(), k}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	seen := cl.httpLocal[key]
	if floor := seen.floor(sent); n.Modified < floor {
		cl.r.failf("a local GET of %s on frontend %d saw it modified at %d after one that saw %d", keyPath(k), i, n.Modified, floor)
	}
	cl.httpLocal[key] = seen.add(time.Now(), n.Modified)
	cl.r.hist.counted()
}

// localSeen is what the local GETs of one register on one catalog saw, in
// the order they returned.
type localSeen []localRead

// localRead is one local GET's return: when, and the newest modified
// index it or any GET that returned before it saw.
type localRead struct {
	done time.Time
	max  uint64
}

// floor is the newest modified index the GETs that returned before sent
// saw (0: none returned yet).
func (s localSeen) floor(sent time.Time) uint64 {
	k, _ := slices.BinarySearchFunc(s, sent, func(e localRead, t time.Time) int {
		if e.done.Before(t) {
			return -1
		}
		return 1
	})
	if k == 0 {
		return 0
	}
	return s[k-1].max
}

// add records a GET that returned at done (no earlier than the last) and
// saw modified.
func (s localSeen) add(done time.Time, modified uint64) localSeen {
	if len(s) > 0 {
		modified = max(modified, s[len(s)-1].max)
	}
	return append(s, localRead{done, modified})
}

// attrKeys is the number of attribute names the HTTP creates draw from:
// more than a tree numbers in one byte.
const attrKeys = 400

// httpLocal names a register on one catalog, for the local reads.
type httpLocal struct {
	t *catalog.Tree
	k int
}

// create makes a unique node with a txn (the registers' directory exists,
// the node does not), sent again through other frontends while its
// outcome is unknown; a retry that finds the node (409 exists) finds
// what an earlier attempt made: it counts as acknowledged. A 507 quota
// made nothing.
//
// The node carries one to three attributes whose keys come from a few
// hundred names, so that replicas number attribute keys past 127 (two
// bytes) in different orders: a size counted by the local numbers
// instead of the names shows as replicas deciding a bytes quota apart.
func (h *httpClient) create(ctx context.Context, rng *rand.Rand, name string) {
	r := h.cl.r
	path := "/acked/" + name
	attrs := map[string]any{}
	for range 1 + rng.IntN(3) {
		attrs[fmt.Sprintf("a%d", rng.IntN(attrKeys))] = name
	}
	body := map[string]any{"ops": []map[string]any{
		{"op": "check", "path": "/kv"},
		{"op": "create", "path": path, "kind": "item", "attrs": attrs, "if_absent": true},
	}}
	sawUnknown := false
	for attempt := range 4 {
		up := r.running()
		if len(up) == 0 || ctx.Err() != nil {
			return
		}
		i := up[rng.IntN(len(up))]
		a := h.do(ctx, i, http.MethodPost, "/v1/txn", body)
		switch {
		case a.outcome() == unknown:
			sawUnknown = true
			r.hist.event("http create %s attempt %d unknown", path, attempt)
			continue
		case a.status == http.StatusConflict && !sawUnknown:
			r.failf("http create %s through frontend %d (attempt %d) found the node, which no attempt of unknown outcome made: %v", path, i, attempt+1, a)
			return
		case a.outcome() == applied || a.status == http.StatusConflict:
			h.cl.mu.Lock()
			h.cl.acked = append(h.cl.acked, path)
			h.cl.mu.Unlock()
			r.hist.event("http create %s acked", path)
			r.hist.counted()
			r.httpOK.Add(1)
			return
		case a.status == http.StatusInsufficientStorage && a.code == "quota" && r.cfg.Quota != (catalog.Quota{}):
			r.hist.event("http create %s refused by the quota", path)
			r.quotaRefusals.Add(1)
			return
		case a.status == http.StatusServiceUnavailable, a.status == http.StatusInsufficientStorage && a.code == "no_space", h.removedAnswer(i, a):
			r.hist.event("http create %s attempt %d refused: %s", path, attempt, a.code)
			continue
		default:
			r.failf("http create %s through frontend %d (attempt %d): %v", path, i, attempt+1, a)
			return
		}
	}
}
