package fetch

import (
	"fmt"
	"slices"
	"testing"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"
)

// TestFetchMatchesModel writes random interleavings of transactions (three
// transactional producers, each committing or aborting) and
// non-transactional records with kgo, then reads a random range with a random
// MaxBytes and compares with a plain model: the committed and
// non-transactional records in offset order.
func TestFetchMatchesModel(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	plain := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	rapid.Check(t, func(rt *rapid.T) {
		topic := newTopic(t, plain, "model")
		// Fresh producers per topic: kgo v1.22.3 producers reused across
		// many topics sometimes return nil from EndTransaction without
		// sending EndTxn, leaving the transaction open (see txnsDecided).
		var producers []*txnProducer
		for i := range 3 {
			cl, err := kgo.NewClient(txnProducerOpts(brokers, topic, fmt.Sprintf("%s-%d", topic, i))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			producers = append(producers, &txnProducer{tb: t, cl: cl, topic: topic})
		}
		var committed, aborted []rec
		seq := 0
		write := func(n int, who string) [][2]string {
			kvs := make([][2]string, n)
			for i := range kvs {
				seq++
				kvs[i] = [2]string{fmt.Sprintf("%s-%d", who, seq), fmt.Sprintf("value-%d", seq)}
			}
			return kvs
		}
		end := func(p *txnProducer, commit bool) {
			if commit {
				committed = append(committed, p.end(true)...)
			} else {
				aborted = append(aborted, p.end(false)...)
			}
		}
		steps := rapid.IntRange(1, 20).Draw(rt, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 9).Draw(rt, "op"); {
			case op < 5: // transactional write
				p := producers[rapid.IntRange(0, len(producers)-1).Draw(rt, "producer")]
				p.produce(topic, write(rapid.IntRange(1, 4).Draw(rt, "n"), "txn")...)
			case op < 8: // end a transaction
				p := producers[rapid.IntRange(0, len(producers)-1).Draw(rt, "producer")]
				end(p, rapid.Bool().Draw(rt, "commit"))
			default: // non-transactional write
				committed = append(committed, produceWith(t, plain, topic, write(rapid.IntRange(1, 3).Draw(rt, "n"), "plain")...)...)
			}
		}
		for _, p := range producers {
			end(p, rapid.Bool().Draw(rt, "commit"))
		}
		if !txnsDecided(t, plain, topic) {
			rt.Skipf("kgo writer left a transaction open after EndTransaction returned nil")
		}
		sortByOffset(committed)
		total := lastStable(t, plain, topic)

		maxBytes := rapid.SampledFrom([]int{1, 150, 600, 1 << 20}).Draw(rt, "maxBytes")
		from := rapid.Int64Range(0, total).Draw(rt, "from")
		to := rapid.Int64Range(from, total).Draw(rt, "to")
		want := slices.DeleteFunc(slices.Clone(committed), func(r rec) bool { return r.Offset < from || r.Offset >= to })

		f := newFetcher(t, brokers, topic, Options{MaxBytes: maxBytes})
		var got []rec
		err := f.ReadRange(testContext(t), from, to, func(b *Batch) error {
			if len(b.Records) == 0 {
				rt.Fatalf("ReadRange passed an empty batch")
			}
			got = copyBatch(got, b)
			return nil
		})
		if err != nil {
			rt.Fatalf("read range [%d, %d): %v", from, to, err)
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("read range [%d, %d) with MaxBytes %d:\n got %v\nwant %v\naborted %v\n%s", from, to, maxBytes, got, want, aborted, writerCheck(t, brokers, topic, committed))
		}
		if f.Position() != to {
			rt.Fatalf("position %d after reading to %d", f.Position(), to)
		}
		// The same range read ahead (the restore's read): the same records.
		ahead := rapid.IntRange(1, 3).Draw(rt, "ahead")
		got = got[:0]
		err = f.ReadRangeAhead(testContext(t), from, to, ahead, func(b *Batch) error {
			if len(b.Records) == 0 {
				rt.Fatalf("ReadRangeAhead passed an empty batch")
			}
			got = copyBatch(got, b)
			return nil
		})
		if err != nil {
			rt.Fatalf("read range ahead %d [%d, %d): %v", ahead, from, to, err)
		}
		if !slices.Equal(got, want) {
			rt.Fatalf("read range ahead %d [%d, %d) with MaxBytes %d:\n got %v\nwant %v", ahead, from, to, maxBytes, got, want)
		}
		if f.Position() != to {
			rt.Fatalf("position %d after reading ahead to %d", f.Position(), to)
		}
		// From the start with Fetch: every aborted record is counted.
		f.SetPosition(0)
		all, droppedAborted, _ := fetchCounting(t, f, total)
		if !slices.Equal(all, committed) || droppedAborted != len(aborted) {
			rt.Fatalf("fetch from 0: %d records (want %d), dropped %d aborted records, wrote %d\n got %v\nwant %v\naborted %v\n%s", len(all), len(committed), droppedAborted, len(aborted), all, committed, aborted, writerCheck(t, brokers, topic, committed))
		}
	})
}

// writerCheck reads the topic with kgo when the fetcher disagrees with the
// model, to tell a fetcher bug from a writer that did not do what the model
// assumes.
func writerCheck(t *testing.T, brokers []string, topic string, model []rec) string {
	if len(model) == 0 {
		return "kgo cross-check skipped (model empty)"
	}
	k := readKgo(t, brokers, topic, 0, model[len(model)-1].Offset)
	if slices.Equal(k, model) {
		return "kgo read_committed agrees with the model: the fetcher is wrong"
	}
	return fmt.Sprintf("kgo read_committed disagrees with the model too (writer problem?): kgo %v", k)
}
