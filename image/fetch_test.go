package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// peer is a node serving its images over real loopback HTTP.
type peer struct {
	fs    vfs.FS
	store *Store
	srv   *httptest.Server
	gets  atomic.Int32 // image downloads served
}

// newPeer starts a peer holding an image of entries 1..n. wrap, when set,
// wraps its handler.
func newPeer(t testing.TB, n uint64, wrap func(http.Handler) http.Handler) *peer {
	t.Helper()
	p := &peer{fs: vfs.NewMem()}
	p.store = openStore(t, p.fs, "/src", newKV())
	writeKV(t, p.store, n)
	var h http.Handler = p.store.Handler()
	if wrap != nil {
		h = wrap(h)
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathPrefix+"latest" {
			p.gets.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *peer) addr() string { return strings.TrimPrefix(p.srv.URL, "http://") }

func TestFetchAndInstall(t *testing.T) {
	ctx := context.Background()
	p := newPeer(t, 300, nil)
	fs := vfs.NewMem()
	st := newKV()
	st.Apply(1, []byte("old=1"))
	s := openStore(t, fs, "/dst", st)

	ri, err := s.RemoteLatest(ctx, p.addr())
	require.NoError(t, err)
	require.Equal(t, uint64(300), ri.Index)
	require.Equal(t, "cluster-a", ri.ClusterID)

	require.NoError(t, s.Fetch(ctx, p.addr(), 300))
	require.Equal(t, map[string]string{"old": "1"}, st.snapshot(), "Fetch does not touch the live state")
	names, _ := fs.List("/dst/image")
	require.ElementsMatch(t, []string{lockName, "image.300.fetched"}, names)
	require.NoError(t, s.Fetch(ctx, p.addr(), 300), "a second Fetch finds the image")
	require.Equal(t, int32(1), p.gets.Load())

	require.NoError(t, s.Install(ctx, 300))
	require.Equal(t, expectedKV(300), st.snapshot())
	require.Equal(t, readAll(t, p.fs, "/src/image/image.300"), readAll(t, fs, "/dst/image/image.300"), "byte-identical copy")
}

// The apache/doris#69642 scenario: eight goroutines (replayer, http, rpc,
// metrics...) demand a restore of the same data dir at once. Exactly one
// download runs; the others wait for it and get its result; the directory
// holds one file from one source.
func TestConcurrentRestoreDemandsRunOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool
		peers   int
	}{
		{"one peer", false, 1},
		{"a different peer each", false, 8},
		{"failure is shared", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const callers = 8
			release := make(chan struct{})
			started := make(chan struct{}, callers)
			var peers []*peer
			for range tc.peers {
				peers = append(peers, newPeer(t, 300, func(h http.Handler) http.Handler {
					return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						started <- struct{}{}
						<-release
						if tc.corrupt {
							rec := httptest.NewRecorder()
							h.ServeHTTP(rec, r)
							b := rec.Body.Bytes()
							b[len(b)/3] ^= 1
							for k, v := range rec.Header() {
								w.Header()[k] = v
							}
							w.Write(b)
							return
						}
						h.ServeHTTP(w, r)
					})
				}))
			}
			fs := vfs.NewMem()
			var joined sync.WaitGroup
			joined.Add(callers - 1)
			s := openStore(t, fs, "/dst", newKV(), func(c *Config) {
				c.testingKnobs.fetchJoined = func(uint64) { joined.Done() }
			})
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() { errs[i] = s.Fetch(ctx, peers[i%len(peers)].addr(), 300) })
			}
			<-started      // one download is in progress...
			joined.Wait()  // ...and the seven others are waiting for it
			close(release) // let it finish
			wg.Wait()

			var gets int32
			for _, p := range peers {
				gets += p.gets.Load()
			}
			require.Equal(t, int32(1), gets, "exactly one restore ran")
			names, _ := fs.List("/dst/image")
			if tc.corrupt {
				for i, err := range errs {
					require.ErrorIs(t, err, ErrCorrupt, "caller %d", i)
				}
				require.ElementsMatch(t, []string{lockName}, names, "nothing of a bad download is left")
				return
			}
			for i, err := range errs {
				require.NoError(t, err, "caller %d", i)
			}
			require.ElementsMatch(t, []string{lockName, "image.300.fetched"}, names)
			require.Equal(t, readAll(t, peers[0].fs, "/src/image/image.300"), readAll(t, fs, "/dst/image/image.300.fetched"))
		})
	}
}

