package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/metatree/metatree/catalog"
	fe "github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/examples/internal/frontend"
	"github.com/metatree/metatree/examples/internal/worker"
	"github.com/metatree/metatree/heartbeat"
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/journal"
)

// The heartbeat interval is short so the demo is quick; production uses
// the 1 s default.
const (
	heartbeatInterval = 250 * time.Millisecond
	deadAfter         = 3
)

var start = time.Now()

// out is where the timeline goes: stdout, or a test's buffer.
var out io.Writer = os.Stdout

// say prints one line of the timeline.
func say(format string, args ...any) {
	fmt.Fprintf(out, "%7.3fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// demo holds the cluster: frontends by id and workers by id.
type demo struct {
	dir string
	// token is the cluster's token, drawn at start: every member requires
	// it of heartbeats, joins and fragments (the binaries refuse to start
	// without a credential unless told -insecure).
	token     string
	frontends map[uint64]*frontend.Frontend
	addrs     map[uint64]string
	workers   map[uint64]*worker.Worker
	client    *http.Client // the demo's own API client
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "metatree-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	d := &demo{dir: dir, token: rand.Text(), frontends: map[uint64]*frontend.Frontend{}, addrs: map[uint64]string{}, workers: map[uint64]*worker.Worker{},
		client: &http.Client{Transport: &http.Transport{}}}
	defer d.closeAll()
	say("data dirs under %s", dir)

	// 1. Three frontends: one bootstraps, two join through it.
	if err := d.startFrontend(ctx, 1, true, ""); err != nil {
		return err
	}
	for _, id := range []uint64{2, 3} {
		if err := d.startFrontend(ctx, id, false, d.addrs[1]); err != nil {
			return err
		}
	}
	leader, err := d.waitLeader(ctx, 0)
	if err != nil {
		return err
	}
	say("cluster of 3 frontends up; leader is frontend %d", leader)

	// 2. Two workers, added as members through a follower.
	for _, id := range []uint64{101, 102} {
		if err := d.startWorker(id, ""); err != nil {
			return err
		}
		if err := d.frontends[2].Members().Add(ctx, heartbeat.Member{ID: id, Addr: d.workers[id].Addr(), Kind: epoch.KindWorker}); err != nil {
			return fmt.Errorf("add worker %d: %w", id, err)
		}
	}
	if err := d.waitMembersAlive(ctx); err != nil {
		return err
	}
	say("workers 101 and 102 answer heartbeats (every %v)", heartbeatInterval)

	// 3. A small catalog, written through frontend 3 in atomic batches.
	n, index, err := d.writeCatalog(ctx, d.frontends[3])
	if err != nil {
		return err
	}
	say("wrote %d catalog nodes (2 databases, tables, partitions, tablets, replicas) up to index %d", n, index)

	// 4. Read it back on every frontend: each has applied the writes.
	for id := uint64(1); id <= 3; id++ {
		f := d.frontends[id]
		if err := f.Journal().WaitApplied(ctx, index); err != nil {
			return err
		}
		replicas := f.Tree().OfKind("replica")
		on101 := f.Tree().Find("replica", "worker", catalog.Int(101))
		say("frontend %d reads %d replicas, %d of them on worker 101 (secondary index)", id, len(replicas), len(on101))
	}

	// 5. Demo queries coordinated by different frontends.
	queries := map[string][]uint64{"q1": {101, 102}, "q2": {101}, "q3": {102}, "q4": {101, 102}}
	coordinator := map[string]uint64{"q1": 1, "q2": 2, "q3": 3, "q4": 3}
	for _, q := range []string{"q1", "q2", "q3", "q4"} {
		if err := d.startQuery(ctx, coordinator[q], q, queries[q]); err != nil {
			return err
		}
	}
	say("4 queries running: q1 (101,102) on fe1, q2 (101) on fe2, q3 (102) on fe3, q4 (101,102) on fe3")

	// 6. A task worker 101 runs, as a node owned by its epoch: created
	// through the HTTP API with "owner" = worker 101 and the epoch it runs
	// with, it lives exactly as long as that process.
	oldEpoch := d.workers[101].Epoch().String()
	if err := d.frontends[1].Journal().WaitClusterVersion(ctx, journal.NewestVersion); err != nil {
		return err
	}
	if code, err := d.txn(ctx, 1, map[string]any{"ops": []map[string]any{
		{"op": "create", "path": "/tasks", "kind": "dir"},
		{"op": "create", "path": "/tasks/load-101", "kind": "task", "owner": map[string]any{"node": 101, "epoch": oldEpoch}},
	}}); err != nil || code != "" {
		return fmt.Errorf("create the owned task: %s %w", code, err)
	}
	say("task /tasks/load-101 created, owned by worker 101's epoch %s: it lives as long as that process", oldEpoch[:8])
	// Frontend 1 applied the create before it answered: a watch started
	// now sees what comes after it.
	tasks := d.frontends[1].Tree().Watch(catalog.WatchOptions{Prefix: "/tasks/load-101"})
	defer tasks.Close()

	// 7. Restart worker 101: a new process, a new epoch.
	restartAt := time.Now()
	addr101 := d.workers[101].Addr()
	d.workers[101].Close()
	if err := d.startWorker(101, addr101); err != nil {
		return err
	}
	say("worker 101 restarted (new epoch %s)", d.workers[101].Epoch().String()[:8])
	ev, err := tasks.Next(ctx)
	if err != nil {
		return fmt.Errorf("waiting for the owned task to go: %w", err)
	}
	if ev.Op != catalog.OpDelete {
		return fmt.Errorf("the owned task had a %v at index %d, not its deletion", ev.Op, ev.Index)
	}
	for _, f := range d.frontends {
		if err := f.Journal().WaitApplied(ctx, ev.Index); err != nil {
			return err
		}
		if _, ok := f.Tree().Get("/tasks/load-101"); ok {
			return fmt.Errorf("frontend %d still holds the task of the old epoch", f.ID())
		}
	}
	say("  task /tasks/load-101 deleted %v after the restart, on every frontend, at index %d: the entry that records the restart",
		time.Since(restartAt).Round(time.Millisecond), ev.Index)
	for _, q := range []string{"q1", "q2", "q4"} {
		v, err := d.waitQuery(ctx, coordinator[q], q, "cancelled")
		if err != nil {
			return err
		}
		say("  %s cancelled %v after the restart: %s", q, time.Since(restartAt).Round(time.Millisecond), v.Cause)
	}
	if v, _ := d.query(coordinator["q3"], "q3"); v.State != "running" {
		return fmt.Errorf("q3 does not use worker 101 but is %s", v.State)
	}
	say("  q3 (worker 102 only) still running")
	code, err := d.txn(ctx, 3, map[string]any{"if_epoch": map[string]any{"node": 101, "epoch": oldEpoch},
		"ops": []map[string]any{{"op": "create", "path": "/tasks/late-101", "kind": "task"}}})
	if err != nil {
		return err
	}
	if code != "conflict" {
		return fmt.Errorf("a txn with if_epoch on worker 101's old epoch answered %q, want conflict", code)
	}
	say("  a txn with if_epoch on the old epoch is refused: 409 %s (the old process can no longer write)", code)
	code, err = d.txn(ctx, 3, map[string]any{"ops": []map[string]any{
		{"op": "create", "path": "/tasks/late-101", "kind": "task", "owner": map[string]any{"node": 101, "epoch": oldEpoch}}}})
	if err != nil {
		return err
	}
	if code != "owner_not_current" {
		return fmt.Errorf("a create owned by worker 101's old epoch answered %q, want owner_not_current", code)
	}
	say("  a create owned by the old epoch is refused: 409 %s", code)

	// 8. Close the leader: the others elect a new one.
	failAt := time.Now()
	d.frontends[leader].Close()
	delete(d.frontends, leader)
	say("closed leader frontend %d", leader)
	newLeader, err := d.waitLeader(ctx, leader)
	if err != nil {
		return err
	}
	say("frontend %d leads after %v", newLeader, time.Since(failAt).Round(time.Millisecond))

	// 9. Write more while the old leader is down.
	var survivor *frontend.Frontend
	for _, f := range d.frontends {
		survivor = f
	}
	more := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/sales/after_failover", Kind: "table"}}}
	idx, err := propose(ctx, survivor, more)
	if err != nil {
		return err
	}
	say("wrote /sales/after_failover at index %d with frontend %d down", idx, leader)

	// 10. Bring the old leader back from its data dir: it catches up.
	backAt := time.Now()
	if err := d.startFrontend(ctx, leader, false, ""); err != nil {
		return err
	}
	if err := d.frontends[leader].Journal().WaitApplied(ctx, idx); err != nil {
		return err
	}
	if _, ok := d.frontends[leader].Tree().Get("/sales/after_failover"); !ok {
		return errors.New("restarted frontend misses the write made while it was down")
	}
	say("frontend %d restarted and caught up to index %d in %v", leader, idx, time.Since(backAt).Round(time.Millisecond))

	// 11. A planned hand-off, as the metaserver does on SIGTERM: the leader
	// transfers leadership to the most caught-up voter, no election
	// timeout passes.
	handAt := time.Now()
	if err := d.frontends[newLeader].Journal().Handoff(ctx); err != nil {
		return err
	}
	say("frontend %d handed leadership to frontend %d in %v", newLeader,
		d.frontends[newLeader].Journal().Status().Leader, time.Since(handAt).Round(time.Millisecond))

	// 12. A checkpoint on demand.
	info, err := d.frontends[leader].Checkpointer().Checkpoint(ctx)
	if err != nil {
		return err
	}
	say("checkpoint on frontend %d: %s, index %d, %d bytes", leader, info.Name, info.Index, info.Size)

	d.closeAll()
	say("all closed; data dirs removed. Done.")
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startFrontend starts frontend id: bootstrapping, joining through join, or
// (neither) restarting from its data dir.
func (d *demo) startFrontend(ctx context.Context, id uint64, bootstrap bool, join string) error {
	addr, ok := d.addrs[id]
	if !ok {
		var err error
		if addr, err = freeAddr(); err != nil {
			return err
		}
		d.addrs[id] = addr
	}
	f, err := frontend.Start(ctx, frontend.Config{Config: fe.Config{
		ID: id, Dir: filepath.Join(d.dir, fmt.Sprintf("fe%d", id)), Addr: addr,
		Bootstrap: bootstrap, Join: join, Token: d.token,
		HeartbeatInterval: heartbeatInterval, DeadAfter: deadAfter,
	}})
	if err != nil {
		return fmt.Errorf("start frontend %d: %w", id, err)
	}
	d.frontends[id] = f
	return nil
}

func (d *demo) startWorker(id uint64, addr string) error {
	if addr == "" {
		var err error
		if addr, err = freeAddr(); err != nil {
			return err
		}
	}
	w, err := worker.Start(worker.Config{ID: id, Addr: addr, Token: d.token})
	if err != nil {
		return fmt.Errorf("start worker %d: %w", id, err)
	}
	d.workers[id] = w
	return nil
}

func (d *demo) closeAll() {
	for id, f := range d.frontends {
		f.Close()
		delete(d.frontends, id)
	}
	for id, w := range d.workers {
		w.Close()
		delete(d.workers, id)
	}
	d.client.CloseIdleConnections()
}

// poll calls cond every 20 ms until it holds or ctx ends.
func poll(ctx context.Context, what string, cond func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// waitLeader waits until the running frontends agree on a leader other
// than not, and returns it.
func (d *demo) waitLeader(ctx context.Context, not uint64) (uint64, error) {
	var leader uint64
	err := poll(ctx, "a leader", func() bool {
		leader = 0
		for _, f := range d.frontends {
			st := f.Journal().Status()
			if st.Leader == 0 || st.Leader == not || (leader != 0 && st.Leader != leader) {
				return false
			}
			leader = st.Leader
		}
		return leader != 0
	})
	return leader, err
}

func (d *demo) waitMembersAlive(ctx context.Context) error {
	return poll(ctx, "every member alive", func() bool {
		for _, f := range d.frontends {
			ms := f.Members().Members()
			if len(ms) != 5 {
				return false
			}
			for _, m := range ms {
				if m.Status != heartbeat.StatusAlive || m.Epoch.IsZero() {
					return false
				}
			}
		}
		return true
	})
}

// propose writes b through f (fe.Frontend.Write: encoded at the cluster's
// version, applied on f when it returns) and returns its index.
func propose(ctx context.Context, f *frontend.Frontend, b catalog.Batch) (uint64, error) {
	res, err := f.Write(ctx, b)
	if err != nil {
		return 0, err
	}
	return res.Index, nil
}

// writeCatalog writes 2 databases × 3 tables × 2 partitions × 4 tablets ×
// 3 replicas, one batch per table, plus a secondary index on replicas'
// worker attribute.
func (d *demo) writeCatalog(ctx context.Context, f *frontend.Frontend) (nodes int, index uint64, err error) {
	index, err = propose(ctx, f, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreateIndex, Kind: "replica", Attr: "worker"}}})
	if err != nil {
		return 0, 0, err
	}
	workers := []int64{101, 102}
	for _, db := range []string{"sales", "ops"} {
		if index, err = propose(ctx, f, catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: "/" + db, Kind: "database"}}}); err != nil {
			return 0, 0, err
		}
		nodes++
		for t := 0; t < 3; t++ {
			table := fmt.Sprintf("/%s/t%d", db, t)
			b := catalog.Batch{Ops: []catalog.Op{{Type: catalog.OpCreate, Path: table, Kind: "table"}}}
			for p := 0; p < 2; p++ {
				part := fmt.Sprintf("%s/p%d", table, p)
				b.Ops = append(b.Ops, catalog.Op{Type: catalog.OpCreate, Path: part, Kind: "partition"})
				for tb := 0; tb < 4; tb++ {
					tablet := fmt.Sprintf("%s/tablet%d", part, tb)
					b.Ops = append(b.Ops, catalog.Op{Type: catalog.OpCreate, Path: tablet, Kind: "tablet"})
					for r := 0; r < 3; r++ {
						b.Ops = append(b.Ops, catalog.Op{Type: catalog.OpCreate, Path: fmt.Sprintf("%s/r%d", tablet, r), Kind: "replica",
							Set: map[string]catalog.Value{"worker": catalog.Int(workers[(tb+r)%2]), "version": catalog.Int(1), "state": catalog.String("normal")}})
					}
				}
			}
			if index, err = propose(ctx, f, b); err != nil {
				return 0, 0, err
			}
			nodes += len(b.Ops)
		}
	}
	return nodes, index, nil
}

