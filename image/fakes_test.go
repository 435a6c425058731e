package image

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// kvState is a trivial State: entries are "key=value".
type kvState struct {
	mu    sync.RWMutex
	m     map[string]string
	index uint64
}

func newKV() *kvState { return &kvState{m: map[string]string{}} }

func (s *kvState) Apply(index uint64, data []byte) any {
	k, v, ok := strings.Cut(string(data), "=")
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.m[k] = v
	}
	s.index = index
	return nil
}

func (s *kvState) Save(w io.Writer) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "kv1 %d %d\n", s.index, len(s.m))
	for _, k := range slices.Sorted(maps.Keys(s.m)) {
		fmt.Fprintf(bw, "%s=%s\n", k, s.m[k])
	}
	return bw.Flush()
}

func (s *kvState) Load(r io.Reader) error {
	sc := bufio.NewScanner(r)
	if !sc.Scan() {
		return errors.New("kv: empty body")
	}
	var index uint64
	var n int
	if _, err := fmt.Sscanf(sc.Text(), "kv1 %d %d", &index, &n); err != nil {
		return fmt.Errorf("kv: bad first line %q", sc.Text())
	}
	m := make(map[string]string, n)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			return fmt.Errorf("kv: bad line %q", sc.Text())
		}
		m[k] = v
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(m) != n {
		return fmt.Errorf("kv: %d keys, header says %d", len(m), n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m, s.index = m, index
	return nil
}

func (s *kvState) snapshot() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return maps.Clone(s.m)
}

func (s *kvState) saved(t testing.TB) []byte {
	var b bytes.Buffer
	require.NoError(t, s.Save(&b))
	return b.Bytes()
}

var errCompacted = errors.New("fake journal: compacted")

// fakeJournal is an in-memory log of "key=value" entries that applies each
// entry to a live state as it is appended.
type fakeJournal struct {
	mu      sync.Mutex
	entries map[uint64][]byte
	first   uint64 // first retained index
	last    uint64
	margin  uint64
	live    State
	images  []uint64
	// recorded holds ImageWritten's arguments, call by call.
	recorded []Header

	imageWrittenErr error
	readBlock       chan struct{} // when set, ReadEntries waits for it or ctx
	readStarted     chan struct{} // when set, ReadEntries sends on it before waiting
	reads           atomic.Int32
	inFlight        atomic.Int32
	maxInFlight     atomic.Int32
}

func newFakeJournal(live State) *fakeJournal {
	return &fakeJournal{entries: map[uint64][]byte{}, first: 1, margin: 10, live: live}
}

func (j *fakeJournal) append(n int) {
	for range n {
		j.add(func(i uint64) []byte { return []byte(fmt.Sprintf("k%d=v%d", i%37, i)) })
	}
}

// appendData commits one entry and applies it to the live state.
func (j *fakeJournal) appendData(d []byte) uint64 {
	return j.add(func(uint64) []byte { return d })
}

// add commits the entry data(index) and applies it to the live state, in
// log order even when called from several goroutines.
func (j *fakeJournal) add(data func(index uint64) []byte) uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.last++
	i := j.last
	d := data(i)
	j.entries[i] = d
	if j.live != nil {
		j.live.Apply(i, d)
	}
	return i
}

func (j *fakeJournal) applied() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.last
}

func (j *fakeJournal) minIndex() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.first - 1
}

func (j *fakeJournal) ReadEntries(ctx context.Context, after, upTo uint64, fn func(uint64, []byte) error) error {
	j.reads.Add(1)
	n := j.inFlight.Add(1)
	defer j.inFlight.Add(-1)
	for {
		m := j.maxInFlight.Load()
		if n <= m || j.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	if j.readBlock != nil {
		if j.readStarted != nil {
			j.readStarted <- struct{}{}
		}
		select {
		case <-j.readBlock:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	j.mu.Lock()
	if after+1 < j.first {
		j.mu.Unlock()
		return fmt.Errorf("%w: entries after %d (first retained %d)", errCompacted, after, j.first)
	}
	if upTo > j.last {
		j.mu.Unlock()
		return fmt.Errorf("fake journal: %d is past the last index %d", upTo, j.last)
	}
	var ents [][]byte
	for i := after + 1; i <= upTo; i++ {
		ents = append(ents, j.entries[i])
	}
	j.mu.Unlock()
	for k, e := range ents {
		if err := fn(after+1+uint64(k), e); err != nil {
			return err
		}
	}
	return nil
}

func (j *fakeJournal) MembershipAt(index uint64) ([]byte, error) {
	return []byte("voters=1,2,3@" + strconv.FormatUint(index/1000, 10)), nil
}

func (j *fakeJournal) TermAt(index uint64) (uint64, error) { return 1 + index/1000, nil }

func (j *fakeJournal) FirstIndex() (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.first, nil
}

func (j *fakeJournal) ImageWritten(ctx context.Context, index, term uint64, membership []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.imageWrittenErr != nil {
		return j.imageWrittenErr
	}
	j.images = append(j.images, index)
	j.recorded = append(j.recorded, Header{Index: index, Term: term, Membership: membership})
	// As the journal does: up to the newest image the margin behind.
	var cut uint64
	for _, i := range j.images {
		if i+j.margin <= index {
			cut = max(cut, i)
		}
	}
	if cut+1 > j.first {
		for i := j.first; i <= cut; i++ {
			delete(j.entries, i)
		}
		j.first = cut + 1
	}
	return nil
}

// expectedKV is the state after applying entries 1..n.
func expectedKV(n uint64) map[string]string {
	m := map[string]string{}
	for i := uint64(1); i <= n; i++ {
		m[fmt.Sprintf("k%d", i%37)] = fmt.Sprintf("v%d", i)
	}
	return m
}

type storeOpt func(*Config)

func openStore(t testing.TB, fs vfs.FS, dir string, st State, opts ...storeOpt) *Store {
	t.Helper()
	cfg := Config{Dir: dir, FS: fs, State: st, ClusterID: "cluster-a", Token: "tok", Logger: testLogger(t)}
	for _, o := range opts {
		o(&cfg)
	}
	s, err := Open(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// writeKV writes an image of a kv state holding entries 1..n at index n.
func writeKV(t testing.TB, s *Store, n uint64) Info {
	t.Helper()
	st := newKV()
	j := newFakeJournal(st)
	j.append(int(n))
	info, err := s.Write(context.Background(), Header{Index: n, Term: 1, Membership: []byte("m")}, st.Save)
	require.NoError(t, err)
	return info
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// logBuffer captures log lines for assertions.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func readAll(t testing.TB, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return b
}

func writeAll(t testing.TB, fs vfs.FS, path string, data []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, err = f.Write(append([]byte(nil), data...))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

func (j *fakeJournal) recordedImages() []Header {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.recorded)
}

// installSnapshot is what raft does when it records a snapshot at index:
// the log is replaced by the snapshot (entries up to index are taken from
// the same deterministic history).
func (j *fakeJournal) installSnapshot(index uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for i := j.first; i <= j.last; i++ {
		delete(j.entries, i)
	}
	j.first, j.last = index+1, index
}
