package fetch

import (
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestHeads: Heads reports every batch in the range, read_uncommitted,
// with its producer id and whether it is a transaction marker: plain
// records, an open transaction's records, a committed one's records and its
// marker. Offsets and producer ids are those kgo's acknowledgements give.
func TestHeads(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	ctx := testContext(t)
	plain := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, plain, "heads")
	txn := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(topic+"-txn"))

	a := &kgo.Record{Topic: topic, Key: []byte("a")}
	if err := plain.ProduceSync(ctx, a).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	b := &kgo.Record{Topic: topic, Key: []byte("b")}
	if err := txn.ProduceSync(ctx, b).FirstErr(); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, brokers, topic, Options{})
	open, err := f.Heads(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	// Brokers write the marker after EndTxn returns: the last stable
	// offset passes b once it is there.
	for {
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if offs.LastStable > b.Offset+1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := &kgo.Record{Topic: topic, Key: []byte("c")}
	if err := plain.ProduceSync(ctx, c).FirstErr(); err != nil {
		t.Fatal(err)
	}
	all, err := f.Heads(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}

	head := func(r *kgo.Record) BatchHead {
		return BatchHead{BaseOffset: r.Offset, LastOffset: r.Offset, ProducerID: r.ProducerID}
	}
	marker := BatchHead{BaseOffset: b.Offset + 1, LastOffset: b.Offset + 1, ProducerID: b.ProducerID, Control: true}
	if c.Offset != marker.BaseOffset+1 {
		t.Fatalf("offsets a %d, b %d, c %d: want the marker alone between b and c", a.Offset, b.Offset, c.Offset)
	}
	check := func(name string, got, want []BatchHead) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %+v, want %+v", name, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: batch %d %+v, want %+v", name, i, got[i], want[i])
			}
		}
	}
	check("transaction open", open, []BatchHead{head(a), head(b)})
	check("all", all, []BatchHead{head(a), head(b), marker, head(c)})
	part, err := f.Heads(ctx, marker.BaseOffset, c.Offset)
	if err != nil {
		t.Fatal(err)
	}
	check("the marker alone", part, []BatchHead{marker})
	if f.Position() != NoPosition {
		t.Fatalf("Heads moved the fetch position to %d", f.Position())
	}
}
