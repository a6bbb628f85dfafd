package job

import (
	"github.com/prometheus/client_golang/prometheus"
	"slices"
)

// hist is a Prometheus histogram filled in bulk: a cycle's observations are
// bucketed locally and added at once.
type hist struct {
	bounds []float64
	counts []uint64 // per bucket, the last one +Inf; not cumulative
	sum    float64
}

func newHist(bounds []float64) hist {
	return hist{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// bucket returns the index of the bucket of v.
func (h *hist) bucket(v float64) int {
	i, _ := slices.BinarySearch(h.bounds, v)
	return i
}

// merge adds another histogram with the same bounds.
func (h *hist) merge(o *hist) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
	h.sum += o.sum
}

func (h *hist) reset() {
	clear(h.counts)
	h.sum = 0
}

func (h *hist) metric(d *prometheus.Desc, labels ...string) prometheus.Metric {
	cum := make(map[float64]uint64, len(h.bounds))
	var n uint64
	for i, b := range h.bounds {
		n += h.counts[i]
		cum[b] = n
	}
	n += h.counts[len(h.bounds)]
	return prometheus.MustNewConstHistogram(d, n, h.sum, cum, labels...)
}