// A caller whose restore was cancelled does not hand its cancellation to
// the callers waiting on it: they run their own.
func TestFetchCancelledRunnerDoesNotFailWaiters(t *testing.T) {
	release := make(chan struct{})
	var calls atomic.Int32
	arrived := make(chan struct{})
	p := newPeer(t, 50, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if calls.Add(1) == 1 {
				close(arrived)
				select {
				case <-release:
				case <-r.Context().Done():
				}
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	joined := make(chan struct{}, 1)
	s := openStore(t, vfs.NewMem(), "/dst", newKV(), func(c *Config) {
		c.testingKnobs.fetchJoined = func(uint64) { joined <- struct{}{} }
	})
	ctx1, cancel1 := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- s.Fetch(ctx1, p.addr(), 50) }()
	<-arrived // the first download is on its way
	second := make(chan error, 1)
	go func() { second <- s.Fetch(context.Background(), p.addr(), 50) }()
	<-joined
	cancel1()
	require.ErrorIs(t, <-first, context.Canceled)
	require.NoError(t, <-second)
	close(release)
	require.Equal(t, int32(2), calls.Load())
}

func TestFetchErrors(t *testing.T) {
	ctx := context.Background()
	serve := func(t *testing.T, f http.HandlerFunc) string {
		srv := httptest.NewServer(f)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	good := newPeer(t, 40, nil)
	goodBytes := readAll(t, good.fs, "/src/image/image.40")
	for _, tc := range []struct {
		name string
		addr func(t *testing.T) string
		opt  storeOpt
		want error
		text string
	}{
		{"wrong token", func(*testing.T) string { return good.addr() }, func(c *Config) { c.Token = "nope" }, ErrUnauthorized, "token"},
		{"wrong cluster", func(*testing.T) string { return good.addr() }, func(c *Config) { c.ClusterID = "cluster-b" }, ErrClusterMismatch, "cluster-b"},
		{"no such index", func(*testing.T) string { return good.addr() }, nil, ErrNotFound, "image.41"},
		{"truncated stream", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				setImageHeaders(w, goodBytes, 41)
				w.Write(goodBytes[:len(goodBytes)/2])
			})
		}, nil, nil, "receive"},
		{"garbage body", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				junk := bytes.Repeat([]byte("garbage!"), 100)
				setImageHeaders(w, junk, 41)
				w.Write(junk)
			})
		}, nil, ErrCorrupt, "bad magic"},
		{"wrong index inside", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				setImageHeaders(w, goodBytes, 41)
				w.Write(goodBytes)
			})
		}, nil, ErrCorrupt, "holds index 40"},
		{"checksum header lies", func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				setImageHeaders(w, goodBytes, 40)
				w.Header().Set(headerCRC, "00000000")
				w.Write(goodBytes)
			})
		}, nil, ErrCorrupt, "announced"},
		{"oversized", func(t *testing.T) string { return good.addr() }, func(c *Config) { c.MaxImageBytes = 10 }, nil, "limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			opts := []storeOpt{}
			if tc.opt != nil {
				opts = append(opts, tc.opt)
			}
			s := openStore(t, fs, "/dst", newKV(), opts...)
			index := uint64(41)
			if tc.opt != nil || tc.name == "checksum header lies" {
				index = 40
			}
			err := s.Fetch(ctx, tc.addr(t), index)
			require.Error(t, err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
			require.Contains(t, err.Error(), tc.text)
			names, _ := fs.List("/dst/image")
			require.ElementsMatch(t, []string{lockName}, names, "no partial file is left")
		})
	}
}

func setImageHeaders(w http.ResponseWriter, b []byte, index uint64) {
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set(headerIndex, strconv.FormatUint(index, 10))
	w.Header().Set(headerCRC, strconv.FormatUint(uint64(crcOf(b)), 16))
}

func crcOf(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return uint32(b[len(b)-4])<<24 | uint32(b[len(b)-3])<<16 | uint32(b[len(b)-2])<<8 | uint32(b[len(b)-1])
}

