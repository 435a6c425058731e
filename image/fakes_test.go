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
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/internal/fakejournal"
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

// kvJournal is the fake journal (internal/fakejournal) with the live
// state attached, and what these tests commit to it: "key=value" entries.
type kvJournal struct{ *fakejournal.Log }

// newKVJournal returns an empty fake journal that applies every entry to
// live (nil: to nothing) as it commits.
func newKVJournal(live State) *kvJournal {
	j := &kvJournal{fakejournal.New()}
	if live != nil {
		j.Attach(0, live)
	}
	return j
}

// append commits n entries "k<i%37>=v<i>", i their index.
func (j *kvJournal) append(n int) {
	for range n {
		j.CommitFunc(func(i uint64) []byte { return []byte(fmt.Sprintf("k%d=v%d", i%37, i)) })
	}
}

// appendData commits one entry and applies it to the live state.
func (j *kvJournal) appendData(d []byte) uint64 {
	return j.CommitFunc(func(uint64) []byte { return d })
}

// recordedImages returns ImageWritten's arguments, call by call.
func (j *kvJournal) recordedImages() []Header {
	var out []Header
	for _, im := range j.Recorded() {
		out = append(out, Header{Index: im.Index, Term: im.Term, Membership: im.Membership})
	}
	return out
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
	j := newKVJournal(st)
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
