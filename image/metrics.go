package image

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descLastIndex = prometheus.NewDesc("metatree_image_last_index",
		"Log index of the newest image in the data dir (0: none).", nil, nil)
	descAge = prometheus.NewDesc("metatree_image_age_seconds",
		"Seconds since the newest image in the data dir was written (absent while there is none).", nil, nil)
	descRestores = prometheus.NewDesc("metatree_image_restores_total",
		"Images installed from a peer (a raft snapshot: a lagging or joining node restored).", nil, nil)
	descCheckpoints = prometheus.NewDesc("metatree_image_checkpoints_total",
		"Checkpoints that wrote or adopted an image (ok) or failed (failed).", []string{"result"}, nil)
)

// Collector returns a prometheus.Collector of the store's series
// (metatree_image_last_index, _age_seconds, _restores_total), read at
// scrape time from the directory listing and the store's counters, for
// the host's own registry.
func (s *Store) Collector() prometheus.Collector { return storeCollector{s} }

type storeCollector struct{ s *Store }

func (c storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLastIndex
	ch <- descAge
	ch <- descRestores
}

func (c storeCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	var last uint64
	if l, err := s.list(); err == nil && len(l.installed) > 0 {
		last = l.installed[0]
		if fi, err := s.fs.Stat(s.path(imageName(last))); err == nil {
			age := time.Since(fi.ModTime()).Seconds()
			ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, max(age, 0))
		}
	}
	ch <- prometheus.MustNewConstMetric(descLastIndex, prometheus.GaugeValue, float64(last))
	ch <- prometheus.MustNewConstMetric(descRestores, prometheus.CounterValue, float64(s.restores.Load()))
}

// checkpointMetrics are a Checkpointer's counters: attempts by result, and
// the durations of those that wrote or adopted an image (an unregistered
// histogram owned by the Checkpointer).
type checkpointMetrics struct {
	ok, failed atomic.Uint64
	duration   prometheus.Histogram
}

func newCheckpointMetrics() *checkpointMetrics {
	return &checkpointMetrics{duration: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "metatree_image_checkpoint_duration_seconds", Help: "Time a checkpoint that wrote or adopted an image took.",
		Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 10), // 10 ms to 38 s
	})}
}

// record counts one attempt: failed, ok (an image written or adopted), or
// neither (the newest image was already current).
func (m *checkpointMetrics) record(err error, wrote bool, took time.Duration) {
	switch {
	case err != nil:
		m.failed.Add(1)
	case wrote:
		m.ok.Add(1)
		m.duration.Observe(took.Seconds())
	}
}

// Collector returns a prometheus.Collector of the checkpointer's series
// (metatree_image_checkpoints_total{result="ok|failed"}, both from the
// start, and metatree_image_checkpoint_duration_seconds).
func (c *Checkpointer) Collector() prometheus.Collector { return checkpointCollector{c.metrics} }

type checkpointCollector struct{ m *checkpointMetrics }

func (c checkpointCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCheckpoints
	c.m.duration.Describe(ch)
}

func (c checkpointCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.CounterValue, float64(c.m.ok.Load()), "ok")
	ch <- prometheus.MustNewConstMetric(descCheckpoints, prometheus.CounterValue, float64(c.m.failed.Load()), "failed")
	ch <- c.m.duration
}
