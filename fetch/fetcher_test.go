package fetch

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	kplain "github.com/twmb/franz-go/pkg/sasl/plain"
)

// txnTopic is a topic written by kgo with interleaved committed and aborted
// transactions of two producers and non-transactional records.
type txnTopic struct {
	topic     string
	committed []rec // what read_committed must return, by offset
	aborted   []rec
	markers   int // transactions ended (one marker each)
}

func writeTxnTopic(t *testing.T, brokers []string, opts ...kgo.Opt) txnTopic {
	t.Helper()
	for range 3 {
		tt, plain := writeTxnTopicOnce(t, brokers, opts...)
		if txnsDecided(t, plain, tt.topic) {
			return tt
		}
	}
	t.Fatal("the kgo writer left a transaction open three times")
	return txnTopic{}
}

func writeTxnTopicOnce(t *testing.T, brokers []string, opts ...kgo.Opt) (txnTopic, *kgo.Client) {
	t.Helper()
	plain := kafkatest.NewClient(t, brokers, append([]kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}, opts...)...)
	tt := txnTopic{topic: newTopic(t, plain, "txn")}
	a := newTxnProducer(t, brokers, tt.topic, tt.topic+"-a", opts...)
	b := newTxnProducer(t, brokers, tt.topic, tt.topic+"-b", opts...)
	seq := 0
	kvs := func(who string, n int) [][2]string {
		out := make([][2]string, n)
		for i := range out {
			seq++
			out[i] = [2]string{fmt.Sprintf("%s-key-%d", who, seq), fmt.Sprintf("%s-value-%d-%s", who, seq, strings.Repeat("x", seq%7))}
		}
		return out
	}
	end := func(p *txnProducer, commit bool) {
		rs := p.end(commit)
		tt.markers++
		if commit {
			tt.committed = append(tt.committed, rs...)
		} else {
			tt.aborted = append(tt.aborted, rs...)
		}
	}
	plainWrite := func(n int) {
		tt.committed = append(tt.committed, produceWith(t, plain, tt.topic, kvs("plain", n)...)...)
	}

	plainWrite(2)
	a.produce(tt.topic, kvs("a", 3)...)
	b.produce(tt.topic, kvs("b", 2)...)
	a.produce(tt.topic, kvs("a", 2)...)
	plainWrite(1)
	end(b, true)
	a.produce(tt.topic, kvs("a", 1)...)
	end(a, false) // aborted range interleaved with b's commit and plain records
	a.produce(tt.topic, kvs("a", 4)...)
	end(a, true)
	b.produce(tt.topic, kvs("b", 3)...)
	plainWrite(2)
	end(b, false)
	a.produce(tt.topic, kvs("a", 1)...)
	b.produce(tt.topic, kvs("b", 5)...)
	end(a, false)
	end(b, true)
	plainWrite(3)
	sortByOffset(tt.committed)
	return tt, plain
}

func (tt txnTopic) from(off int64) []rec {
	i, _ := slices.BinarySearchFunc(tt.committed, off, func(r rec, o int64) int { return int(r.Offset - o) })
	return tt.committed[i:]
}

// TestFetchCommittedOnly is proof (d): on a topic written by kgo's
// transactional producer, the fetcher returns exactly the committed and
// non-transactional records, and kgo's read_committed consumer agrees.
func TestFetchCommittedOnly(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	}
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			tt := writeTxnTopic(t, brokers, kgo.ProducerBatchCompression(c.codec))
			last := tt.committed[len(tt.committed)-1].Offset
			diffRecs(t, "kgo read_committed vs model", readKgo(t, brokers, tt.topic, 0, last), tt.committed)

			f := newFetcher(t, brokers, tt.topic, Options{})
			f.SetPosition(0)
			got, aborted, markers := fetchCounting(t, f, lastStable(t, kafkatest.NewClient(t, brokers), tt.topic))
			diffRecs(t, "fetcher vs model", got, tt.committed)
			if aborted != len(tt.aborted) || markers != tt.markers {
				t.Errorf("dropped %d aborted records and %d markers, want %d and %d", aborted, markers, len(tt.aborted), tt.markers)
			}

			// One record batch per fetch, so that aborted ranges span
			// fetches, from every start offset.
			for from := int64(0); from <= last+1; from += 3 {
				f := newFetcher(t, brokers, tt.topic, Options{MaxBytes: 1})
				diffRecs(t, fmt.Sprintf("fetcher (MaxBytes 1) from %d", from), readAll(t, f, from), tt.from(from))
			}
		})
	}
}

