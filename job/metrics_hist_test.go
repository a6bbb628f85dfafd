package job

import (
	"math"
	"testing"

	"pgregory.net/rapid"
)

// observeAgesByFloat is what the runner did per record before
// observeAges: the age in seconds as a float, bucketed by bucket.
func observeAgesByFloat(h *hist, nowMs int64, ts []int64) {
	for _, ms := range ts {
		if ms <= 0 {
			continue
		}
		d := max(float64(nowMs-ms)/1e3, 0)
		h.counts[h.bucket(d)]++
		h.sum += d
	}
}

// TestObserveAges: observeAges puts every age in the bucket that the float
// age and bucket choose, for ages at, next to and between the bounds of
// both histograms, in the future (clamped to 0) and absent (ms <= 0), and
// sums the same seconds.
func TestObserveAges(t *testing.T) {
	for _, bounds := range [][]float64{e2eBuckets, cycleBuckets} {
		h := newHist(bounds)
		for i, b := range bounds {
			// The limit is the last millisecond at or below the bound.
			if l := h.msLimits[i]; float64(l)/1e3 > b || float64(l+1)/1e3 <= b {
				t.Fatalf("bound %v: limit %d ms", b, l)
			}
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		bounds := e2eBuckets
		if rapid.Bool().Draw(t, "cycle buckets") {
			bounds = cycleBuckets
		}
		nowMs := rapid.Int64Range(1, 4e12).Draw(t, "now")
		ts := rapid.SliceOfN(rapid.OneOf(
			rapid.Int64Range(-2, 0),                                // no timestamp
			rapid.Int64Range(max(1, nowMs-4_000_000), nowMs+5_000), // up to past the largest bound, or ahead
			rapid.Custom(func(t *rapid.T) int64 { // next to a bound
				b := bounds[rapid.IntRange(0, len(bounds)-1).Draw(t, "bound")]
				return max(1, nowMs-int64(math.Round(b*1e3))+rapid.Int64Range(-2, 2).Draw(t, "off"))
			}),
		), 0, 200).Draw(t, "ts")
		got, want := newHist(bounds), newHist(bounds)
		got.observeAges(nowMs, ts)
		observeAgesByFloat(&want, nowMs, ts)
		for i := range want.counts {
			if got.counts[i] != want.counts[i] {
				t.Fatalf("bucket %d (of %v): %d observations, want %d", i, bounds, got.counts[i], want.counts[i])
			}
		}
		if math.Abs(got.sum-want.sum) > 1e-9*max(1, want.sum) {
			t.Fatalf("sum %v, want %v", got.sum, want.sum)
		}
	})
}

// BenchmarkObserveAges: bucketing a cycle's record ages, integer compares
// (observeAges) against the float ages (observeAgesByFloat); ns/op is per
// record.
func BenchmarkObserveAges(b *testing.B) {
	const n = 50_000
	nowMs := int64(1_790_000_000_000)
	ts := make([]int64, n)
	x := uint64(1)
	for i := range ts {
		x = x*6364136223846793005 + 1442695040888963407
		ts[i] = nowMs - int64(x>>40)%4_000_000 // ages up to ~67 minutes, all buckets
	}
	for _, v := range []struct {
		name string
		fn   func(*hist, int64, []int64)
	}{{"int", (*hist).observeAges}, {"float", observeAgesByFloat}} {
		b.Run(v.name, func(b *testing.B) {
			h := newHist(e2eBuckets)
			for b.Loop() {
				v.fn(&h, nowMs, ts)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
		})
	}
}
