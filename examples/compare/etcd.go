package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
)

// etcdCluster is the etcd server embedded as a Go service embeds it: 3
// members in this process, peers and clients on real TCP on 127.0.0.1,
// etcd's WAL and bbolt backend with fsync on (its defaults). Clients are
// v3client.New: in process, without a gRPC hop.
type etcdCluster struct {
	servers          []*embed.Etcd
	leader, follower *clientv3.Client
}

// freeURLs reserves n loopback ports and returns them as http URLs.
func freeURLs(n int) ([]url.URL, error) {
	var urls []url.URL
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		urls = append(urls, url.URL{Scheme: "http", Host: l.Addr().String()})
		if err := l.Close(); err != nil {
			return nil, err
		}
	}
	return urls, nil
}

func startEtcd(ctx context.Context, dir string) (cluster, error) {
	const n = 3
	peers, err := freeURLs(n)
	if err != nil {
		return nil, err
	}
	clients, err := freeURLs(n)
	if err != nil {
		return nil, err
	}
	var initial []string
	for i := range n {
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i].String()))
	}
	c := &etcdCluster{}
	started := make(chan error, n)
	servers := make([]*embed.Etcd, n)
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = "compare"
		cfg.ClusterState = embed.ClusterStateFlagNew
		cfg.ListenPeerUrls = []url.URL{peers[i]}
		cfg.AdvertisePeerUrls = []url.URL{peers[i]}
		cfg.ListenClientUrls = []url.URL{clients[i]}
		cfg.AdvertiseClientUrls = []url.URL{clients[i]}
		cfg.LogLevel = "error"
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		// The members start together: each waits for the others to form
		// the initial cluster.
		go func() {
			e, err := embed.StartEtcd(cfg)
			if err != nil {
				started <- fmt.Errorf("start member %d: %w", i, err)
				return
			}
			servers[i] = e
			select {
			case <-e.Server.ReadyNotify():
				started <- nil
			case err := <-e.Err():
				started <- fmt.Errorf("member %d: %w", i, err)
			case <-time.After(60 * time.Second):
				started <- fmt.Errorf("member %d: %w", i, errNotReady)
			}
		}()
	}
	var errs []error
	for range n {
		errs = append(errs, <-started)
	}
	for _, e := range servers {
		if e != nil {
			c.servers = append(c.servers, e)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, errors.Join(err, c.close())
	}
	lead := -1
	err = waitFor(ctx, 30*time.Second, func() bool {
		for i, e := range c.servers {
			if e.Server.Leader() == e.Server.MemberID() {
				lead = i
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, errors.Join(err, c.close())
	}
	c.leader = v3client.New(c.servers[lead].Server)
	c.follower = v3client.New(c.servers[(lead+1)%n].Server)
	return c, nil
}

func (c *etcdCluster) write(ctx context.Context, key string, val []byte, _ bool) error {
	_, err := c.leader.Put(ctx, key, string(val))
	return err
}

func (c *etcdCluster) read(ctx context.Context, key string) error {
	resp, err := c.follower.Get(ctx, key) // linearizable by default
	if err != nil {
		return err
	}
	if len(resp.Kvs) != 1 {
		return fmt.Errorf("read %s: %d values", key, len(resp.Kvs))
	}
	return nil
}

func (c *etcdCluster) readVia() string { return "follower" }

func (c *etcdCluster) close() error {
	var errs []error
	for _, cli := range []*clientv3.Client{c.leader, c.follower} {
		// An in-process client's Close cancels its context and returns that.
		if cli != nil {
			if err := cli.Close(); !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		}
	}
	for _, e := range c.servers {
		e.Close()
	}
	return errors.Join(errs...)
}