// TestReaderReturnsAborted documents the gap this package fills: kafka-go's
// Reader, even with IsolationLevel ReadCommitted, returns the records of
// aborted transactions and the transaction markers as messages.
func TestReaderReturnsAborted(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	tt := writeTxnTopic(t, brokers, kgo.ProducerBatchCompression(kgo.NoCompression()))
	end := lastStable(t, kafkatest.NewClient(t, brokers), tt.topic)

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:        brokers,
		Topic:          tt.topic,
		Partition:      0,
		IsolationLevel: kafka.ReadCommitted,
		MaxWait:        100 * time.Millisecond,
	})
	defer r.Close()
	ctx := testContext(t)
	var got []rec
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			t.Fatalf("reader after %d messages: %v", len(got), err)
		}
		got = append(got, rec{Offset: m.Offset, Key: string(m.Key), Value: string(m.Value)})
		if m.Offset >= end-1 {
			break
		}
	}
	abortedSeen, markersSeen := 0, 0
	isAborted := map[string]bool{}
	for _, a := range tt.aborted {
		isAborted[a.Value] = true
	}
	produced := map[int64]bool{}
	for _, r := range slices.Concat(tt.committed, tt.aborted) {
		produced[r.Offset] = true
	}
	for _, m := range got {
		if isAborted[m.Value] {
			abortedSeen++
		}
		if !produced[m.Offset] {
			markersSeen++ // an offset no producer wrote: a commit/abort marker
		}
	}
	t.Logf("kafka.Reader (ReadCommitted) returned %d messages for %d committed records: %d aborted records, %d transaction markers",
		len(got), len(tt.committed), abortedSeen, markersSeen)
	if abortedSeen != len(tt.aborted) {
		t.Errorf("kafka.Reader returned %d of %d aborted records; if it now filters them, revisit doc.go", abortedSeen, len(tt.aborted))
	}
	if markersSeen != tt.markers {
		t.Errorf("kafka.Reader returned %d of %d markers; if it now drops them, revisit doc.go", markersSeen, tt.markers)
	}
}