func TestFetchIdleTimeout(t *testing.T) {
	stall := make(chan struct{})
	defer close(stall)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.Header().Set(headerIndex, "5")
		w.Header().Set(headerCRC, "00000000")
		w.Write([]byte("MTIMAGE"))
		w.(http.Flusher).Flush()
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	s := openStore(t, vfs.NewMem(), "/dst", newKV(), func(c *Config) { c.FetchIdleTimeout = 50 * time.Millisecond })
	err := s.Fetch(context.Background(), srv.URL, 5)
	require.Error(t, err)
	require.True(t, errors.Is(err, errIdle), "%v", err)
}

func TestHandler(t *testing.T) {
	p := newPeer(t, 10, nil)
	do := func(path string, hdr map[string]string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	ok := map[string]string{headerToken: "tok"}
	require.Equal(t, http.StatusOK, do("/image/latest", ok).StatusCode)
	require.Equal(t, http.StatusOK, do("/image/10", ok).StatusCode)
	require.Equal(t, http.StatusForbidden, do("/image/10", nil).StatusCode)
	require.Equal(t, http.StatusConflict, do("/image/10", map[string]string{headerToken: "tok", headerClusterID: "x"}).StatusCode)
	require.Equal(t, http.StatusNotFound, do("/image/11", ok).StatusCode)
	require.Equal(t, http.StatusBadRequest, do("/image/eleven", ok).StatusCode)
	req, _ := http.NewRequest(http.MethodPost, p.srv.URL+"/image/10", strings.NewReader("x"))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// newServer serves s over loopback HTTP and returns its address.
func newServer(t testing.TB, s *Store) string {
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// Close stops a download that is in progress instead of waiting for it.
func TestCloseStopsFetch(t *testing.T) {
	arrived := make(chan struct{})
	p := newPeer(t, 30, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(arrived)
			<-r.Context().Done() // a peer that never answers
		})
	})
	s, err := Open(Config{Dir: "/dst", FS: vfs.NewMem(), State: newKV(), Token: "tok"})
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() { errc <- s.Fetch(context.Background(), p.addr(), 30) }()
	<-arrived
	require.NoError(t, s.Close())
	require.ErrorIs(t, <-errc, ErrClosed)
}

func TestRemoteLatest(t *testing.T) {
	ctx := context.Background()
	empty := openStore(t, vfs.NewMem(), "/src", newKV())
	client := openStore(t, vfs.NewMem(), "/dst", newKV())
	_, err := client.RemoteLatest(ctx, newServer(t, empty))
	require.ErrorIs(t, err, ErrNotFound)

	p := newPeer(t, 70, nil)
	writeKV(t, p.store, 90)
	ri, err := client.RemoteLatest(ctx, p.addr())
	require.NoError(t, err)
	want, err := p.store.Verify(90)
	require.NoError(t, err)
	require.Equal(t, RemoteInfo{ClusterID: "cluster-a", Index: 90, Term: 1, Version: FormatVersion, Size: want.Size, CRC: want.CRC}, ri)
}

// TestFetchOnRealDisk writes, serves, fetches and installs an image of
// several megabytes on the real disk (vfs.Default): the path whose files
// start write-back behind the writer (vfs.NewSyncingFile) and are served
// with sendfile, which the in-memory filesystem of the other tests skips.
func TestFetchOnRealDisk(t *testing.T) {
	ctx := context.Background()
	src := newKV()
	value := strings.Repeat("x", 1000)
	const entries = 16_000 // about 16 MB: three write-back steps
	for i := uint64(1); i <= entries; i++ {
		src.Apply(i, fmt.Appendf(nil, "k%05d=%s%d", i, value, i))
	}
	from := openStore(t, vfs.Default, t.TempDir(), newKV())
	info, err := from.Write(ctx, Header{Index: entries, Term: 1, Membership: []byte("m")}, src.Save)
	require.NoError(t, err)
	require.Greater(t, info.Size, int64(3*writeBehind))
	srv := httptest.NewServer(from.Handler())
	t.Cleanup(srv.Close)

	dir := t.TempDir()
	live := newKV()
	to := openStore(t, vfs.Default, dir, live)
	require.NoError(t, to.Fetch(ctx, strings.TrimPrefix(srv.URL, "http://"), entries))
	require.NoError(t, to.Install(ctx, entries))
	require.Equal(t, src.snapshot(), live.snapshot())
	got, err := to.Verify(entries)
	require.NoError(t, err)
	require.Equal(t, info.CRC, got.CRC)
	require.Equal(t, info.Size, got.Size)
}
