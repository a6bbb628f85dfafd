package fetch

import (
	"errors"
	"fmt"
	"testing"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestReadRangeAheadStopsOnError checks that an error from fn ends the
// read with that error after fn saw the batches before it only, that the
// fetching goroutine is done when ReadRangeAhead returns (the Fetcher is
// usable again at once: -race sees any overlap), and that the read from
// there returns the rest. (TestFetchMatchesModel compares what it reads
// with the model.)
func TestReadRangeAheadStopsOnError(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	topic := newTopic(t, cl, "ahead")
	// One record batch per produce and per fetch: many batches, several
	// of them fetched ahead.
	var want []rec
	for i := range 30 {
		want = append(want, produceWith(t, cl, topic, [2]string{fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)})...)
	}
	f := newFetcher(t, brokers, topic, Options{MaxBytes: 1})
	for _, ahead := range []int{1, 3} {
		stop := errors.New("stop")
		var got []rec
		calls := 0
		err := f.ReadRangeAhead(testContext(t), 0, ToLastStable, ahead, func(b *Batch) error {
			if calls++; calls == 10 {
				return stop
			}
			got = copyBatch(got, b)
			return nil
		})
		if !errors.Is(err, stop) {
			t.Fatalf("ahead %d: err %v, want fn's error", ahead, err)
		}
		if calls != 10 {
			t.Fatalf("ahead %d: fn called %d times after its error at call 10", ahead, calls)
		}
		diffRecs(t, fmt.Sprintf("ahead %d: records before the error", ahead), got, want[:len(got)])
		if n := len(got); n < 9 {
			t.Fatalf("ahead %d: %d records in 9 batches", ahead, n)
		}
		// The fetcher is idle: read on from after the records handed out.
		next := got[len(got)-1].Offset + 1
		rest := readAll(t, f, next)
		diffRecs(t, fmt.Sprintf("ahead %d: the rest", ahead), append(got, rest...), want)
	}
	if err := f.ReadRangeAhead(testContext(t), 0, ToLastStable, 0, func(*Batch) error { return nil }); err == nil {
		t.Fatal("ahead 0 accepted")
	}
}