func TestFetchOutOfRange(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, cl, "oor")
	for i := range 5 {
		produceWith(t, cl, topic, [2]string{fmt.Sprint(i), fmt.Sprint(i)})
	}
	// Delete offsets 0 and 1: the log starts at 2.
	del := kmsg.NewPtrDeleteRecordsRequest()
	dt := kmsg.NewDeleteRecordsRequestTopic()
	dt.Topic = topic
	dp := kmsg.NewDeleteRecordsRequestTopicPartition()
	dp.Offset = 2
	dt.Partitions = append(dt.Partitions, dp)
	del.Topics = append(del.Topics, dt)
	del.TimeoutMillis = 5000
	res, err := del.RequestWith(testContext(t), cl)
	if err != nil || res.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("delete records: %v %+v", err, res)
	}

	t.Run("fail", func(t *testing.T) {
		f := newFetcher(t, brokers, topic, Options{})
		for _, pos := range []int64{0, 1, 6, 1000} {
			f.SetPosition(pos)
			var b Batch
			err := f.Fetch(testContext(t), &b)
			var oor *OutOfRangeError
			if !errors.As(err, &oor) {
				t.Fatalf("position %d: error %v, want *OutOfRangeError", pos, err)
			}
			want := OutOfRangeError{Topic: topic, Partition: 0, Offset: pos, Earliest: 2, Latest: 5}
			if *oor != want {
				t.Fatalf("position %d: %+v, want %+v", pos, *oor, want)
			}
			if !errors.Is(err, kafka.OffsetOutOfRange) || f.Position() != pos || len(b.Records) != 0 {
				t.Fatalf("position %d: errors.Is %v, position %d, %d records", pos, errors.Is(err, kafka.OffsetOutOfRange), f.Position(), len(b.Records))
			}
			t.Log(err)
		}
	})
	t.Run("earliest", func(t *testing.T) {
		var resets [][2]int64
		f := newFetcher(t, brokers, topic, Options{OutOfRange: OutOfRangeEarliest,
			OnReset: func(from, to int64) { resets = append(resets, [2]int64{from, to}) }})
		f.SetPosition(0)
		got := fetchUntil(t, f, 5)
		if len(got) != 3 || got[0].Offset != 2 {
			t.Fatalf("got %v, want offsets 2..4", got)
		}
		if want := [][2]int64{{0, 2}}; !slices.Equal(resets, want) {
			t.Fatalf("OnReset saw %v, want %v", resets, want)
		}
	})
	t.Run("latest", func(t *testing.T) {
		f := newFetcher(t, brokers, topic, Options{OutOfRange: OutOfRangeLatest, MaxWait: 50 * time.Millisecond})
		f.SetPosition(1000)
		var b Batch
		if err := f.Fetch(testContext(t), &b); err != nil {
			t.Fatal(err)
		}
		if len(b.Records) != 0 || f.Position() != 5 {
			t.Fatalf("%d records, position %d, want none at 5", len(b.Records), f.Position())
		}
		produceWith(t, cl, topic, [2]string{"new", "new"})
		got := fetchUntil(t, f, 6)
		if len(got) != 1 || got[0].Offset != 5 {
			t.Fatalf("got %v, want the new record at 5", got)
		}
	})
	t.Run("sentinels", func(t *testing.T) {
		f := newFetcher(t, brokers, topic, Options{MaxWait: 50 * time.Millisecond})
		f.SetPosition(OffsetEarliest)
		if got := fetchUntil(t, f, 6); len(got) != 4 || got[0].Offset != 2 {
			t.Fatalf("earliest: got %v", got)
		}
		f.SetPosition(OffsetLatest)
		var b Batch
		if err := f.Fetch(testContext(t), &b); err != nil || len(b.Records) != 0 || f.Position() != 6 {
			t.Fatalf("latest: err %v, %d records, position %d", err, len(b.Records), f.Position())
		}
		offs, err := f.ListOffsets(testContext(t))
		if err != nil || offs != (Offsets{Earliest: 2, Latest: 6, LastStable: 6}) {
			t.Fatalf("list offsets: %+v %v", offs, err)
		}
	})
}

// fetchUntil fetches until the position reaches end.
func fetchUntil(t testing.TB, f *Fetcher, end int64) []rec {
	t.Helper()
	out, _, _ := fetchCounting(t, f, end)
	return out
}

// fetchCounting fetches until the position reaches end and also returns the
// aborted records and markers the fetches dropped.
func fetchCounting(t testing.TB, f *Fetcher, end int64) (out []rec, aborted, markers int) {
	t.Helper()
	var b Batch
	ctx := testContext(t)
	for f.Position() < end || f.Position() < 0 {
		if err := f.Fetch(ctx, &b); err != nil {
			t.Fatalf("fetch at %d: %v", f.Position(), err)
		}
		out = copyBatch(out, &b)
		aborted += b.Aborted
		markers += b.Markers
	}
	return out, aborted, markers
}

