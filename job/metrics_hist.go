package job

import (
	"math"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// hist is a Prometheus histogram filled in bulk: a cycle's observations are
// bucketed locally and added at once.
type hist struct {
	bounds []float64
	counts []uint64 // per bucket, the last one +Inf; not cumulative
	sum    float64
	// msLimits[i] is the largest whole number of milliseconds d whose
	// observation d/1e3 seconds falls in bucket i (msLimit), so that
	// observeAges buckets a record's age with integer compares; it is
	// padded with MaxInt64 to a power of two, at least one past the
	// bounds, for a search of fixed steps.
	msLimits []int64
}

func newHist(bounds []float64) hist {
	n := 1
	for n < len(bounds)+1 {
		n *= 2
	}
	lim := make([]int64, n)
	for i := range lim {
		lim[i] = math.MaxInt64
		if i < len(bounds) {
			lim[i] = msLimit(bounds[i])
		}
	}
	return hist{bounds: bounds, counts: make([]uint64, len(bounds)+1), msLimits: lim}
}

// msLimit returns the largest d >= -1 with float64(d)/1e3 <= b: the ages
// in whole milliseconds that bucket(age/1e3) puts at or below bound b.
func msLimit(b float64) int64 {
	d := max(int64(math.Floor(b*1e3)), -1)
	for float64(d+1)/1e3 <= b {
		d++
	}
	for d >= 0 && float64(d)/1e3 > b {
		d--
	}
	return d
}

// bucket returns the index of the bucket of v.
func (h *hist) bucket(v float64) int {
	i, _ := slices.BinarySearch(h.bounds, v)
	return i
}

// observeAges observes, for each timestamp of ts (Unix milliseconds; 0 or
// less: none, skipped), its age at nowMs in seconds, at least 0: what
// observing max(float64(nowMs-ms)/1e3, 0) with bucket does, but found with
// integer compares (a cycle observes every record it decided; the float
// division and the NaN-aware float search cost twice as much).
func (h *hist) observeAges(nowMs int64, ts []int64) {
	var sumMs float64
	for _, ms := range ts {
		if ms <= 0 {
			continue // a record without timestamp (-1)
		}
		d := max(nowMs-ms, 0)
		// The first limit at or above d, in log2(len) steps that do not
		// depend on where d falls (ages are not predictable branches).
		i := 0
		for step := len(h.msLimits) / 2; step > 0; step /= 2 {
			if h.msLimits[i+step-1] < d {
				i += step
			}
		}
		h.counts[i]++
		sumMs += float64(d)
	}
	h.sum += sumMs / 1e3
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
