package journal_test

import (
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metatree/metatree/journal/journaltest"
)

// scrapeEverySecond registers each node's collector on a registry of its
// own and gathers them all every second, as a Prometheus server would
// (more often than its usual 15 s), until the returned stop is called.
func scrapeEverySecond(b *testing.B, c *journaltest.Cluster) (stop func()) {
	var regs []*prometheus.Registry
	for _, n := range c.Nodes() {
		reg := prometheus.NewRegistry()
		if err := reg.Register(n.Journal().Collector()); err != nil {
			b.Fatal(err)
		}
		regs = append(regs, reg)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			for _, reg := range regs {
				if _, err := reg.Gather(); err != nil {
					b.Error(err)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
