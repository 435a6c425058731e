package catalog

import "github.com/prometheus/client_golang/prometheus"

var (
	descNodes = prometheus.NewDesc("metatree_catalog_nodes",
		"Nodes in the catalog, the root included.", nil, nil)
	descBytes = prometheus.NewDesc("metatree_catalog_bytes",
		"Approximate in-memory bytes of the catalog, as its quota counts them.", nil, nil)
	descNodesHeadroom = prometheus.NewDesc("metatree_catalog_quota_nodes_headroom",
		"Nodes the catalog may still grow by before its quota refuses batches (absent without a node quota).", nil, nil)
	descBytesHeadroom = prometheus.NewDesc("metatree_catalog_quota_bytes_headroom",
		"Approximate bytes the catalog may still grow by before its quota refuses batches (absent without a byte quota).", nil, nil)
)

// Collector returns a prometheus.Collector of the tree's series
// (metatree_catalog_nodes, metatree_catalog_bytes, and the headroom left
// under each bound of its Quota), read at scrape time, for the host's own
// registry.
func (t *Tree) Collector() prometheus.Collector { return treeCollector{t} }

type treeCollector struct{ t *Tree }

func (c treeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descNodes
	ch <- descBytes
	ch <- descNodesHeadroom
	ch <- descBytesHeadroom
}

func (c treeCollector) Collect(ch chan<- prometheus.Metric) {
	u, q := c.t.Usage(), c.t.Quota()
	ch <- prometheus.MustNewConstMetric(descNodes, prometheus.GaugeValue, float64(u.Nodes))
	ch <- prometheus.MustNewConstMetric(descBytes, prometheus.GaugeValue, float64(u.Bytes))
	if q.MaxNodes > 0 {
		ch <- prometheus.MustNewConstMetric(descNodesHeadroom, prometheus.GaugeValue, float64(q.MaxNodes-u.Nodes))
	}
	if q.MaxBytes > 0 {
		ch <- prometheus.MustNewConstMetric(descBytesHeadroom, prometheus.GaugeValue, float64(q.MaxBytes-u.Bytes))
	}
}
