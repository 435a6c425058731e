package frontendtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/metatree/metatree/examples/frontend"
	"github.com/metatree/metatree/journal"
)

// ErrInvalidFrontend is JoinFrontend's error for an id that is zero, a
// worker's, or a frontend's that runs.
var ErrInvalidFrontend = errors.New("frontendtest: invalid frontend")

// JoinFrontend starts frontend i on an empty data dir with Config.Join set
// to frontend through's address and Config.Role to role, as a metaserver
// started with -join and -role does: the journal asks through's node to
// admit it (journal.Observer as a learner, journal.Follower or
// journal.RoleUnset as a voter), and the frontend registers its member
// record. It returns once the frontend runs. A restart of i
// (RestartFrontend) starts it with the same role, as the metaserver's
// command line does. Any earlier data of i is dropped first, so an id the
// cluster removed tries to join afresh, and the cluster must refuse it
// (journal.AddMember never reuses a removed id).
func (c *Cluster) JoinFrontend(ctx context.Context, i int, role journal.Role, through int) (*frontend.Frontend, error) {
	c.mu.Lock()
	_, running := c.fes[i]
	_, worker := c.workers[uint64(i)]
	prev, wasJoined := c.joined[i]
	c.mu.Unlock()
	if i <= 0 || running || worker {
		return nil, fmt.Errorf("%w: id %d: want a positive id that is neither a worker's nor a running frontend's", ErrInvalidFrontend, i)
	}
	if err := c.wipe(i); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.joined[i] = role
	c.mu.Unlock()
	f, err := c.start(ctx, i, false, Addr(through))
	if err != nil {
		c.mu.Lock()
		if wasJoined {
			c.joined[i] = prev
		} else {
			delete(c.joined, i)
		}
		c.mu.Unlock()
		return nil, fmt.Errorf("frontendtest: join frontend %d through %d: %w", i, through, err)
	}
	return f, nil
}

// wipe drops frontend i's data dir: a fresh in-memory filesystem, or the
// dir under the test's temp dir removed.
func (c *Cluster) wipe(i int) error {
	if c.opts.InMemory {
		c.mu.Lock()
		delete(c.fss, i)
		c.mu.Unlock()
		return nil
	}
	if err := os.RemoveAll(filepath.Join(c.root, fmt.Sprint(i))); err != nil {
		return fmt.Errorf("frontendtest: data dir of frontend %d: %w", i, err)
	}
	return nil
}

// ReaddWorker adds worker id again after its member record was removed
// (Frontend.RemoveMember), as an operator re-adds a worker host: the
// process stops if it runs, a new one starts at the same address with a
// new epoch, and its record is added through a running frontend. It
// returns once every running frontend's cancel registry knows the new
// epoch and the worker knows every running frontend (AwaitWorker), so
// that a query may span it. An id never added is ErrInvalidWorker; a
// record still there is kept (as AddWorker keeps one), for the new
// process to take over.
func (c *Cluster) ReaddWorker(ctx context.Context, id uint64) (*Worker, error) {
	c.mu.Lock()
	_, added := c.workers[id]
	c.mu.Unlock()
	if !added {
		return nil, fmt.Errorf("%w: no worker %d was added", ErrInvalidWorker, id)
	}
	c.StopWorker(id)
	return c.startAndRecordWorker(ctx, id, "re-add")
}
