package metricstest

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Values gathers g and returns each series' value keyed by its name and
// labels (`name{label=value}…`): a gauge's or counter's value, a
// histogram's sample count.
func Values(tb testing.TB, g prometheus.Gatherer) map[string]float64 {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += fmt.Sprintf("{%s=%s}", l.GetName(), l.GetValue())
			}
			switch mf.GetType() {
			case dto.MetricType_GAUGE:
				out[name] = m.GetGauge().GetValue()
			case dto.MetricType_COUNTER:
				out[name] = m.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// Scrape registers cs on a fresh registry and returns Values of it.
func Scrape(tb testing.TB, cs ...prometheus.Collector) map[string]float64 {
	tb.Helper()
	reg := prometheus.NewRegistry()
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			tb.Fatalf("register: %v", err)
		}
	}
	return Values(tb, reg)
}
