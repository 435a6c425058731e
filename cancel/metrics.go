package cancel

import "github.com/prometheus/client_golang/prometheus"

var (
	descLive = prometheus.NewDesc("metatree_cancel_live_queries",
		"Queries (or fragments, on a worker) registered and neither finished nor cancelled.", nil, nil)
	descCancelled = prometheus.NewDesc("metatree_cancel_cancelled_total",
		"Queries (or fragments) cancelled by a membership event, by reason.", []string{"reason"}, nil)
)

// Collector returns a prometheus.Collector of the registry's series
// (metatree_cancel_*), for the host's own registry. The series of every
// reason exist from the start, at 0.
func (r *Registry) Collector() prometheus.Collector { return registryCollector{r} }

type registryCollector struct{ r *Registry }

func (c registryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descLive
	ch <- descCancelled
}

func (c registryCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descLive, prometheus.GaugeValue, float64(c.r.Stats().Live))
	for _, reason := range []Reason{Restarted, Dead, Removed} {
		ch <- prometheus.MustNewConstMetric(descCancelled, prometheus.CounterValue, float64(c.r.cancelledBy[reason].Load()), reason.String())
	}
}
