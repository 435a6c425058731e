package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/catalog"
	"github.com/metatree/metatree/catalog/catalogtest"
	"github.com/metatree/metatree/image"
)

// corruptNewestImage is the test-only way to corrupt one replica from
// outside: it rewrites the newest image in the stopped member's data dir
// with one attribute of node path changed, keeping the header and writing
// valid checksums, as a bit flipped before the checksum was taken, or a
// restore from the wrong image, would leave it. It returns the image's
// index.
func corruptNewestImage(t *testing.T, dir, path string) uint64 {
	t.Helper()
	fs := vfs.Default
	l, err := image.ListDir(fs, dir)
	require.NoError(t, err)
	require.NotEmpty(t, l.Images, "no image in %s", dir)
	file := l.Path(fs, l.Images[0])
	tree := catalog.New()
	info, err := image.ReadFile(fs, file, func(r io.Reader) error { return tree.Load(r) })
	require.NoError(t, err)
	require.NoError(t, catalogtest.SetAttr(tree, path, "i", catalog.Int(-1)))
	f, err := fs.Create(file+".corrupt", vfs.WriteCategoryUnspecified)
	require.NoError(t, err)
	_, _, err = image.WriteTo(f, info.Header, tree.Save)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
	require.NoError(t, fs.Rename(file+".corrupt", file))
	return l.Images[0]
}

// alarmView is /v1/status's "alarm".
type alarmView struct {
	Kind    string   `json:"kind"`
	Index   uint64   `json:"index"`
	Members []uint64 `json:"members"`
	Local   string   `json:"local"`
	Detail  string   `json:"detail"`
}

func alarmOf(t *testing.T, p *proc) *alarmView {
	var st struct {
		Alarm *alarmView `json:"alarm"`
	}
	if call(t, "GET", p.url("/v1/status"), nil, &st) != http.StatusOK {
		return nil
	}
	return st.Alarm
}

// Three metaservers; one is stopped, its newest image gets one changed
// attribute (valid checksums), and it restarts from it. The consistency
// checks find it: its /v1/status shows the corrupt alarm naming it, its
// /readyz fails naming the alarm, its /metrics has metatree_journal_corrupt
// 1 (the others 0), its reads answer 503 corrupt, writes go on through the
// healthy majority, and `metactl check` on its stopped dir exits 1 naming
// the index and both digests.
func TestCorruptReplicaIsFoundAndTheHealthyMajorityGoesOn(t *testing.T) {
	c := newCluster(t)
	ms := threeVoters(c)
	writeNodes(t, 40, ms...)
	leader := c.waitLeader(30*time.Second, ms...)
	var victim *proc
	for _, p := range ms {
		if p != leader {
			victim = p
			break
		}
	}
	var res struct {
		Index uint64 `json:"index"`
	}
	require200(t, call(t, "POST", victim.url("/v1/checkpoint"), nil, &res), "checkpoint on the victim")
	require.NoError(t, victim.stop())
	imaged := corruptNewestImage(t, victim.dir, "/bk/n0")
	t.Logf("corrupted image %d of %s", imaged, victim.name)

	start := time.Now()
	c.restart(victim)
	eventually(t, 60*time.Second, "the corruption alarm on the victim", func() bool {
		a := alarmOf(t, victim)
		return a != nil && a.Kind == "corrupt"
	})
	t.Logf("corruption detected %v after the restart", time.Since(start))
	a := alarmOf(t, victim)
	st, _ := getStatus(t, victim)
	require.Equal(t, []uint64{st.ID}, a.Members)
	require.NotZero(t, a.Index)
	require.NotEmpty(t, a.Local)

	code, reason := readyz(t, victim)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.True(t, strings.HasPrefix(reason, "corrupt:"), reason)
	require.Equal(t, 1.0, metric(t, victim, "metatree_journal_corrupt"))
	var apiErr apiError
	require.Equal(t, http.StatusServiceUnavailable, call(t, "GET", victim.url("/v1/catalog/bk/n1"), nil, &apiErr))
	require.Equal(t, "corrupt", apiErr.Error)

	// The healthy majority goes on taking writes and raises no alarm of
	// its own.
	for i := range 5 {
		require200(t, call(t, "PUT", leader.url(fmt.Sprintf("/v1/catalog/bk/after%d", i)), map[string]any{"kind": "item"}, nil), "write after the alarm")
	}
	for _, p := range ms {
		if p == victim {
			continue
		}
		require.Equal(t, 0.0, metric(t, p, "metatree_journal_corrupt"), p.name)
		code, reason := readyz(t, p)
		require.Equal(t, http.StatusOK, code, "%s: %s", p.name, reason)
	}

	// The metaservers ran with -compact-margin 10 (fastFlags), so the
	// cluster's dedupe window is 10: check replays the log with the one
	// the dir records, with no flag saying it.
	require.NoError(t, victim.stop())
	code, _, stderr := runMetactl(t, "check", victim.dir)
	require.Equal(t, 1, code, stderr)
	require.Regexp(t, `at the check mark at index \d+ the catalog \(image \d+ and the log after it\) has digest [0-9a-f]{32} \(format 2\), and voters \[[0-9 ]+\] recorded [0-9a-f]{32}`, stderr)
	for _, p := range ms {
		if p == victim {
			continue
		}
		require.NoError(t, p.stop())
		code, _, stderr := runMetactl(t, "check", p.dir)
		require.Equal(t, 0, code, "%s: %s", p.name, stderr)
	}
}

// requireNoFalseAlarm waits until each of ps has compared its catalog
// digest with the other voters' twice more, then requires that none shows
// a consistency alarm: on a correct cluster every alarm is a false one.
func requireNoFalseAlarm(t *testing.T, ps ...*proc) {
	t.Helper()
	const checks = "metatree_journal_consistency_checks_total"
	for _, p := range ps {
		from := metric(t, p, checks)
		eventually(t, 30*time.Second, p.name+" comparing its digest twice more", func() bool {
			m, ok := scrapeMetrics(t, p)
			return ok && m[checks] >= from+2
		})
	}
	for _, p := range ps {
		if a := alarmOf(t, p); a != nil {
			t.Fatalf("%s shows a consistency alarm on a correct cluster: %+v", p.name, *a)
		}
		if v := metric(t, p, "metatree_journal_corrupt"); v != 0 {
			t.Fatalf("%s: metatree_journal_corrupt %v on a correct cluster", p.name, v)
		}
	}
}
