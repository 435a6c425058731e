package catalog

import "github.com/prometheus/client_golang/prometheus"

var descNodes = prometheus.NewDesc("metatree_catalog_nodes",
	"Nodes in the catalog, the root included.", nil, nil)

// Collector returns a prometheus.Collector of the tree's series
// (metatree_catalog_nodes), read at scrape time, for the host's own
// registry.
func (t *Tree) Collector() prometheus.Collector { return treeCollector{t} }

type treeCollector struct{ t *Tree }

func (c treeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descNodes }

func (c treeCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(c.t.Len()))
}