type queryView struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Cause string `json:"cause"`
}

// startQuery starts a demo query through the coordinator's HTTP API, as a
// client would.
func (d *demo) startQuery(ctx context.Context, coordinator uint64, id string, workers []uint64) error {
	body, _ := json.Marshal(map[string]any{"id": id, "workers": workers, "duration_ms": 60000})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.addrs[coordinator]+"/v1/queries", bytes.NewReader(body))
	if err != nil {
		return err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("start query %s: %s: %s", id, resp.Status, msg)
	}
	return nil
}

func (d *demo) query(coordinator uint64, id string) (queryView, error) {
	var v queryView
	resp, err := d.client.Get("http://" + d.addrs[coordinator] + "/v1/queries/" + id)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

func (d *demo) waitQuery(ctx context.Context, coordinator uint64, id, state string) (queryView, error) {
	var v queryView
	err := poll(ctx, "query "+id+" "+state, func() bool {
		v, _ = d.query(coordinator, id)
		return v.State == state
	})
	return v, err
}

// txn posts body to frontend id's /v1/txn, as a client would, and returns
// the error code of a 409 answer ("" for 200).
func (d *demo) txn(ctx context.Context, id uint64, body map[string]any) (string, error) {
	data, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+d.addrs[id]+"/v1/txn", bytes.NewReader(data))
	if err != nil {
		return "", err
	}
	resp, err := d.client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return "", nil
	case http.StatusConflict:
		var e struct {
			Error string `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			return "", fmt.Errorf("txn: 409 with an unreadable body: %w", err)
		}
		return e.Error, nil
	}
	msg, _ := io.ReadAll(resp.Body)
	return "", fmt.Errorf("txn: %s: %s", resp.Status, msg)
}
