package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// hraftCluster is hashicorp/raft as Consul and Nomad use it: 3 voters over
// raft's TCP transport on 127.0.0.1, raft-boltdb/v2 as the log and stable
// store behind a 512-entry log cache, a file snapshot store, the default
// config, and a map as the state machine.
type hraftCluster struct {
	nodes  []*hraftNode
	leader *hraftNode
}

type hraftNode struct {
	r     *raft.Raft
	fsm   *mapFSM
	store *raftboltdb.BoltStore
	trans *raft.NetworkTransport
}

// mapFSM applies commands of one key and one value, each with a uvarint
// length in front.
type mapFSM struct {
	mu sync.Mutex
	m  map[string][]byte
}

func encodeKV(k string, v []byte) []byte {
	buf := binary.AppendUvarint(nil, uint64(len(k)))
	buf = append(buf, k...)
	buf = binary.AppendUvarint(buf, uint64(len(v)))
	return append(buf, v...)
}

// nextKV decodes the first key and value of data and returns the rest.
func nextKV(data []byte) (k string, v, rest []byte, err error) {
	kl, n := binary.Uvarint(data)
	if n <= 0 || uint64(len(data)-n) < kl {
		return "", nil, nil, errors.New("hraft: bad record: key length")
	}
	k, rest = string(data[n:n+int(kl)]), data[n+int(kl):]
	vl, n := binary.Uvarint(rest)
	if n <= 0 || uint64(len(rest)-n) < vl {
		return "", nil, nil, errors.New("hraft: bad record: value length")
	}
	return k, rest[n : n+int(vl)], rest[n+int(vl):], nil
}

// decodeKV decodes a command: exactly one key and value.
func decodeKV(data []byte) (string, []byte, error) {
	k, v, rest, err := nextKV(data)
	if err == nil && len(rest) > 0 {
		err = errors.New("hraft: bad command: bytes after the value")
	}
	return k, v, err
}

func (f *mapFSM) Apply(l *raft.Log) any {
	k, v, err := decodeKV(l.Data)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.m[k] = bytes.Clone(v)
	f.mu.Unlock()
	return nil
}

func (f *mapFSM) get(k string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.m[k]
	return ok
}

// Snapshot and Restore write and read the map as a sequence of commands.
func (f *mapFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var buf []byte
	for k, v := range f.m {
		buf = append(buf, encodeKV(k, v)...)
	}
	return mapSnapshot(buf), nil
}

func (f *mapFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	m := make(map[string][]byte)
	for len(data) > 0 {
		k, v, rest, err := nextKV(data)
		if err != nil {
			return err
		}
		m[k] = bytes.Clone(v)
		data = rest
	}
	f.mu.Lock()
	f.m = m
	f.mu.Unlock()
	return nil
}

type mapSnapshot []byte

func (s mapSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		return errors.Join(err, sink.Cancel())
	}
	return sink.Close()
}

func (mapSnapshot) Release() {}

func startHraft(ctx context.Context, dir string) (cluster, error) {
	logger := hclog.New(&hclog.LoggerOptions{Name: "hraft", Level: hclog.Error, Output: os.Stderr})
	c := &hraftCluster{}
	var servers []raft.Server
	for i := range 3 {
		t, err := raft.NewTCPTransportWithLogger("127.0.0.1:0", nil, 3, 10*time.Second, logger)
		if err != nil {
			return nil, errors.Join(err, c.close())
		}
		c.nodes = append(c.nodes, &hraftNode{trans: t, fsm: &mapFSM{m: map[string][]byte{}}})
		servers = append(servers, raft.Server{ID: raft.ServerID(fmt.Sprintf("n%d", i+1)), Address: t.LocalAddr()})
	}
	for i, n := range c.nodes {
		d := filepath.Join(dir, string(servers[i].ID))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, errors.Join(err, c.close())
		}
		var err error
		if n.store, err = raftboltdb.NewBoltStore(filepath.Join(d, "raft.db")); err != nil {
			return nil, errors.Join(err, c.close())
		}
		logs, err := raft.NewLogCache(512, n.store)
		if err != nil {
			return nil, errors.Join(err, c.close())
		}
		snaps, err := raft.NewFileSnapshotStoreWithLogger(d, 2, logger)
		if err != nil {
			return nil, errors.Join(err, c.close())
		}
		conf := raft.DefaultConfig()
		conf.LocalID = servers[i].ID
		conf.Logger = logger
		if n.r, err = raft.NewRaft(conf, n.fsm, logs, n.store, snaps, n.trans); err != nil {
			return nil, errors.Join(err, c.close())
		}
		// Bootstrapping every voter with the same configuration is safe.
		if err := n.r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			return nil, errors.Join(err, c.close())
		}
	}
	err := waitFor(ctx, 30*time.Second, func() bool {
		for _, n := range c.nodes {
			if n.r.State() == raft.Leader {
				c.leader = n
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

func (c *hraftCluster) write(ctx context.Context, key string, val []byte, _ bool) error {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	f := c.leader.r.Apply(encodeKV(key, val), timeout)
	if err := f.Error(); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// read is the linearizable read hashicorp/raft offers: on the leader,
// after VerifyLeader confirms with a quorum that it still leads. It has no
// reads on a follower.
func (c *hraftCluster) read(_ context.Context, key string) error {
	if err := c.leader.r.VerifyLeader().Error(); err != nil {
		return err
	}
	if !c.leader.fsm.get(key) {
		return fmt.Errorf("read %s: not found", key)
	}
	return nil
}

func (c *hraftCluster) readVia() string { return "leader" }

func (c *hraftCluster) close() error {
	var errs []error
	// The leader goes first, so that it does not heartbeat stopped peers.
	nodes := slices.Clone(c.nodes)
	if i := slices.Index(nodes, c.leader); i > 0 {
		nodes[0], nodes[i] = nodes[i], nodes[0]
	}
	for _, n := range nodes {
		if n.r != nil {
			errs = append(errs, n.r.Shutdown().Error())
		}
		if n.trans != nil {
			errs = append(errs, n.trans.Close())
		}
		if n.store != nil {
			errs = append(errs, n.store.Close())
		}
	}
	return errors.Join(errs...)
}
