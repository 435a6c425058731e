package journal_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// TestScenarios runs the conf-change and partition scripts in
// testdata/scenarios against a journaltest.Cluster, as etcd-io/raft's
// interaction tests do. Each script runs inside a synctest bubble, so the
// clock is virtual and advances only when every node's goroutines are
// blocked, and every command's output is taken once the cluster is
// quiescent. Where an election could go to either of two nodes the scripts
// leave only one eligible (the other's log lags), so the trace does not
// depend on goroutine order; raft's election timeouts draw from a seeded
// crypto/rand (testing/cryptotest), so they fire at the same virtual times
// run after run. Regenerate with -rewrite and review the diff.
//
// Commands (node ids are 1-based; "on=N" picks the node that runs a call,
// the leader by default):
//
//	add-nodes voters=N [observers=N]   start the cluster (node 1 bootstraps)
//	join id=N [role=observer]          add node N, the next id, joined through the lowest-numbered running node
//	propose [on=N] [timeout=D] DATA    propose DATA, print its index
//	partition 1 2 / 3                  split the network into groups
//	isolate id=N                       a partition of one
//	heal                               undo partitions
//	tick [n=N]                         let N raft ticks of virtual time pass
//	wait-leader                        await a leader, print its id
//	stabilize                          let two election timeouts pass, print status
//	status                             print every running member's view
//	applied id=N                       print the entries node N applied
//	remove id=N [on=N] [force]         remove a member
//	promote id=N [on=N]                promote an observer to voter
//	transfer id=N                      hand leadership to node N
//	stop id=N / restart id=N           clean close, reopen from the data dir
//	crash id=N                         power cut: only synced data survives
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		cryptotest.SetGlobalRandom(t, 1)
		synctest.Test(t, func(t *testing.T) {
			e := &scenarioEnv{t: t}
			datadriven.RunTest(t, path, e.handle)
		})
	})
}

// The scenario cluster's timing: ticks of 10 ms, an election timeout of 20
// ticks, and a staleness guard long enough that the leader journals its
// clock only when it takes over, never on the way (periodic timestamps
// would tie applied indexes to the virtual time a script lets pass).
const (
	scenarioTick           = 10 * time.Millisecond
	scenarioElectionTicks  = 20
	scenarioHeartbeatTicks = 2
	scenarioStaleAfter     = time.Hour
)

type scenarioEnv struct {
	t *testing.T
	c *journaltest.Cluster
}

func (e *scenarioEnv) handle(t *testing.T, d *datadriven.TestData) string {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := e.run(ctx, d)
	// Let the cluster settle before printing, so that the trace shows a
	// quiescent state rather than one a goroutine is still changing.
	synctest.Wait()
	if err != nil {
		return fmt.Sprintf("%serror: %v\n", out, err)
	}
	return out
}

