package sink

import (
	"math"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Sequences are int32 and wrap from 2^31-1 to 0 (Kafka's rule: the next
// sequence after a batch of n records starting at s is (s+n) mod 2^31).
func TestNextSequenceWraps(t *testing.T) {
	for _, c := range []struct {
		seq  int32
		n    int
		want int32
	}{
		{0, 1, 1},
		{7, 5, 12},
		{math.MaxInt32 - 1, 1, math.MaxInt32},
		{math.MaxInt32 - 4, 4, math.MaxInt32},
		{math.MaxInt32, 1, 0},
		{math.MaxInt32 - 4, 5, 0},
		{math.MaxInt32 - 2, 5, 2},
		{math.MaxInt32, 10, 9},
		{math.MaxInt32 - 1_000, 1 << 20, (1 << 20) - 1_001},
	} {
		if got := nextSequence(c.seq, c.n); got != c.want {
			t.Errorf("nextSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// The base sequence the encoder writes into each produced batch wraps from
// 2^31-1 to 0 per partition. kfake answers the produce requests here (the
// batches are decoded with kmsg, independently of our encoder) because its
// own sequence check wraps modulo 2^31-1 instead of 2^31 and would refuse
// the correct sequence after the wrap.
func TestProduceSequenceWraps(t *testing.T) {
	e := newFakeEnv(t)
	topic := e.topic(2)
	type sent struct {
		partition int32
		base      int32
		n         int32
	}
	var mu sync.Mutex
	var got []sent
	var offset int64
	e.cluster.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		e.cluster.KeepControl()
		req := r.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		resp.SetVersion(req.GetVersion())
		mu.Lock()
		defer mu.Unlock()
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(rp.Records); err != nil {
					t.Errorf("decode produced batch: %v", err)
				}
				got = append(got, sent{rp.Partition, b.FirstSequence, b.NumRecords})
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.BaseOffset = offset
				offset += int64(b.NumRecords)
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})

	p := e.producer("seqwrap")
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	p.seqs[topicPartition{topic, 0}] = math.MaxInt32 - 6
	p.seqs[topicPartition{topic, 1}] = math.MaxInt32 - 1
	for _, b := range []struct {
		partition int32
		n         int
	}{{0, 4}, {1, 5}, {0, 2}, {0, 1}, {1, 2}, {0, 3}} {
		if _, err := p.Produce(ctx, topic, b.partition, makeRecords("w", b.n)); err != nil {
			t.Fatalf("produce %d records to %d: %v", b.n, b.partition, err)
		}
	}
	want := []sent{
		{0, math.MaxInt32 - 6, 4},
		{1, math.MaxInt32 - 1, 5}, // runs over the wrap: next is 3
		{0, math.MaxInt32 - 2, 2}, // ends exactly at 2^31-1
		{0, math.MaxInt32, 1},     // the last sequence: next is 0
		{1, 3, 2},
		{0, 0, 3},
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != len(want) {
		t.Fatalf("produced batches %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("batch %d: partition %d base sequence %d records %d, want %+v", i, got[i].partition, got[i].base, got[i].n, want[i])
		}
	}
	if s0, s1 := p.seqs[topicPartition{topic, 0}], p.seqs[topicPartition{topic, 1}]; s0 != 3 || s1 != 5 {
		t.Errorf("next sequences %d, %d; want 3, 5", s0, s1)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
}