// TestFetchLeaderChange moves the partition between brokers while records
// are written. The transport's own metadata refresh is disabled (one hour),
// so the fetcher must find the new leader itself.
func TestFetchLeaderChange(t *testing.T) {
	c := kfakeCluster(t, 3)
	brokers := c.ListenAddrs()
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, cl, "move")
	tr := newTransport(t)
	tr.MetadataTTL = time.Hour
	f, err := New(&kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}, topic, 0, Options{MaxWait: 50 * time.Millisecond, Backoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.SetPosition(0)
	var want, got []rec
	leaders := map[int32]bool{}
	for round := range 8 {
		for i := range 5 {
			want = append(want, produceWith(t, cl, topic, [2]string{fmt.Sprintf("k%d-%d", round, i), "v"})...)
		}
		start := time.Now()
		got = append(got, fetchUntil(t, f, int64(len(want)))...)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("round %d: catching up took %v", round, d)
		}
		leaders[f.leader] = true
		if f.leader != c.LeaderFor(topic, 0) {
			t.Fatalf("round %d: fetcher leader %d, cluster leader %d", round, f.leader, c.LeaderFor(topic, 0))
		}
		if round%2 == 0 {
			next := (c.LeaderFor(topic, 0) + 1) % 3
			if err := c.MoveTopicPartition(topic, 0, next); err != nil {
				t.Fatal(err)
			}
		} else {
			c.ShufflePartitionLeaders()
		}
	}
	diffRecs(t, "records across leader moves", got, want)
	if len(leaders) < 2 {
		t.Fatalf("fetched from leaders %v only", leaders)
	}
}

// TestFetchEmptyAfterMaxWait: at the end of the partition a fetch returns an
// empty batch after about MaxWait.
func TestFetchEmptyAfterMaxWait(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, cl, "wait")
	produceWith(t, cl, topic, [2]string{"a", "1"}, [2]string{"b", "2"})
	const wait = 300 * time.Millisecond
	f := newFetcher(t, brokers, topic, Options{MaxWait: wait})
	f.SetPosition(0)
	var b Batch
	if err := f.Fetch(testContext(t), &b); err != nil || len(b.Records) != 2 {
		t.Fatalf("first fetch: %v, %d records", err, len(b.Records))
	}
	for range 2 {
		start := time.Now()
		if err := f.Fetch(testContext(t), &b); err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		if len(b.Records) != 0 || b.NextOffset != 2 || b.HighWatermark != 2 || b.LastStableOffset != 2 {
			t.Fatalf("empty fetch: %d records, next %d, hwm %d, lso %d", len(b.Records), b.NextOffset, b.HighWatermark, b.LastStableOffset)
		}
		if d < wait-50*time.Millisecond || d > wait+2*time.Second {
			t.Fatalf("empty fetch returned after %v, MaxWait %v", d, wait)
		}
	}
}

// TestFetchOpenTransactionInvisible: records of an open transaction are not
// returned, nor is anything after them, until it commits.
func TestFetchOpenTransactionInvisible(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, cl, "open")
	p := newTxnProducer(t, brokers, topic, topic+"-p")
	pending := p.produce(topic, [2]string{"t1", "t1"})
	after := produceWith(t, cl, topic, [2]string{"plain", "plain"})
	f := newFetcher(t, brokers, topic, Options{MaxWait: 100 * time.Millisecond})
	f.SetPosition(0)
	var b Batch
	if err := f.Fetch(testContext(t), &b); err != nil || len(b.Records) != 0 || b.LastStableOffset != 0 || f.Position() != 0 {
		t.Fatalf("open txn: err %v, %d records, lso %d, position %d", err, len(b.Records), b.LastStableOffset, f.Position())
	}
	p.end(true)
	got := fetchUntil(t, f, after[0].Offset+2)
	diffRecs(t, "after commit", got, sortByOffset(slices.Concat(pending, after)))
}