func (e *scenarioEnv) run(ctx context.Context, d *datadriven.TestData) (string, error) {
	if (e.c == nil) != (d.Cmd == "add-nodes") {
		return "", fmt.Errorf("%s: add-nodes comes first, and once", d.Cmd)
	}
	switch d.Cmd {
	case "add-nodes":
		voters, observers := 3, 0
		e.scanOpt(d, "voters", &voters)
		e.scanOpt(d, "observers", &observers)
		e.c = journaltest.NewCluster(e.t, journaltest.Options{
			Voters: voters, Observers: observers,
			TickInterval: scenarioTick, ElectionTicks: scenarioElectionTicks, HeartbeatTicks: scenarioHeartbeatTicks,
			Configure: func(cfg *journal.Config) { cfg.StaleAfter = scenarioStaleAfter },
		})
		if err := e.settle(ctx); err != nil {
			return "", err
		}
		return e.status(), nil
	case "join":
		id := uint64(e.mustInt(d, "id"))
		role := journal.Follower
		if d.HasArg("role") {
			var s string
			d.ScanArgs(e.t, "role", &s)
			r, err := journal.ParseRole(s)
			if err != nil {
				return "", err
			}
			role = r
		}
		if err := e.join(ctx, id, role); err != nil {
			return "", err
		}
		if err := e.settle(ctx); err != nil {
			return "", err
		}
		return e.status(), nil
	case "propose":
		j, err := e.on(d)
		if err != nil {
			return "", err
		}
		if d.HasArg("timeout") {
			var s string
			d.ScanArgs(e.t, "timeout", &s)
			dur, err := time.ParseDuration(s)
			if err != nil {
				return "", fmt.Errorf("propose: timeout: %w", err)
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, dur)
			defer cancel()
		}
		data := strings.TrimSpace(d.Input)
		idx, _, err := j.Propose(ctx, []byte(data))
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("index %d\n", idx), nil
	case "partition":
		var groups [][]uint64
		for g := range strings.SplitSeq(strings.TrimSpace(d.Input), "/") {
			var ids []uint64
			for f := range strings.FieldsSeq(g) {
				id, err := strconv.ParseUint(f, 10, 64)
				if err != nil {
					return "", fmt.Errorf("partition: node id %q: %w", f, err)
				}
				ids = append(ids, id)
			}
			groups = append(groups, ids)
		}
		e.c.Net.Partition(groups...)
		return "", nil
	case "isolate":
		e.c.Net.Isolate(uint64(e.mustInt(d, "id")))
		return "", nil
	case "heal":
		e.c.Net.Heal()
		return "", nil
	case "tick":
		n := 1
		e.scanOpt(d, "n", &n)
		time.Sleep(time.Duration(n) * scenarioTick)
		return "", nil
	case "stabilize":
		for range 2 {
			time.Sleep(scenarioElectionTicks * scenarioTick)
			synctest.Wait()
		}
		return e.status(), nil
	case "wait-leader":
		id, err := e.c.WaitLeader(ctx)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("leader %d\n", id), nil
	case "status":
		synctest.Wait()
		return e.status(), nil
	case "applied":
		return e.applied(uint64(e.mustInt(d, "id")))
	case "remove":
		j, err := e.on(d)
		if err != nil {
			return "", err
		}
		return "", j.RemoveMember(ctx, uint64(e.mustInt(d, "id")), d.HasArg("force"))
	case "promote":
		j, err := e.on(d)
		if err != nil {
			return "", err
		}
		return "", j.Promote(ctx, uint64(e.mustInt(d, "id")))
	case "transfer":
		j, err := e.on(d)
		if err != nil {
			return "", err
		}
		return "", j.TransferLeadership(ctx, uint64(e.mustInt(d, "id")))
	case "stop":
		return "", e.c.Stop(uint64(e.mustInt(d, "id")))
	case "crash":
		return "", e.c.Crash(uint64(e.mustInt(d, "id")))
	case "restart":
		return "", e.c.Restart(ctx, uint64(e.mustInt(d, "id")))
	}
	return "", fmt.Errorf("unknown command %q", d.Cmd)
}

// settle waits for a leader and for every member to apply, and know as
// committed, all the leader has committed: followers learn the commit index
// from the leader's next message, so each round lets a heartbeat interval of
// virtual time pass before it compares.
func (e *scenarioEnv) settle(ctx context.Context) error {
	for {
		l, err := e.c.WaitLeader(ctx)
		if err != nil {
			return err
		}
		js := e.journals()
		st := js[l].Status()
		for _, m := range st.Members {
			if j := js[m.ID]; j != nil {
				if err := j.WaitApplied(ctx, st.Committed); err != nil {
					return fmt.Errorf("node %d: %w", m.ID, err)
				}
			}
		}
		time.Sleep(scenarioHeartbeatTicks * scenarioTick)
		synctest.Wait()
		if e.converged(l, st.Committed) {
			return nil
		}
	}
}

// converged reports whether leader l is still at commit index committed and
// every running member has applied exactly that.
func (e *scenarioEnv) converged(l, committed uint64) bool {
	js := e.journals()
	lj := js[l]
	if lj == nil {
		return false
	}
	st := lj.Status()
	if !st.IsLeader() || st.Committed != committed {
		return false
	}
	for _, m := range st.Members {
		if j := js[m.ID]; j != nil {
			if ms := j.Status(); ms.Committed != committed || ms.Applied != committed {
				return false
			}
		}
	}
	return true
}

