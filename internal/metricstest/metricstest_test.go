package metricstest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestScrapeReadsEveryKind(t *testing.T) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g"}, []string{"k"})
	g.WithLabelValues("a").Set(3)
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "c"})
	c.Add(2)
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h"})
	h.Observe(1)
	h.Observe(5)
	got := Scrape(t, g, c, h)
	want := map[string]float64{"g{k=a}": 3, "c": 2, "h": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}
