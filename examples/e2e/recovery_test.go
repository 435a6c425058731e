package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// runMetactl runs the metactl binary and returns its exit code and output.
func runMetactl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(binaries.metactl, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("metactl %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// threeVoters starts metaservers 1 (bootstrap), 2 and 3 (joined) and
// waits until they agree on a leader.
func threeVoters(c *cluster) []*proc {
	m1 := c.metaserver(1, "-bootstrap")
	c.waitLeader(30*time.Second, m1)
	m2 := c.metaserver(2, "-join", m1.addr)
	m3 := c.metaserver(3, "-join", m1.addr)
	ms := []*proc{m1, m2, m3}
	c.waitLeader(30*time.Second, ms...)
	return ms
}

// writeNodes creates /bk and /bk/n0 … /bk/n<n-1> through the given
// servers, eight writers at a time.
func writeNodes(t *testing.T, n int, through ...*proc) {
	t.Helper()
	require200(t, call(t, "PUT", through[0].url("/v1/catalog/bk"), map[string]any{"kind": "dir"}, nil), "create /bk")
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				p := through[i%len(through)]
				if code := call(t, "PUT", p.url(fmt.Sprintf("/v1/catalog/bk/n%d", i)), map[string]any{"kind": "item", "attrs": map[string]any{"i": i}}, nil); code != http.StatusOK {
					errs <- fmt.Sprintf("write /bk/n%d through %s: status %d", i, p.name, code)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

func require200(t *testing.T, code int, what string) {
	t.Helper()
	if code != http.StatusOK {
		t.Fatalf("%s: status %d", what, code)
	}
}

// checkpointAll has every server write an image at one index and returns
// it: with no writes running, the servers' applied indexes agree between
// two leader timestamps.
func checkpointAll(t *testing.T, ms []*proc) uint64 {
	t.Helper()
	for attempt := range 10 {
		var applied uint64
		eventually(t, 30*time.Second, "every server applied the same index", func() bool {
			applied = 0
			for _, p := range ms {
				st, ok := getStatus(t, p)
				if !ok || (applied != 0 && st.Applied != applied) {
					return false
				}
				applied = st.Applied
			}
			return true
		})
		var idx []uint64
		for _, p := range ms {
			var out struct {
				Index uint64 `json:"index"`
			}
			require200(t, call(t, "POST", p.url("/v1/checkpoint"), nil, &out), "checkpoint on "+p.name)
			idx = append(idx, out.Index)
		}
		if idx[0] == idx[1] && idx[1] == idx[2] {
			return idx[0]
		}
		t.Logf("attempt %d: images at %v, not one index; again", attempt, idx)
	}
	t.Fatal("no common image index")
	return 0
}

// TestBackupRestoreNewCluster: a backup from a follower of a 3-node
// cluster with 1,000 writes verifies and dumps byte-identically to every
// member's image at the same index; restored into a fresh dir, it starts a
// new cluster (a new id) with every node, which accepts writes, and two
// more members join it and converge.
func TestBackupRestoreNewCluster(t *testing.T) {
	c := newCluster(t)
	ms := threeVoters(c)
	writeNodes(t, 1000, ms...)
	index := checkpointAll(t, ms)
	leader := c.waitLeader(30*time.Second, ms...)
	var follower *proc
	for _, p := range ms {
		if p != leader {
			follower = p
			break
		}
	}
	oldStatus, _ := getStatus(t, follower)

	backup := filepath.Join(c.base, "backup.img")
	code, out, stderr := runMetactl(t, "backup", "-from", follower.addr, "-out", backup)
	if code != 0 {
		t.Fatalf("backup: exit %d: %s", code, stderr)
	}
	var b struct {
		Index uint64 `json:"index"`
		Bytes int64  `json:"bytes"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil || b.Index != index {
		t.Fatalf("backup printed %q (%v), want index %d", out, err, index)
	}
	if code, _, stderr := runMetactl(t, "image", "verify", backup); code != 0 {
		t.Fatalf("verify: exit %d: %s", code, stderr)
	}
	code, want, stderr := runMetactl(t, "image", "dump", backup)
	if code != 0 {
		t.Fatalf("dump: exit %d: %s", code, stderr)
	}
	for i := range 1000 {
		if !strings.Contains(want, fmt.Sprintf(`{"path":"/bk/n%d","kind":"item","attrs":{"i":%d}`, i, i)) {
			t.Fatalf("the dump lacks /bk/n%d", i)
		}
	}
	for _, p := range ms {
		file := filepath.Join(p.dir, "image", fmt.Sprintf("image.%d", index))
		code, got, stderr := runMetactl(t, "image", "dump", file)
		if code != 0 || got != want {
			t.Fatalf("dump of %s (exit %d, %s) differs from the backup's", file, code, stderr)
		}
	}

	for _, p := range ms {
		p.kill()
	}
	dir := filepath.Join(c.base, "restored")
	addr := freeAddr(t)
	if code, out, stderr := runMetactl(t, "restore", "-image", backup, "-dir", dir, "-id", "1", "-addr", addr); code != 0 {
		t.Fatalf("restore: exit %d: %s %s", code, out, stderr)
	}
	r1 := c.metaserverAt(1, dir, addr)
	c.waitLeader(30*time.Second, r1)
	st, _ := getStatus(t, r1)
	if st.ClusterID == oldStatus.ClusterID || st.ClusterID == "" {
		t.Fatalf("restored cluster id %q, old %q: want a new one", st.ClusterID, oldStatus.ClusterID)
	}
	var bk nodeView
	require200(t, call(t, "GET", r1.url("/v1/catalog/bk"), nil, &bk), "read /bk")
	if len(bk.Children) != 1000 {
		t.Fatalf("/bk has %d children after the restore, want 1000", len(bk.Children))
	}
	require200(t, call(t, "PUT", r1.url("/v1/catalog/bk/after"), map[string]any{"kind": "item"}, nil), "write after the restore")

	// Fresh dirs and new ids: the old members' dirs belong to the old
	// cluster, and the restored one refuses every id the old one had.
	r2 := c.metaserverAt(4, filepath.Join(c.base, "new4"), freeAddr(t), "-join", r1.addr)
	r3 := c.metaserverAt(5, filepath.Join(c.base, "new5"), freeAddr(t), "-join", r1.addr)
	rs := []*proc{r1, r2, r3}
	c.waitLeader(30*time.Second, rs...)
	for _, p := range rs {
		eventually(t, 30*time.Second, p.name+" converged", func() bool {
			var n nodeView
			code := call(t, "GET", p.url("/v1/catalog/bk?consistency=linearizable"), nil, &n)
			return code == http.StatusOK && len(n.Children) == 1001
		})
	}
	eventually(t, 30*time.Second, "the members are the new cluster's three frontends", func() bool {
		var mem []memberView
		if call(t, "GET", r1.url("/v1/members"), nil, &mem) != http.StatusOK {
			return false
		}
		addrs := map[uint64]string{}
		for _, m := range mem {
			if m.Kind == "frontend" {
				addrs[m.ID] = m.Addr
			}
		}
		return len(addrs) == 3 && addrs[1] == r1.addr && addrs[4] == r2.addr && addrs[5] == r3.addr
	})
	requireNoFalseAlarm(t, rs...)
}