// join adds node id, which must be the cluster's next, joined through its
// lowest-numbered running node.
func (e *scenarioEnv) join(ctx context.Context, id uint64, role journal.Role) error {
	if next := uint64(len(e.c.Nodes())) + 1; id != next {
		return fmt.Errorf("join: node %d is not the next node, %d", id, next)
	}
	_, err := e.c.AddNode(ctx, role)
	return err
}

// journals returns every running journal by id.
func (e *scenarioEnv) journals() map[uint64]*journal.Journal {
	out := map[uint64]*journal.Journal{}
	for _, n := range e.c.Running() {
		if j := n.Journal(); j != nil {
			out[n.ID] = j
		}
	}
	return out
}

// on returns the journal named by on=N, or the leader's.
func (e *scenarioEnv) on(d *datadriven.TestData) (*journal.Journal, error) {
	js := e.journals()
	if d.HasArg("on") {
		id := uint64(e.mustInt(d, "on"))
		if j := js[id]; j != nil {
			return j, nil
		}
		return nil, fmt.Errorf("node %d is not running", id)
	}
	if id := e.leader(); id != 0 {
		return js[id], nil
	}
	return nil, errors.New("no leader")
}

// leader returns the id of the cluster's leader (journaltest.Cluster.Leader),
// or 0.
func (e *scenarioEnv) leader() uint64 {
	if l := e.c.Leader(); l != nil {
		return l.ID
	}
	return 0
}

// status prints one line per running member: its raft state, the leader it
// follows, its term, applied and committed indexes, and the membership it
// applied.
func (e *scenarioEnv) status() string {
	js := e.journals()
	ids := make([]uint64, 0, len(js))
	for id := range js {
		ids = append(ids, id)
	}
	// A removed node may or may not hear the commit of its removal (see
	// testdata/scenarios/membership), so the trace leaves out the nodes the
	// leader no longer lists.
	if l := e.leader(); l != 0 {
		ids = ids[:0]
		for _, m := range js[l].Status().Members {
			if js[m.ID] != nil {
				ids = append(ids, m.ID)
			}
		}
	}
	slices.Sort(ids)
	var b strings.Builder
	for _, id := range ids {
		st := js[id].Status()
		// The traces name states as raft does.
		state := map[journal.State]string{journal.StateFollower: "Follower", journal.StateCandidate: "Candidate",
			journal.StatePreCandidate: "PreCandidate", journal.StateLeader: "Leader"}[st.State]
		if st.Removed {
			state = "Removed"
		}
		fmt.Fprintf(&b, "%d: role=%s state=%s leader=%d term=%d applied=%d committed=%d members=%s\n",
			id, st.Role, state, st.Leader, st.Term, st.Applied, st.Committed, members(st.Members))
	}
	return b.String()
}

// applied prints the entries node id's state machine applied in this run,
// as "index: data" lines.
func (e *scenarioEnv) applied(id uint64) (string, error) {
	var sm *journaltest.Recorder
	if n := e.c.Node(id); n != nil {
		sm, _ = n.StateMachine().(*journaltest.Recorder)
	}
	if sm == nil {
		return "", fmt.Errorf("applied: no node %d", id)
	}
	var b strings.Builder
	for _, a := range sm.Applied() {
		fmt.Fprintf(&b, "%d: %s\n", a.Index, a.Data)
	}
	return b.String(), nil
}

// members prints a membership as "1v 2v 3o" (v: voter, o: observer).
func members(ms []journal.Member) string {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b journal.Member) int { return int(a.ID) - int(b.ID) })
	parts := make([]string, len(ms))
	for i, m := range ms {
		kind := "v"
		if m.Role == journal.Observer {
			kind = "o"
		}
		parts[i] = fmt.Sprintf("%d%s", m.ID, kind)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// scanOpt reads the integer argument key into v when the command has it.
func (e *scenarioEnv) scanOpt(d *datadriven.TestData, key string, v *int) {
	if d.HasArg(key) {
		d.ScanArgs(e.t, key, v)
	}
}

// mustInt reads the integer argument key; the script fails without it.
func (e *scenarioEnv) mustInt(d *datadriven.TestData, key string) int {
	var v int
	d.ScanArgs(e.t, key, &v)
	return v
}
