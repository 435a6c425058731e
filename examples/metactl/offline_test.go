package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/examples/frontend"
)

func TestImageStatusVerifyDump(t *testing.T) {
	d := newDataDir(t, 30, 20)

	r := metactl(t, "image", "status", d.imagePath())
	require.Equal(t, 0, r.code, r.stderr)
	var st imageStatusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.Equal(t, d.image, st.Index)
	require.True(t, st.ChecksumOK)
	require.NotEmpty(t, st.ClusterID)
	require.EqualValues(t, 1, st.Format)
	fi, err := os.Stat(d.imagePath())
	require.NoError(t, err)
	require.Equal(t, fi.Size(), st.Bytes)

	// DIR: the newest valid image of the data dir, the same one.
	r = metactl(t, "image", "status", d.dir)
	require.Equal(t, 0, r.code, r.stderr)
	var dst imageStatusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &dst))
	require.Equal(t, st, dst)

	r = metactl(t, "image", "verify", d.imagePath())
	require.Equal(t, 0, r.code, r.stderr)

	r = metactl(t, "image", "dump", d.imagePath())
	require.Equal(t, 0, r.code, r.stderr)
	lines := jsonLines(r.stdout)
	require.Len(t, lines, st.Nodes, "dump lists every node but the root")
	var paths []string
	found := map[string]dumpNode{}
	for _, l := range lines {
		var n dumpNode
		require.NoError(t, json.Unmarshal([]byte(l), &n))
		require.True(t, strings.HasPrefix(n.Path, "/") && n.Path != "/", n.Path)
		paths = append(paths, n.Path)
		found[n.Path] = n
	}
	require.True(t, slices.IsSorted(paths), "dump is in path order")
	for i := range 20 {
		n, ok := found[fmt.Sprintf("/db%d", i)]
		require.True(t, ok, "/db%d is in the image", i)
		require.Equal(t, "database", n.Kind)
		require.Equal(t, int64(i), n.Attrs["n"].Int64())
	}
	_, ok := found["/db20"]
	require.False(t, ok, "/db20 was written after the image")
}

func TestImageVerifyFlippedByte(t *testing.T) {
	d := newDataDir(t, 5, 5)
	copyPath := filepath.Join(t.TempDir(), "copy.img")
	b, err := os.ReadFile(d.imagePath())
	require.NoError(t, err)
	b[len(b)-30] ^= 0x40 // in the body, before the 20-byte trailer
	require.NoError(t, os.WriteFile(copyPath, b, 0o644))

	for _, cmd := range [][]string{{"image", "verify", copyPath}, {"image", "dump", copyPath}} {
		r := metactl(t, cmd...)
		require.Equal(t, 1, r.code, "%v", cmd)
		require.Contains(t, r.stderr, copyPath, "the error names the file")
		require.Contains(t, r.stderr, "corrupt")
		if cmd[1] == "dump" {
			require.Empty(t, r.stdout, "nothing of an unverified image is printed")
		}
	}
	r := metactl(t, "image", "status", copyPath)
	require.Equal(t, 1, r.code)
	var st imageStatusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.False(t, st.ChecksumOK)

	r = metactl(t, "image", "verify", filepath.Join(t.TempDir(), "absent"))
	require.Equal(t, 1, r.code, "a missing file is exit 1")
}

func TestJournalStatusAndEntries(t *testing.T) {
	d := newDataDir(t, 10, 10)

	r := metactl(t, "journal", "status", d.dir)
	require.Equal(t, 0, r.code, r.stderr)
	var st journalStatusJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st))
	require.EqualValues(t, 1, st.FirstIndex)
	require.GreaterOrEqual(t, st.LastIndex, d.last)
	require.GreaterOrEqual(t, st.Commit, d.last)
	require.EqualValues(t, 1, st.NodeID)
	require.Equal(t, []uint64{1}, st.Voters)
	require.Len(t, st.Members, 1)
	require.Equal(t, uint64(1), st.Members[0].ID)
	require.NotEmpty(t, st.ClusterID)

	r = metactl(t, "journal", "entries", d.dir)
	require.Equal(t, 0, r.code, r.stderr)
	var all []entryJSON
	for _, l := range jsonLines(r.stdout) {
		var e entryJSON
		require.NoError(t, json.Unmarshal([]byte(l), &e))
		all = append(all, e)
	}
	require.EqualValues(t, st.LastIndex, len(all), "every entry from 1 to the last")
	require.Equal(t, "conf_change", all[0].Kind, "the bootstrap's conf change")
	require.Equal(t, "add_node", all[0].Change.Type)
	kinds := map[string]int{}
	for _, e := range all {
		kinds[e.Kind]++
		require.Empty(t, e.Error, "entry %d", e.Index)
		if e.Index == d.last {
			require.Equal(t, "user", e.Kind)
			require.Len(t, e.Key, 36, "the idempotency key, as a UUID")
			require.Len(t, e.Ops, 1)
			require.Equal(t, "create", e.Ops[0].Op)
			require.Equal(t, "/db9", e.Ops[0].Path)
		}
	}
	require.Positive(t, kinds["timestamp"], "the leader journals its clock")
	require.GreaterOrEqual(t, kinds["user"], 10)

	// -from and -to include both ends, in any order with DIR.
	r = metactl(t, "journal", "entries", "-from", "2", d.dir, "-to", "4")
	require.Equal(t, 0, r.code, r.stderr)
	lines := jsonLines(r.stdout)
	require.Len(t, lines, 3)
	require.Contains(t, lines[0], `"index":2,`)
	require.Contains(t, lines[2], `"index":4,`)

	r = metactl(t, "journal", "entries", d.dir, "-from", "5", "-to", "4")
	require.Equal(t, 2, r.code)
}

