package job_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outputFitInput is keys small records of about 150 bytes, many more
// than one 16 KiB batch holds per partition, and the record of key "big"
// with a value of 20 KiB, then a small record of the same key.
func outputFitInput(e *env, prefix string, keys int) (small []*kgo.Record, big, bigAgain *kgo.Record) {
	for i := range keys {
		id := fmt.Sprintf("%s-%d", prefix, i)
		small = append(small, &kgo.Record{Topic: e.raw, Partition: int32(partition.Murmur2Partition([]byte(id), partitions)), Key: []byte(id),
			Value: fmt.Appendf(nil, `{"order_id":%q,"pad":%q}`, id, strings.Repeat("x", 120))})
	}
	id := prefix + "-big"
	p := int32(partition.Murmur2Partition([]byte(id), partitions))
	big = &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"pad":%q}`, id, strings.Repeat("y", 20<<10))}
	bigAgain = &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q,"small":true}`, id)}
	return small, big, bigAgain
}

// checkOutputFit reads the output and the DLQ with kgo: every small
// record and the later record of each big key once in the output, each big
// record once in the DLQ with reason record_too_large.
func checkOutputFit(t *testing.T, e *env, small, bigs, bigsAgain []*kgo.Record) {
	t.Helper()
	out, dlq := e.readOutput()
	seen := map[string]int{}
	for _, r := range out {
		seen[string(r.Value)]++
	}
	for _, r := range append(small, bigsAgain...) {
		if seen[string(r.Value)] != 1 {
			t.Errorf("key %s: its record is %d times in the output, want once", r.Key, seen[string(r.Value)])
		}
	}
	if len(out) != len(small)+len(bigsAgain) {
		t.Errorf("output holds %d records, want %d", len(out), len(small)+len(bigsAgain))
	}
	if len(dlq) != len(bigs) {
		t.Fatalf("DLQ holds %d records, want the %d big ones", len(dlq), len(bigs))
	}
	want := map[string]bool{}
	for _, b := range bigs {
		want[string(b.Key)] = true
	}
	for _, d := range dlq { // stages share the DLQ partition: any order
		reason := ""
		for _, h := range d.Headers {
			if h.Key == job.HeaderReason {
				reason = string(h.Value)
			}
		}
		if !want[string(d.Key)] || reason != "record_too_large" {
			t.Errorf("DLQ record of key %s, reason %q: want one of each big key, reason record_too_large", d.Key, reason)
		}
		delete(want, string(d.Key))
	}
}

// TestOutputMaxMessageBytes: the output topic takes batches of at most
// 16 KiB (max.message.bytes), set before the job starts or lowered while
// it runs. Small records must all come out, in batches that fit; a record
// that cannot fit the output alone goes to the DLQ as record_too_large
// (its key not remembered, so its later small record comes out). A limit
// lowered under a running job stops it with an error that says so, and
// the next start goes on: no loop of restarts (checked with kgo).
func TestOutputMaxMessageBytes(t *testing.T) {
	t.Run("set before the start", func(t *testing.T) {
		e := newEnv(t)
		setTopicConfig(t, e, e.out, "max.message.bytes", "16384")
		small, big, again := outputFitInput(e, "k", 2_000)
		e.produce(append(small, big, again))
		e.runToEnd(e.config("0, 1, 2, 3"))
		checkOutputFit(t, e, small, []*kgo.Record{big}, []*kgo.Record{again})
	})
	t.Run("lowered while running", func(t *testing.T) {
		e := newEnv(t)
		small1, big1, again1 := outputFitInput(e, "a", 1_000)
		cfg := e.config("0, 1, 2, 3")
		e.produce(small1)
		r := e.start(cfg)
		e.waitCommitted(r, 1, 60*time.Second)
		setTopicConfig(t, e, e.out, "max.message.bytes", "16384")
		small2, big2, again2 := outputFitInput(e, "b", 2_000)
		e.produce(append(append(small2, big1, again1), big2, again2))
		// The running job sized its batches at start: it stops, saying why,
		// without committing what the topic refused.
		err := r.wait(t, 30*time.Second)
		if err == nil || !strings.Contains(err.Error(), "max.message.bytes 1048588 of the output topic") || !strings.Contains(err.Error(), "the next start reads them again") {
			t.Fatalf("the running job: want a stop naming the lowered max.message.bytes, got %v", err)
		}
		t.Logf("the running job stopped: %v", strings.SplitN(err.Error(), "\n", 2)[0])
		e.runToEnd(cfg) // the next start fits the new limit
		checkOutputFit(t, e, append(small1, small2...), []*kgo.Record{big1, big2}, []*kgo.Record{again1, again2})
	})
}
