package journal_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"

	"github.com/metatree/metatree/journal"
	"github.com/metatree/metatree/journal/journaltest"
)

// slowWALFS makes every fsync of a Pebble WAL file (the journal's synced
// writes: entries, term and vote) take delay of the bubble's time. Only
// the WAL's: Pebble syncs other files (the MANIFEST) under a mutex that
// its background goroutines take too, and a goroutine waiting on a mutex
// keeps a synctest bubble's clock from advancing.
type slowWALFS struct {
	vfs.FS
	delay time.Duration
}

type slowWALFile struct {
	vfs.File
	delay time.Duration
}

func (f slowWALFile) Sync() error     { time.Sleep(f.delay); return f.File.Sync() }
func (f slowWALFile) SyncData() error { time.Sleep(f.delay); return f.File.SyncData() }
func (f slowWALFile) SyncTo(n int64) (bool, error) {
	time.Sleep(f.delay)
	return f.File.SyncTo(n)
}

func (fs *slowWALFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return slowWALFile{File: f, delay: fs.delay}, nil
}

func (fs *slowWALFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *slowWALFS) ReuseForWrite(old, name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(old, name, c)
	return fs.wrap(name, f, err)
}

// TestSlowDiskDelaysElectionOfSoleVoter: a single voter whose every fsync
// takes three election timeouts still elects itself, in its first
// campaigns, and takes writes: the time its own vote needs to become
// durable delays the election, it does not restart it. Time is the
// bubble's, so the slow disk costs the test no wall-clock time.
func TestSlowDiskDelaysElectionOfSoleVoter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			tick          = 10 * time.Millisecond
			electionTicks = 10
		)
		slow := &slowWALFS{FS: vfs.NewMem()}
		c := journaltest.NewCluster(t, journaltest.Options{
			Voters: 1, TickInterval: tick, ElectionTicks: electionTicks, HeartbeatTicks: 1,
			Configure: func(cfg *journal.Config) {
				cfg.FS = slow
				// The bootstrap's own writes are slow as well.
				slow.delay = 3 * electionTicks * tick
			},
		})
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		j := c.Node(1).Journal()
		for !j.Status().IsLeader() {
			ch := j.Leadership()
			if j.Status().IsLeader() {
				break
			}
			select {
			case <-ch:
			case <-ctx.Done():
				t.Fatalf("no leader after a minute of slow fsyncs: %+v", j.Status())
			}
		}
		require.LessOrEqual(t, j.Status().Term, uint64(3), "each election timeout started a new campaign")
		_, _, err := j.Propose(ctx, []byte("w"))
		require.NoError(t, err)
		c.Close()
	})
}