// TestJournalRefusesRunningNode: a data dir held by a running node is
// refused with an error that says so; its images can still be read.
func TestJournalRefusesRunningNode(t *testing.T) {
	d := newDataDir(t, 3, 3)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	fe, err := frontend.Start(ctx, frontend.Config{ID: 1, Dir: d.dir, Addr: "127.0.0.1:0", Insecure: true, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	defer fe.Close()
	for _, cmd := range [][]string{{"journal", "status", d.dir}, {"journal", "entries", d.dir}, {"check", d.dir}} {
		r := metactl(t, cmd...)
		require.Equal(t, 1, r.code, "%v", cmd)
		require.Contains(t, r.stderr, "a running node holds", "%v", cmd)
	}
	r := metactl(t, "image", "verify", d.imagePath())
	require.Equal(t, 0, r.code, r.stderr)
}

func TestCheckHealthy(t *testing.T) {
	d := newDataDir(t, 10, 5)
	r := metactl(t, "check", d.dir)
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr)
	var out checkJSON
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
	require.True(t, out.OK)
}

// TestCheckBroken breaks a data dir on purpose, one way per case: check
// names the problem and exits 1.
func TestCheckBroken(t *testing.T) {
	cases := []struct {
		name    string
		breakIt func(t *testing.T, d dataDir)
		want    string
	}{
		{"flipped byte in an image", func(t *testing.T, d dataDir) {
			b, err := os.ReadFile(d.imagePath())
			require.NoError(t, err)
			b[len(b)-30] ^= 1
			require.NoError(t, os.WriteFile(d.imagePath(), b, 0o644))
		}, "image." + "%d: corrupt: checksum mismatch"},
		{"missing log range", func(t *testing.T, d dataDir) {
			deleteEntries(t, d.dir, 5, 8)
		}, "entries [5, 7] are missing from the log"},
		{"missing log start", func(t *testing.T, d dataDir) {
			deleteEntries(t, d.dir, 1, 3)
		}, "entries [1, 2] are missing"},
		{"ROLE disagrees with the membership", func(t *testing.T, d dataDir) {
			require.NoError(t, os.WriteFile(filepath.Join(d.dir, "ROLE"), []byte("role=observer\n"), 0o644))
		}, "ROLE says observer, but the membership"},
		{"leftover image.ckpt", func(t *testing.T, d dataDir) {
			require.NoError(t, os.WriteFile(filepath.Join(d.dir, "image", "image.ckpt"), []byte("half an image"), 0o644))
		}, filepath.Join("image", "image.ckpt") + " (an interrupted checkpoint"},
		{"image of another cluster", func(t *testing.T, d dataDir) {
			require.NoError(t, os.WriteFile(filepath.Join(d.dir, "VERSION"), []byte("cluster_id=other\ntoken=\nnode_id=1\n"), 0o644))
		}, "the data dir to other"},
		{"no VERSION", func(t *testing.T, d dataDir) {
			require.NoError(t, os.Remove(filepath.Join(d.dir, "VERSION")))
		}, "no VERSION file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := newDataDir(t, 10, 5)
			c.breakIt(t, d)
			r := metactl(t, "check", d.dir)
			require.Equal(t, 1, r.code, r.stderr)
			want := c.want
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, d.image)
			}
			require.Contains(t, r.stderr, want)
			var out checkJSON
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
			require.False(t, out.OK)
			require.Len(t, jsonLines(r.stderr), len(out.Problems), "one line per problem")
		})
	}
}

// deleteEntries removes the log's entries [lo, hi) from a data dir's
// Pebble log, whose keys are "l/" and the big-endian index (see
// journal/internal/raftstore).
func deleteEntries(t *testing.T, dir string, lo, hi uint64) {
	t.Helper()
	db, err := pebble.Open(filepath.Join(dir, "journal"), &pebble.Options{Logger: quietLogger{}})
	require.NoError(t, err)
	key := func(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte("l/"), i) }
	require.NoError(t, db.DeleteRange(key(lo), key(hi), pebble.Sync))
	require.NoError(t, db.Close())
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{}, {"nope"}, {"image"}, {"image", "nope"}, {"image", "verify"}, {"image", "verify", "a", "b"},
		{"journal", "entries", "d", "-from", "x"}, {"backup", "-from", "h:1"}, {"restore", "-image", "f"},
		{"restore", "-image", "f", "-dir", "d", "-id", "1", "-addr", "nohostport"}, {"check", "-bogus", "d"},
	} {
		r := metactl(t, args...)
		require.Equal(t, 2, r.code, "%q: %s", args, r.stderr)
		require.Contains(t, r.stderr, "usage:")
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
