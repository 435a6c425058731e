package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// watchLine is one line of a /v1/watch stream: an event, a progress
// notice or an error.
type watchLine struct {
	Index    uint64         `json:"index"`
	Type     string         `json:"type"`
	Path     string         `json:"path"`
	Kind     string         `json:"kind"`
	Attrs    map[string]any `json:"attrs"`
	Progress uint64         `json:"progress"`
	Error    string         `json:"error"`
}

// openWatch starts GET /v1/watch on p; the stream ends when ctx does.
func openWatch(t *testing.T, ctx context.Context, c *http.Client, p *proc, query string) (*http.Response, *bufio.Scanner) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", p.url("/v1/watch?"+query), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("watch on %s: %v", p.name, err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	return resp, sc
}

func nextLine(t *testing.T, sc *bufio.Scanner) (watchLine, bool) {
	t.Helper()
	if !sc.Scan() {
		return watchLine{}, false
	}
	var l watchLine
	if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
		t.Fatalf("watch line %q: %v", sc.Bytes(), err)
	}
	return l, true
}

// streamClient has no overall timeout: a watch lasts as long as it is read.
var streamClient = &http.Client{}

func threeFrontends(t *testing.T, extra ...string) (*cluster, *proc, []*proc) {
	c := newCluster(t)
	fe1 := c.metaserver(1, append([]string{"-bootstrap"}, extra...)...)
	c.waitLeader(15*time.Second, fe1)
	fe2 := c.metaserver(2, append([]string{"-join", fe1.addr}, extra...)...)
	c.waitLeader(20*time.Second, fe1, fe2)
	fe3 := c.metaserver(3, append([]string{"-join", fe1.addr}, extra...)...)
	all := []*proc{fe1, fe2, fe3}
	return c, c.waitLeader(20*time.Second, all...), all
}

// TestWatchResumeOnAnotherMember: a client watches /w on one member, drops
// the connection, and resumes from the last index it saw on another member,
// while a writer goes on writing under /w and elsewhere. It receives every
// write under /w exactly once, in log order, and nothing else.
func TestWatchResumeOnAnotherMember(t *testing.T) {
	_, leader, all := threeFrontends(t, "-checkpoint-entries", "1000000")
	var first, second *proc
	for _, p := range all {
		switch {
		case p == leader:
		case first == nil:
			first = p
		default:
			second = p
		}
	}
	var put struct {
		Index uint64 `json:"index"`
	}
	if code := call(t, "PUT", leader.url("/v1/catalog/w"), map[string]any{"kind": "dir"}, &put); code != http.StatusOK {
		t.Fatalf("PUT /w: %d", code)
	}
	start := put.Index
	if code := call(t, "PUT", leader.url("/v1/catalog/other"), map[string]any{"kind": "dir"}, nil); code != http.StatusOK {
		t.Fatalf("PUT /other: %d", code)
	}

	const writes = 120
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range writes {
			for _, p := range []string{fmt.Sprintf("/w/k%d", i), fmt.Sprintf("/other/k%d", i)} {
				if code := call(t, "PUT", leader.url("/v1/catalog"+p), map[string]any{"kind": "key", "attrs": map[string]any{"i": i}}, nil); code != http.StatusOK {
					t.Errorf("PUT %s: %d", p, code)
					return
				}
			}
		}
	})
	defer wg.Wait()

	seen := map[string]int{}
	var last uint64
	take := func(p *proc, from uint64, upTo int) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel() // the disconnect
		resp, sc := openWatch(t, ctx, streamClient, p, fmt.Sprintf("prefix=/w&from_index=%d", from))
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watch on %s from %d: status %d", p.name, from, resp.StatusCode)
		}
		for len(seen) < upTo {
			l, ok := nextLine(t, sc)
			if !ok {
				t.Fatalf("watch on %s ended after %d events: %v", p.name, len(seen), sc.Err())
			}
			switch {
			case l.Error != "":
				t.Fatalf("watch on %s: error line %+v", p.name, l)
			case l.Progress != 0:
				continue
			}
			if l.Index <= last {
				t.Fatalf("event %+v at or before the last index seen, %d", l, last)
			}
			if l.Type != "create" || !strings.HasPrefix(l.Path, "/w/") || l.Kind != "key" {
				t.Fatalf("unexpected event %+v", l)
			}
			seen[l.Path]++
			last = l.Index
		}
	}
	take(first, start, writes/3)
	resumedAt := last
	take(second, last, writes)
	if resumedAt <= start || resumedAt >= last {
		t.Fatalf("the resume did not split the stream: start %d, resumed at %d, last %d", start, resumedAt, last)
	}
	for i := range writes {
		if p := fmt.Sprintf("/w/k%d", i); seen[p] != 1 {
			t.Errorf("%s seen %d times", p, seen[p])
		}
	}
}