// TestFetchRetries drives the retry paths with kfake's fault injection.
func TestFetchRetries(t *testing.T) {
	c := kfakeCluster(t, 1)
	brokers := c.ListenAddrs()
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, cl, "retry")
	want := produceWith(t, cl, topic, [2]string{"a", "1"}, [2]string{"b", "2"}, [2]string{"c", "3"})
	opts := Options{MaxWait: 50 * time.Millisecond, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	fetchKey := []kmsg.Key{kmsg.Fetch}

	t.Run("retriable partition errors", func(t *testing.T) {
		for _, e := range []*kerr.Error{kerr.NotLeaderForPartition, kerr.LeaderNotAvailable, kerr.UnknownTopicOrPartition, kerr.FencedLeaderEpoch, kerr.KafkaStorageError} {
			h := c.Fault(kfake.Fault{Keys: fetchKey, Topic: topic, Err: e, Count: 2})
			meta := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Observe: true, Count: -1})
			f := newFetcher(t, brokers, topic, opts)
			f.SetPosition(0)
			diffRecs(t, e.Message, fetchUntil(t, f, 3), want)
			if h.Hits() != 2 || meta.Hits() < 3 {
				t.Fatalf("%s: fault hit %d times, %d metadata requests; want 2 and a refresh per error", e.Message, h.Hits(), meta.Hits())
			}
			meta.Remove()
		}
	})
	t.Run("connection closed", func(t *testing.T) {
		n := 0
		c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
			n++
			return nil, errors.New("drop the connection"), true
		})
		f := newFetcher(t, brokers, topic, opts)
		f.SetPosition(0)
		diffRecs(t, "after a dropped connection", fetchUntil(t, f, 3), want)
		if n != 1 {
			t.Fatalf("control ran %d times", n)
		}
	})
	t.Run("non-retriable", func(t *testing.T) {
		h := c.Fault(kfake.Fault{Keys: fetchKey, Topic: topic, Err: kerr.TopicAuthorizationFailed})
		defer h.Remove()
		f := newFetcher(t, brokers, topic, opts)
		f.SetPosition(0)
		var b Batch
		err := f.Fetch(testContext(t), &b)
		if !errors.Is(err, kafka.TopicAuthorizationFailed) || h.Hits() != 1 {
			t.Fatalf("error %v after %d attempts, want TOPIC_AUTHORIZATION_FAILED at once", err, h.Hits())
		}
		t.Log(err)
	})
	t.Run("retry timeout", func(t *testing.T) {
		h := c.Fault(kfake.Fault{Keys: fetchKey, Topic: topic, Err: kerr.NotLeaderForPartition, Count: -1})
		defer h.Remove()
		o := opts
		o.RetryTimeout = 200 * time.Millisecond
		f := newFetcher(t, brokers, topic, o)
		f.SetPosition(0)
		start := time.Now()
		var b Batch
		err := f.Fetch(testContext(t), &b)
		if !errors.Is(err, kafka.NotLeaderForPartition) || time.Since(start) > 5*time.Second || h.Hits() < 3 {
			t.Fatalf("error %v after %v and %d attempts", err, time.Since(start), h.Hits())
		}
		t.Log(err)
	})
	t.Run("context canceled in flight", func(t *testing.T) {
		f := newFetcher(t, brokers, topic, Options{MaxWait: 3 * time.Second})
		f.SetPosition(3) // at the end: the broker holds the fetch
		var b Batch
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, cancel)
		start := time.Now()
		err := f.Fetch(ctx, &b)
		if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
			t.Fatalf("error %v after %v", err, time.Since(start))
		}
		if f.ex != nil {
			t.Fatal("the exchange left in flight was not abandoned")
		}
		// The abandoned exchange completes in the background; the
		// fetcher and the batch must be usable at once.
		f.SetPosition(0)
		if err := f.Fetch(testContext(t), &b); err != nil || len(b.Records) != 3 {
			t.Fatalf("after cancel: %v, %d records", err, len(b.Records))
		}
	})
	t.Run("deadline shorter than MaxWait", func(t *testing.T) {
		f := newFetcher(t, brokers, topic, Options{MaxWait: 3 * time.Second})
		f.SetPosition(3)
		var b Batch
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		if err := f.Fetch(ctx, &b); err != nil || len(b.Records) != 0 || time.Since(start) > 200*time.Millisecond {
			t.Fatalf("error %v, %d records after %v; want an empty batch before the deadline", err, len(b.Records), time.Since(start))
		}
	})
}

