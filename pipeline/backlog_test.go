package pipeline

import (
	"testing"
	"time"
)

// TestBacklogInOneGenerationKeepsFalsePositiveRate feeds a stage sized for
// 20k keys per window a backlog of 200k distinct keys whose timestamps all
// fall into one generation, then 100k more new keys, and measures the false
// positives of the Bloom front on the new keys from the stage's own counts
// (store reads that found nothing, over the keys tested). The front grows
// the generation, so the rate stays within 1.5x of the target; a front that
// saturated (the filter before growth) measured nearly every key a false
// positive here.
func TestBacklogInOneGenerationKeepsFalsePositiveRate(t *testing.T) {
	if testing.Short() {
		t.Skip("300k records through Pebble")
	}
	const target = 0.01
	now := time.UnixMilli(benchEpochMs)
	cfg := Config{Window: benchWindow, ExpectedKeys: 20_000, FalsePositiveRate: target}
	s := openTestStage(t, cfg, func() time.Time { return now })
	ks := newKeyStream(1) // every record at the same record time: one generation
	ks.stepMs = 0
	var out []Decision
	var c Counts
	for n := 0; n < 300_000; n += benchBatch {
		var bc Counts
		var err error
		if out, bc, err = s.Process(ks.batch(benchBatch, true), out[:0]); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if n >= 200_000 {
			c.Add(bc)
		}
	}
	// keyStream's keys repeat a few earlier ones (i and i*10^6 collide);
	// those are store hits, not false positives, and are left out.
	rate := float64(c.FalsePositives) / float64(c.FalsePositives+c.BloomNegative)
	st := s.Stats()
	t.Logf("after a 200k-key backlog in one generation: %d false positives of %d new keys (%.3f%%, target %.1f%%); newest generation %+v",
		c.FalsePositives, c.In, 100*rate, 100*target, st.Filter[0])
	if rate > 1.5*target {
		t.Fatalf("false-positive rate %.4f after a backlog in one generation, want at most 1.5x the target %.2f", rate, target)
	}
}
