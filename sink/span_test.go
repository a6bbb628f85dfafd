package sink

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSpanShowsForeignRecords: Span says where a transaction's records
// landed and where another producer's records lie between two of its
// batches, one request at a time and with several in flight. The offsets
// are checked against an independent read_uncommitted reader.
func TestSpanShowsForeignRecords(t *testing.T) {
	for _, inFlight := range []int{1, 5} {
		t.Run(fmt.Sprintf("inflight=%d", inFlight), func(t *testing.T) {
			e := newEnv(t)
			topic := e.topic(2)
			ctx := ctxT(t)
			p := e.producer("span", func(c *Config) { c.MaxInFlight = inFlight })
			mustTxn(t, p, topic, 0, makeRecords("warmup", 2), true)
			other := kafkatest.NewClient(t, e.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))

			if err := p.Begin(); err != nil {
				t.Fatal(err)
			}
			produce := func(prefix string, n int) {
				t.Helper()
				if _, err := p.Produce(ctx, topic, 0, makeRecords(prefix, n)); err != nil {
					t.Fatal(err)
				}
				if err := p.Flush(ctx); err != nil {
					t.Fatal(err)
				}
			}
			produce("a", 3)
			produce("b", 2) // right after a: no gap
			if s, _ := p.Span(topic, 0); s.ForeignFrom != -1 {
				t.Fatalf("span %+v has a gap before any foreign record", s)
			}
			foreign := []*kgo.Record{{Topic: topic, Partition: 0, Key: []byte("x1")}, {Topic: topic, Partition: 0, Key: []byte("x2")}}
			if err := other.ProduceSync(ctx, foreign...).FirstErr(); err != nil {
				t.Fatal(err)
			}
			produce("c", 4)
			s, ok := p.Span(topic, 0)
			if !ok {
				t.Fatal("no span for a partition written")
			}
			if _, ok := p.Span(topic, 1); ok {
				t.Fatal("a span for a partition not written")
			}
			if err := p.Commit(ctx); err != nil {
				t.Fatal(err)
			}

			var ours []int64
			for _, r := range e.drain(topic, 0, true) {
				if k := string(r.Key); strings.HasPrefix(k, "a") || strings.HasPrefix(k, "b") || strings.HasPrefix(k, "c") {
					ours = append(ours, r.Offset)
				}
			}
			if len(ours) != 9 {
				t.Fatalf("read %d of the transaction's records, want 9", len(ours))
			}
			want := Span{First: ours[0], Next: ours[8] + 1, Exact: true, ForeignFrom: foreign[0].Offset, ForeignTo: foreign[1].Offset + 1}
			if s != want {
				t.Fatalf("span %+v, want %+v (foreign records at %d and %d)", s, want, foreign[0].Offset, foreign[1].Offset)
			}
		})
	}
}
