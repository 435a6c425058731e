package journaltest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"

	"github.com/metatree/metatree/journal"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeReceiver records what a node receives and what it is told.
type fakeReceiver struct {
	mu          sync.Mutex
	msgs        []*raftpb.Message
	unreachable map[uint64]int
	snaps       map[uint64][]bool
	got         chan struct{} // one token per Receive call
	forwardErr  error
	receiveErr  error       // returned by every Receive when set
	removed     chan uint64 // the peers ReportRemoved named
}

func newFake() *fakeReceiver {
	return &fakeReceiver{unreachable: map[uint64]int{}, snaps: map[uint64][]bool{}, got: make(chan struct{}, 1024), removed: make(chan uint64, 16)}
}

func (f *fakeReceiver) Receive(ctx context.Context, msgs []*raftpb.Message) error {
	f.mu.Lock()
	f.msgs = append(f.msgs, msgs...)
	err := f.receiveErr
	f.mu.Unlock()
	f.got <- struct{}{}
	return err
}

func (f *fakeReceiver) HandleForward(ctx context.Context, req *journal.ForwardRequest) (*journal.ForwardResponse, error) {
	if f.forwardErr != nil {
		return nil, f.forwardErr
	}
	return &journal.ForwardResponse{Index: uint64(len(req.Data))}, nil
}

func (f *fakeReceiver) HandleJoin(ctx context.Context, req *journal.JoinRequest) (*journal.JoinResponse, error) {
	return &journal.JoinResponse{ClusterID: "c1", Members: []journal.Member{{ID: req.ID, Addr: req.Addr}}}, nil
}

func (f *fakeReceiver) ReportUnreachable(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unreachable[id]++
}

func (f *fakeReceiver) ReportRemoved(id uint64) { f.removed <- id }

func (f *fakeReceiver) ReportSnapshot(id uint64, ok bool) {
	f.mu.Lock()
	f.snaps[id] = append(f.snaps[id], ok)
	f.mu.Unlock()
	f.got <- struct{}{}
}

func (f *fakeReceiver) received() []*raftpb.Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*raftpb.Message(nil), f.msgs...)
}

func (f *fakeReceiver) unreachableCount(id uint64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.unreachable[id]
}

func msg(from, to, index uint64, typ raftpb.MessageType) *raftpb.Message {
	return &raftpb.Message{From: new(from), To: new(to), Index: new(index), Type: new(typ)}
}

// pair starts two transports 1 <-> 2 on n.
func pair(t *testing.T, n *Network) (*Transport, *Transport, *fakeReceiver, *fakeReceiver) {
	t1, t2 := n.Transport("a"), n.Transport("b")
	f1, f2 := newFake(), newFake()
	require.NoError(t, t1.Start(1, f1))
	require.NoError(t, t2.Start(2, f2))
	t1.SetPeer(2, "b")
	t2.SetPeer(1, "a")
	t.Cleanup(func() {
		require.NoError(t, t1.Close())
		require.NoError(t, t2.Close())
	})
	return t1, t2, f1, f2
}

func waitN(t *testing.T, c chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("timed out waiting for a delivery")
		}
	}
}

func TestSendDeliversCopiesInOrder(t *testing.T) {
	n := NewNetwork(1)
	n.Delay(0, 0, 0, 3*time.Millisecond) // jitter must not reorder a link
	t1, _, _, f2 := pair(t, n)
	orig := msg(1, 2, 1, raftpb.MsgApp)
	t1.Send([]*raftpb.Message{orig})
	for i := uint64(2); i <= 50; i++ {
		t1.Send([]*raftpb.Message{msg(1, 2, i, raftpb.MsgApp)})
	}
	orig.Index = new(uint64(999)) // raft may reuse its memory after Send
	waitN(t, f2.got, 50)
	got := f2.received()
	require.Len(t, got, 50)
	for i, m := range got {
		require.Equal(t, uint64(i+1), m.GetIndex(), "order kept, copy delivered")
	}
	delivered, dropped := n.Stats()
	require.Equal(t, uint64(50), delivered)
	require.Zero(t, dropped)
}

func TestPartitionDropsAndReportsUnreachable(t *testing.T) {
	n := NewNetwork(1)
	t1, t2, f1, f2 := pair(t, n)
	n.Isolate(2)
	t1.Send([]*raftpb.Message{msg(1, 2, 1, raftpb.MsgApp)})
	require.Equal(t, 1, f1.unreachableCount(2))
	_, err := t1.Forward(context.Background(), 2, &journal.ForwardRequest{Data: []byte("x")})
	require.ErrorIs(t, err, journal.ErrUnreachable)
	_, err = t2.Join(context.Background(), "a", &journal.JoinRequest{ID: 2, Addr: "b"})
	require.ErrorIs(t, err, journal.ErrUnreachable)

	n.Heal()
	t1.Send([]*raftpb.Message{msg(1, 2, 2, raftpb.MsgApp)})
	waitN(t, f2.got, 1)
	require.Equal(t, uint64(2), f2.received()[0].GetIndex(), "nothing from the partition leaked")
	resp, err := t1.Forward(context.Background(), 2, &journal.ForwardRequest{Data: []byte("abc")})
	require.NoError(t, err)
	require.Equal(t, uint64(3), resp.Index)
	jr, err := t2.Join(context.Background(), "a", &journal.JoinRequest{ID: 2, Addr: "b"})
	require.NoError(t, err)
	require.Equal(t, "c1", jr.ClusterID)
}