func TestNewValidates(t *testing.T) {
	_, err := New(&kafka.Client{}, "", -1, Options{MinBytes: -1, MaxBytes: 10, MaxWait: -time.Second, Backoff: time.Minute, MaxBackoff: time.Second, OutOfRange: 9})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"client", "topic", "partition", "fetch.min_bytes", "fetch.max_wait", "fetch.backoff", "fetch.out_of_range"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	f, err := New(&kafka.Client{Addr: kafka.TCP("127.0.0.1:1")}, "t", 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Position() != NoPosition {
		t.Fatalf("position %d before SetPosition", f.Position())
	}
	var b Batch
	if err := f.Fetch(context.Background(), &b); err == nil || !strings.Contains(err.Error(), "SetPosition") {
		t.Fatalf("fetch without position: %v", err)
	}
}

// TestFetchSASL runs the fetcher over a SASL-authenticated transport (PLAIN;
// the job's tests cover SCRAM): the raw exchanges use the connections the
// Transport authenticated.
func TestFetchSASL(t *testing.T) {
	c := kafkatest.NewCluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "admin", "secret"))
	brokers := c.ListenAddrs()
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.SASL(kplain.Auth{User: "admin", Pass: "secret"}.AsMechanism()))
	topic := newTopic(t, cl, "sasl")
	want := produceWith(t, cl, topic, [2]string{"a", "1"}, [2]string{"b", "2"})

	tr := newTransport(t)
	tr.SASL = plain.Mechanism{Username: "admin", Password: "secret"}
	f, err := New(&kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr}, topic, 0, Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.SetPosition(0)
	diffRecs(t, "over SASL", fetchUntil(t, f, 2), want)

	tr2 := newTransport(t)
	tr2.SASL = plain.Mechanism{Username: "admin", Password: "wrong"}
	f, _ = New(&kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr2}, topic, 0, Options{RetryTimeout: 300 * time.Millisecond, Backoff: 50 * time.Millisecond})
	f.SetPosition(0)
	var b Batch
	if err := f.Fetch(testContext(t), &b); err == nil {
		t.Fatal("fetch with a wrong password succeeded")
	} else if strings.Contains(err.Error(), "wrong") {
		t.Fatalf("error shows the password: %v", err)
	} else {
		t.Log(err)
	}
}

// TestOffsetForTime writes records whose timestamps go up and down: the
// answer is the first offset with a timestamp at or after the one asked,
// so every record before it is older.
func TestOffsetForTime(t *testing.T) {
	brokers := kafkatest.Brokers(t)
	cl := kafkatest.NewClient(t, brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	topic := newTopic(t, cl, "times")
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	minutes := []int{0, 10, 5, 20, 15, 30}
	for _, m := range minutes {
		r := &kgo.Record{Topic: topic, Value: []byte(fmt.Sprint(m)), Timestamp: base.Add(time.Duration(m) * time.Minute)}
		if err := cl.ProduceSync(testContext(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	f := newFetcher(t, brokers, topic, Options{})
	for _, tc := range []struct {
		minute int
		want   int64
	}{{-5, 0}, {0, 0}, {1, 1}, {10, 1}, {11, 3}, {16, 3}, {21, 5}, {30, 5}, {31, -1}} {
		got, err := f.OffsetForTime(testContext(t), base.Add(time.Duration(tc.minute)*time.Minute).UnixMilli())
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("minute %d: offset %d, want %d", tc.minute, got, tc.want)
		}
	}
	if _, err := f.OffsetForTime(testContext(t), -1); err == nil {
		t.Error("a negative timestamp was accepted")
	}
}