// TestWatchCompacted: once a checkpoint has compacted the log, a watch
// from an index older than it is 410 compacted, and one from the image's
// index replays what followed it.
func TestWatchCompacted(t *testing.T) {
	_, leader, all := threeFrontends(t, "-checkpoint-entries", "1000000")
	follower := all[0]
	if follower == leader {
		follower = all[1]
	}
	// The second checkpoint compacts the log up to the first image.
	images := twoCheckpoints(t, leader, follower, nil)
	ck := struct{ Index uint64 }{images[0]}
	var put struct {
		Index uint64 `json:"index"`
	}
	if code := call(t, "PUT", leader.url("/v1/catalog/after"), map[string]any{"kind": "key"}, &put); code != http.StatusOK {
		t.Fatalf("PUT /after: %d", code)
	}
	var e apiError
	eventually(t, 10*time.Second, "410 compacted for a watch from index 1", func() bool {
		return call(t, "GET", follower.url("/v1/watch?from_index=1"), nil, &e) == http.StatusGone && e.Error == "compacted"
	})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, sc := openWatch(t, ctx, streamClient, follower, fmt.Sprintf("from_index=%d", ck.Index))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch from the image's index %d: status %d", ck.Index, resp.StatusCode)
	}
	for {
		l, ok := nextLine(t, sc)
		if !ok || l.Error != "" {
			t.Fatalf("watch from %d ended (%+v, %v) before /after", ck.Index, l, sc.Err())
		}
		if l.Progress != 0 {
			continue
		}
		if l.Index <= ck.Index {
			t.Fatalf("event %+v at or before from_index %d", l, ck.Index)
		}
		if l.Path == "/after" {
			if l.Index != put.Index || l.Type != "create" {
				t.Fatalf("/after event %+v, want create at %d", l, put.Index)
			}
			return
		}
	}
}

// twoCheckpoints writes 40 keys through leader, checkpoints follower, and
// does it again; the second image compacts follower's log up to the first.
// It returns the images' indexes; written, when set, gets each key's path
// by the index of its batch.
func twoCheckpoints(t *testing.T, leader, follower *proc, written map[uint64]string) [2]uint64 {
	t.Helper()
	var images [2]uint64
	for round := range images {
		for i := range 40 {
			path := fmt.Sprintf("/k%d-%d", round, i)
			var put struct {
				Index uint64 `json:"index"`
			}
			if code := call(t, "PUT", leader.url("/v1/catalog"+path), map[string]any{"kind": "key"}, &put); code != http.StatusOK {
				t.Fatalf("PUT %s: %d", path, code)
			}
			if written != nil {
				written[put.Index] = path
			}
		}
		var ck struct {
			Index uint64 `json:"index"`
		}
		if code := call(t, "POST", follower.url("/v1/checkpoint"), nil, &ck); code != http.StatusOK || ck.Index == 0 {
			t.Fatalf("checkpoint %d on %s: %d, index %d", round, follower.name, code, ck.Index)
		}
		images[round] = ck.Index
	}
	return images
}