func TestDropRateIsSeeded(t *testing.T) {
	run := func() uint64 {
		n := NewNetwork(42)
		t1, _, _, f2 := pair(t, n)
		n.Drop(1, 2, 0.5)
		for i := range 200 {
			t1.Send([]*raftpb.Message{msg(1, 2, uint64(i), raftpb.MsgHeartbeat)})
		}
		delivered, dropped := n.Stats()
		require.Equal(t, uint64(200), delivered+dropped)
		waitN(t, f2.got, int(delivered))
		return dropped
	}
	d1, d2 := run(), run()
	require.Equal(t, d1, d2, "same seed, same drops")
	require.InDelta(t, 100, d1, 40)
}

func TestForwardKeepsSentinels(t *testing.T) {
	n := NewNetwork(1)
	t1, _, _, f2 := pair(t, n)
	f2.forwardErr = errors.Join(errors.New("leader is 3"), journal.ErrNotLeader)
	_, err := t1.Forward(context.Background(), 2, &journal.ForwardRequest{Data: []byte("x")})
	require.ErrorIs(t, err, journal.ErrNotLeader)
	_, err = t1.Forward(context.Background(), 7, &journal.ForwardRequest{})
	require.ErrorIs(t, err, journal.ErrUnreachable, "unknown peer")
}

func TestSnapshotReportedOnce(t *testing.T) {
	n := NewNetwork(1)
	t1, _, f1, f2 := pair(t, n)
	t1.Send([]*raftpb.Message{msg(1, 2, 9, raftpb.MsgSnap)})
	waitN(t, f2.got, 1) // delivered
	waitN(t, f1.got, 1) // reported
	f1.mu.Lock()
	require.Equal(t, []bool{true}, f1.snaps[2])
	f1.mu.Unlock()

	n.Isolate(1)
	t1.Send([]*raftpb.Message{msg(1, 2, 10, raftpb.MsgSnap)})
	waitN(t, f1.got, 1)
	f1.mu.Lock()
	require.Equal(t, []bool{true, false}, f1.snaps[2])
	f1.mu.Unlock()
}

func TestClosedNodeIsUnreachableAndAddressReusable(t *testing.T) {
	n := NewNetwork(1)
	t1, t2 := n.Transport("a"), n.Transport("b")
	f1 := newFake()
	require.NoError(t, t1.Start(1, f1))
	require.NoError(t, t2.Start(2, newFake()))
	t1.SetPeer(2, "b")
	require.Error(t, n.Transport("b").Start(3, newFake()), "address in use")
	require.NoError(t, t2.Close())
	require.NoError(t, t2.Close(), "idempotent")
	_, err := t1.Forward(context.Background(), 2, &journal.ForwardRequest{})
	require.ErrorIs(t, err, journal.ErrUnreachable)

	t2b := n.Transport("b") // the restarted node
	f2 := newFake()
	require.NoError(t, t2b.Start(2, f2))
	t1.Send([]*raftpb.Message{msg(1, 2, 5, raftpb.MsgApp)})
	waitN(t, f2.got, 1)
	require.NoError(t, t1.Close())
	require.NoError(t, t2b.Close())
}

// TestRemovePeerDeliversWhatWasQueued: RemovePeer lets the queue deliver
// what it held when due within drainTimeout, drops what is due later, and
// nothing sent after it reaches the removed peer (as over HTTP).
func TestRemovePeerDeliversWhatWasQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := NewNetwork(1)
		t1, _, f1, f2 := pair(t, n)
		n.Delay(1, 2, time.Second, 0)
		t1.Send([]*raftpb.Message{msg(1, 2, 1, raftpb.MsgApp)})
		n.Delay(1, 2, 2*drainTimeout, 0)
		t1.Send([]*raftpb.Message{msg(1, 2, 2, raftpb.MsgApp)})
		t1.RemovePeer(2)
		t1.Send([]*raftpb.Message{msg(1, 2, 3, raftpb.MsgApp)})

		time.Sleep(3 * drainTimeout)
		synctest.Wait()
		got := f2.received()
		require.Len(t, got, 1, "only the batch due within drainTimeout is delivered")
		require.Equal(t, uint64(1), got[0].GetIndex())
		require.Positive(t, f1.unreachableCount(2), "the send after RemovePeer is reported unreachable")
	})
}

// A delivery the peer refuses with ErrRemoved is reported to the sender
// through ReportRemoved, naming the peer, as the HTTP transport does.
func TestRefusalAsRemovedIsReported(t *testing.T) {
	n := NewNetwork(1)
	t1, _, f1, f2 := pair(t, n)
	f2.mu.Lock()
	f2.receiveErr = fmt.Errorf("%w: node 1", journal.ErrRemoved)
	f2.mu.Unlock()
	t1.Send([]*raftpb.Message{msg(1, 2, 1, raftpb.MsgApp)})
	waitN(t, f2.got, 1)
	select {
	case id := <-f1.removed:
		require.Equal(t, uint64(2), id)
	case <-time.After(10 * time.Second):
		t.Fatal("the refusal as removed was not reported")
	}
}
