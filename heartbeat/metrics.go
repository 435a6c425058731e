package heartbeat

import (
	"github.com/metatree/metatree/heartbeat/epoch"
	"github.com/metatree/metatree/internal/ratelimit"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are a Membership's own counters, read by its collector at
// scrape time.
type metrics struct {
	// rtt is an unregistered histogram owned by the Membership: the time
	// a heartbeat took to be answered (on the leader).
	rtt prometheus.Histogram
	// events counts the transitions delivered on this frontend, by type.
	events [epoch.Removed + 1]atomic.Uint64

	slowRound ratelimit.Log
}

func newMetrics() *metrics {
	return &metrics{rtt: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "metatree_heartbeat_rtt_seconds", Help: "Round-trip time of one answered heartbeat, measured by the leader.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9), // 100 µs to 6.6 s
	})}
}

var (
	descMembers = prometheus.NewDesc("metatree_heartbeat_members",
		"Members by kind and status, as this frontend has replayed them.", []string{"kind", "status"}, nil)
	descMissed = prometheus.NewDesc("metatree_heartbeat_missed_total",
		"Heartbeats this frontend sent as leader that went unanswered.", nil, nil)
	descEvents = prometheus.NewDesc("metatree_heartbeat_events_total",
		"Member transitions delivered on this frontend, by type.", []string{"type"}, nil)
)

// eventTypes are the transitions counted by metatree_heartbeat_events_total.
var eventTypes = []epoch.EventType{epoch.Added, epoch.Restarted, epoch.Dead, epoch.Alive, epoch.Removed}

// Collector returns a prometheus.Collector of this Membership's series
// (metatree_heartbeat_*), for the host's own registry. Every labelled
// series exists from the start, at 0.
func (m *Membership) Collector() prometheus.Collector { return membershipCollector{m} }

type membershipCollector struct{ m *Membership }

func (c membershipCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descMembers
	ch <- descMissed
	ch <- descEvents
	c.m.metrics.rtt.Describe(ch)
}

func (c membershipCollector) Collect(ch chan<- prometheus.Metric) {
	var counts [epoch.KindWorker + 1][StatusDead + 1]int
	for _, r := range c.m.Members() {
		if r.Kind <= epoch.KindWorker && r.Status <= StatusDead {
			counts[r.Kind][r.Status]++
		}
	}
	for _, k := range []epoch.Kind{epoch.KindFrontend, epoch.KindWorker} {
		for _, s := range []Status{StatusAlive, StatusDead} {
			ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(counts[k][s]), k.String(), s.String())
		}
	}
	ch <- prometheus.MustNewConstMetric(descMissed, prometheus.CounterValue, float64(c.m.mon.stats.misses.Load()))
	for _, t := range eventTypes {
		ch <- prometheus.MustNewConstMetric(descEvents, prometheus.CounterValue, float64(c.m.metrics.events[t].Load()), t.String())
	}
	ch <- c.m.metrics.rtt
}

// noteRound warns when a heartbeat round (every member probed in
// parallel) took longer than Config.SlowRound.
func (m *Membership) noteRound(took time.Duration) {
	if took < m.cfg.SlowRound {
		return
	}
	if ok, n := m.metrics.slowRound.Allow(m.cfg.Clock.Now()); ok {
		m.log.Warn("heartbeat: slow round", "took", took, "threshold", m.cfg.SlowRound, "suppressed", n)
	}
}

// Answer is what the leader knows of one member from its heartbeats.
type Answer struct {
	// Last is when the member last answered a heartbeat of this leader.
	Last time.Time
	// Version is the software version the member reported.
	Version string
}

// Answers returns, while this frontend leads, the last heartbeat answer
// of each member it probed; nil on a frontend that does not lead (only
// the leader heartbeats).
func (m *Membership) Answers() map[uint64]Answer {
	mo := m.mon
	mo.mu.Lock()
	defer mo.mu.Unlock()
	if !mo.mu.leading {
		return nil
	}
	out := make(map[uint64]Answer, len(mo.mu.peers))
	for id, p := range mo.mu.peers {
		if !p.answered.IsZero() {
			out[id] = Answer{Last: p.answered, Version: p.version}
		}
	}
	return out
}

// maxVersionLen bounds the version string kept from a member's answer.
const maxVersionLen = 64

// noteAnswer records a member's answer to a heartbeat.
func (mo *monitor) noteAnswer(id uint64, at time.Time, version string) {
	if len(version) > maxVersionLen {
		version = version[:maxVersionLen]
	}
	mo.mu.Lock()
	if p := mo.mu.peers[id]; p != nil {
		p.answered, p.version = at, version
	}
	mo.mu.Unlock()
}