// TestWatchResumeBetweenCutAndImage: after two checkpoints, a watch
// resumed from an index past the first image and the compaction margin
// behind the second (still in the log, older than the newest image) is
// served, not 410: every write after it exactly once, in log order, then
// live ones.
func TestWatchResumeBetweenCutAndImage(t *testing.T) {
	_, leader, all := threeFrontends(t, "-checkpoint-entries", "1000000")
	follower := all[0]
	if follower == leader {
		follower = all[1]
	}
	written := map[uint64]string{}
	images := twoCheckpoints(t, leader, follower, written)
	from := images[1] - 5 // the margin is 10: a cut at the margin would drop it
	if from <= images[0] {
		t.Fatalf("images at %d and %d: no index between the cut and the newest", images[0], images[1])
	}
	var put struct {
		Index uint64 `json:"index"`
	}
	if code := call(t, "PUT", leader.url("/v1/catalog/after"), map[string]any{"kind": "key"}, &put); code != http.StatusOK {
		t.Fatalf("PUT /after: %d", code)
	}
	written[put.Index] = "/after"

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, sc := openWatch(t, ctx, streamClient, follower, fmt.Sprintf("from_index=%d", from))
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch from %d (images %v): status %d", from, images, resp.StatusCode)
	}
	var want, got []string
	for i := from + 1; i <= put.Index; i++ {
		if p, ok := written[i]; ok {
			want = append(want, fmt.Sprintf("%d %s", i, p))
		}
	}
	for len(got) < len(want) {
		l, ok := nextLine(t, sc)
		if !ok || l.Error != "" {
			t.Fatalf("watch from %d ended (%+v, %v) after %v", from, l, sc.Err(), got)
		}
		// The cluster's own records (members' heartbeat state) change
		// under /_cluster meanwhile; the test's writes are the rest.
		if l.Progress != 0 || strings.HasPrefix(l.Path, "/_cluster/") {
			continue
		}
		if l.Type != "create" {
			t.Fatalf("event %+v: want only the creates written", l)
		}
		got = append(got, fmt.Sprintf("%d %s", l.Index, l.Path))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("watch from %d:\n got %v\nwant %v", from, got, want)
	}
	if code := call(t, "PUT", leader.url("/v1/catalog/live"), map[string]any{"kind": "key"}, &put); code != http.StatusOK {
		t.Fatalf("PUT /live: %d", code)
	}
	for {
		l, ok := nextLine(t, sc)
		if !ok || l.Error != "" {
			t.Fatalf("watch from %d ended (%+v, %v) before /live", from, l, sc.Err())
		}
		if l.Progress != 0 || strings.HasPrefix(l.Path, "/_cluster/") {
			continue
		}
		if l.Path != "/live" || l.Index != put.Index {
			t.Fatalf("after the replay %+v, want /live at %d, nothing between", l, put.Index)
		}
		return
	}
}

// TestWatchSlowConsumerCutOff: a client that does not read its watch is
// cut off with a resync error line, and the writers never wait for it.
func TestWatchSlowConsumerCutOff(t *testing.T) {
	_, leader, _ := threeFrontends(t)
	// A small receive buffer, so that the server's side fills soon.
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	slowClient := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext}}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	resp, sc := openWatch(t, ctx, slowClient, leader, "prefix=/")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("watch: %d", resp.StatusCode)
	}

	// Each txn creates 50 nodes of 2 KB: the watcher's buffer (1,024
	// events) and the sockets' fill long before the writes end.
	big := strings.Repeat("x", 2048)
	const txns = 100
	for i := range txns {
		var ops []map[string]any
		for j := range 50 {
			ops = append(ops, map[string]any{"op": "create", "path": fmt.Sprintf("/n%d_%d", i, j), "kind": "key", "attrs": map[string]any{"v": big}})
		}
		if code := call(t, "POST", leader.url("/v1/txn"), map[string]any{"ops": ops}, nil); code != http.StatusOK {
			t.Fatalf("txn %d while a watcher is not read: status %d", i, code)
		}
	}
	// Now read: the events that fit, then the cut-off.
	var events int
	for {
		l, ok := nextLine(t, sc)
		if !ok {
			t.Fatalf("stream ended after %d events without a resync error: %v", events, sc.Err())
		}
		if l.Error != "" {
			if l.Error != "resync" {
				t.Fatalf("error line %+v, want resync", l)
			}
			break
		}
		if l.Progress == 0 {
			events++
		}
	}
	if events >= txns*50 {
		t.Fatalf("the slow client got all %d events: it was never cut off", events)
	}
	if l, ok := nextLine(t, sc); ok {
		t.Fatalf("a line after the resync error: %+v", l)
	}
}
