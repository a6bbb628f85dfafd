package sink

import (
	"context"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// Benchmark workload: 100k records of 100 B values and 14 B keys, written in
// commit cycles of benchCommitEvery records. On kfake on this machine a
// cycle takes 10-25 ms for the producer and 30-55 ms for the Writer (see
// ms/cycle), so the producer commits several times as often as the job's
// default 100 ms commit interval would make it: the per-cycle transaction
// requests (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn)
// weigh more here than in the job. kfake runs in the benchmark's process,
// so B/op and allocs/op include the broker's share.
const (
	benchRecordsPerOp = 100_000
	benchValueBytes   = 100
	benchCommitEvery  = 25_000
)

// sinkCycles writes recs with p in transactions of benchCommitEvery records,
// each also committing an input offset, as the job does.
func sinkCycles(b *testing.B, p *Producer, topic, in string, recs []Record) {
	ctx := context.Background()
	for i := 0; i < len(recs); i += benchCommitEvery {
		chunk := recs[i:min(i+benchCommitEvery, len(recs))]
		if err := p.Begin(); err != nil {
			b.Fatal(err)
		}
		if _, err := p.Produce(ctx, topic, 0, chunk); err != nil {
			b.Fatal(err)
		}
		if err := p.SendOffsets(ctx, Group{ID: "bench"}, []Offset{{Topic: in, Partition: 0, Offset: int64(i + len(chunk))}}); err != nil {
			b.Fatal(err)
		}
		if err := p.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// writerCycles writes msgs with kafka-go's Writer, one WriteMessages call
// (synchronous, acks=all) per cycle of benchCommitEvery records.
func writerCycles(b *testing.B, w *kafka.Writer, msgs []kafka.Message) {
	ctx := context.Background()
	for i := 0; i < len(msgs); i += benchCommitEvery {
		if err := w.WriteMessages(ctx, msgs[i:min(i+benchCommitEvery, len(msgs))]...); err != nil {
			b.Fatal(err)
		}
	}
}

type benchSetup struct {
	p          *Producer
	w          *kafka.Writer
	recs       []Record
	msgs       []kafka.Message
	sinkTopic  string
	inTopic    string
	batchCount int
}

func newBenchSetup(b *testing.B) *benchSetup {
	e := newEnv(b)
	s := &benchSetup{
		sinkTopic: e.topic(1),
		inTopic:   e.topic(1),
		recs:      benchRecords(benchRecordsPerOp, benchValueBytes),
	}
	s.p = e.producer("bench")
	// The Writer gets the same batches: as many records per batch as the
	// producer puts into one of MaxBatchBytes.
	s.batchCount = s.p.batchLen(s.recs)
	s.msgs = make([]kafka.Message, len(s.recs))
	for i, r := range s.recs {
		s.msgs[i] = kafka.Message{Key: r.Key, Value: r.Value, Time: r.Time}
	}
	wt := &kafka.Transport{}
	b.Cleanup(wt.CloseIdleConnections)
	s.w = &kafka.Writer{
		Addr:         kafka.TCP(e.brokers...),
		Topic:        e.topic(1),
		Balancer:     &kafka.RoundRobin{},
		RequiredAcks: kafka.RequireAll,
		BatchSize:    s.batchCount,
		BatchBytes:   DefaultMaxBatchBytes + 4096,
		BatchTimeout: time.Millisecond,
		Transport:    wt,
	}
	b.Cleanup(func() { s.w.Close() })
	return s
}

// BenchmarkProduce compares the transactional producer with kafka-go's
// Writer on the same records, batches and cycles, in the same run.
// records/s is each client's own rate; ratio is sink/writer over the run.
func BenchmarkProduce(b *testing.B) {
	s := newBenchSetup(b)
	b.Logf("%d records per batch, %d records per cycle", s.batchCount, benchCommitEvery)
	var sinkTime, writerTime time.Duration
	b.Run("sink", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(benchRecordsPerOp * benchValueBytes))
		for b.Loop() {
			sinkCycles(b, s.p, s.sinkTopic, s.inTopic, s.recs)
		}
		sinkTime = b.Elapsed() / time.Duration(b.N)
		reportRates(b, sinkTime)
	})
	b.Run("writer", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(benchRecordsPerOp * benchValueBytes))
		for b.Loop() {
			writerCycles(b, s.w, s.msgs)
		}
		writerTime = b.Elapsed() / time.Duration(b.N)
		reportRates(b, writerTime)
	})
	if sinkTime > 0 && writerTime > 0 {
		b.Logf("sink/writer records/s ratio %.2f", float64(writerTime)/float64(sinkTime))
	}
}

// BenchmarkProduceRatio alternates both clients in every iteration, so
// machine noise hits both alike, and reports both rates and their ratio.
func BenchmarkProduceRatio(b *testing.B) {
	s := newBenchSetup(b)
	var sinkTime, writerTime time.Duration
	for b.Loop() {
		t := time.Now()
		sinkCycles(b, s.p, s.sinkTopic, s.inTopic, s.recs)
		sinkTime += time.Since(t)
		t = time.Now()
		writerCycles(b, s.w, s.msgs)
		writerTime += time.Since(t)
	}
	n := float64(b.N * benchRecordsPerOp)
	b.ReportMetric(n/sinkTime.Seconds(), "sink-records/s")
	b.ReportMetric(n/writerTime.Seconds(), "writer-records/s")
	b.ReportMetric(writerTime.Seconds()/sinkTime.Seconds(), "ratio")
}

func reportRates(b *testing.B, perOp time.Duration) {
	b.ReportMetric(benchRecordsPerOp/perOp.Seconds(), "records/s")
	cycles := (benchRecordsPerOp + benchCommitEvery - 1) / benchCommitEvery
	b.ReportMetric(float64(perOp.Milliseconds())/float64(cycles), "ms/cycle")
}

// BenchmarkProduceInFlight alternates, in every iteration, producers that
// differ only in how their produce requests travel: one at a time through
// the Transport (the old default), and on the producer's own connection
// with 1 and with 5 requests in flight. It reports each one's records/s and
// the ratios to the first. Against KAFKA_BROKERS behind a delay (testenv's
// netns mode) it shows what the window gains per round trip.
func BenchmarkProduceInFlight(b *testing.B) {
	e := newEnv(b)
	in := e.topic(1)
	recs := benchRecords(benchRecordsPerOp, benchValueBytes)
	arms := []struct {
		name string
		mod  func(*Config)
	}{
		{"transport-1", func(c *Config) { c.Dialer = nil }},
		{"pipe-1", func(c *Config) {}},
		{"pipe-5", func(c *Config) { c.MaxInFlight = 5 }},
	}
	prods := make([]*Producer, len(arms))
	topics := make([]string, len(arms))
	for i, a := range arms {
		prods[i] = e.producer("bench-"+a.name, a.mod)
		b.Cleanup(func() { prods[i].Close() })
		topics[i] = e.topic(1)
	}
	took := make([]time.Duration, len(arms))
	for b.Loop() {
		for i, p := range prods {
			t := time.Now()
			sinkCycles(b, p, topics[i], in, recs)
			took[i] += time.Since(t)
		}
	}
	n := float64(b.N * benchRecordsPerOp)
	for i, a := range arms {
		b.ReportMetric(n/took[i].Seconds(), a.name+"-records/s")
		if i > 0 {
			b.ReportMetric(took[0].Seconds()/took[i].Seconds(), a.name+"/"+arms[0].name)
		}
	}
}
