package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/compress"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// mustTxn runs one transaction producing recs to topic/partition and
// commits (commit true) or aborts it.
func mustTxn(t testing.TB, p *Producer, topic string, partition int32, recs []Record, commit bool) ProduceResult {
	t.Helper()
	ctx := ctxT(t)
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	res, err := p.Produce(ctx, topic, partition, recs)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	if commit {
		err = p.Commit(ctx)
	} else {
		err = p.Abort(ctx)
	}
	if err != nil {
		t.Fatalf("end txn (commit %v): %v", commit, err)
	}
	return res
}

// (a) Committed records are visible read_committed, aborted ones are not,
// for every codec; kgo decodes what our encoder wrote.
func TestCommitVisibleAbortHidden(t *testing.T) {
	e := newEnv(t)
	for _, c := range codecs {
		t.Run(c.String(), func(t *testing.T) {
			topic := e.topic(2)
			p := e.producer("visible-"+c.String(), func(cfg *Config) { cfg.Compression = c })
			a, b, cc := makeRecords("a", 10), makeRecords("b", 10), makeRecords("c", 10)
			resA := mustTxn(t, p, topic, 1, a, true)
			mustTxn(t, p, topic, 1, b, false)
			resC := mustTxn(t, p, topic, 1, cc, true)

			got := e.drain(topic, 1, false)
			want := append(recordKeys(a), recordKeys(cc)...)
			if !slices.Equal(keys(got), want) {
				t.Fatalf("read_committed keys\n got %v\nwant %v", keys(got), want)
			}
			pid, epoch := p.ProducerID()
			for i, r := range got {
				src := a
				if i >= len(a) {
					src = cc
				}
				w := src[i%len(src)]
				if !bytes.Equal(r.Value, w.Value) || !r.Timestamp.Equal(w.Time) || len(r.Headers) != 1 ||
					r.Headers[0].Key != "src" || !bytes.Equal(r.Headers[0].Value, w.Headers[0].Value) ||
					r.ProducerID != pid || r.ProducerEpoch != epoch {
					t.Fatalf("record %d: %+v, want %+v (pid %d epoch %d)", i, r, w, pid, epoch)
				}
			}
			if got[0].Offset != resA.BaseOffset || resA.NextOffset != resA.BaseOffset+10 ||
				got[10].Offset != resC.BaseOffset || resC.NextOffset != resC.BaseOffset+10 {
				t.Fatalf("offsets: results %+v %+v, kgo saw %d and %d", resA, resC, got[0].Offset, got[10].Offset)
			}
			// The aborted records are in the log: read_uncommitted sees them.
			all := keys(e.drain(topic, 1, true))
			if !slices.Contains(all, "b-0") || len(all) != 30 {
				t.Fatalf("read_uncommitted keys %v, want the 30 records incl. aborted b-*", all)
			}
		})
	}
}

// (b) A second producer with the same transactional id fences the first:
// its produce, commit and abort then fail with ErrFenced, and its open
// transaction never becomes visible.
func TestFencing(t *testing.T) {
	e := newEnv(t)
	for _, fencedAt := range []string{"produce", "commit"} {
		t.Run(fencedAt, func(t *testing.T) {
			topic := e.topic(1)
			ctx := ctxT(t)
			id := "fence-" + fencedAt
			zombie := e.producer(id)
			mustTxn(t, zombie, topic, 0, makeRecords("before", 3), true)

			if err := zombie.Begin(); err != nil {
				t.Fatal(err)
			}
			if _, err := zombie.Produce(ctx, topic, 0, makeRecords("zombie", 3)); err != nil {
				t.Fatal(err)
			}
			owner := e.producer(id) // InitProducerID bumps the epoch

			var err error
			if fencedAt == "produce" {
				_, err = zombie.Produce(ctx, topic, 0, makeRecords("zombie2", 3))
			} else {
				err = zombie.Commit(ctx)
			}
			if !errors.Is(err, ErrFenced) || ClassOf(err) != ClassFenced {
				t.Fatalf("%s after fencing: %v (class %v), want ErrFenced", fencedAt, err, ClassOf(err))
			}
			var pe *Error
			if !errors.As(err, &pe) || (pe.Code != kafka.ProducerFenced && pe.Code != kafka.InvalidProducerEpoch) {
				t.Fatalf("want a PRODUCER_FENCED or INVALID_PRODUCER_EPOCH *Error, got %#v", err)
			}
			for name, err := range map[string]error{
				"commit": zombie.Commit(ctx),
				"abort":  zombie.Abort(ctx),
				"begin":  zombie.Begin(),
			} {
				if !errors.Is(err, ErrFenced) {
					t.Errorf("zombie %s: %v, want ErrFenced", name, err)
				}
			}

			mustTxn(t, owner, topic, 0, makeRecords("owner", 3), true)
			want := append(recordKeys(makeRecords("before", 3)), recordKeys(makeRecords("owner", 3))...)
			if got := keys(e.drain(topic, 0, false)); !slices.Equal(got, want) {
				t.Fatalf("read_committed keys %v, want %v", got, want)
			}
		})
	}
}

// (c) An identical batch resent with the same sequence (as after a lost
// response) is stored once, and the broker answers with the first offset.
func TestResentBatchStoredOnce(t *testing.T) {
	e := newEnv(t)
	topic := e.topic(1)
	ctx := ctxT(t)
	p := e.producer("resend")
	mustTxn(t, p, topic, 0, makeRecords("warmup", 2), true)

	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	tp := topicPartition{topic, 0}
	recs := makeRecords("once", 5)
	if err := p.addPartition(ctx, tp); err != nil {
		t.Fatal(err)
	}
	seq := p.seqs[tp]
	_, bound := p.batchSize(recs)
	base, err := p.produceBatch(ctx, tp, recs, bound)
	if err != nil {
		t.Fatal(err)
	}
	sent := bytes.Clone(p.buf)
	if p.seqs[tp] != seq+5 {
		t.Fatalf("sequence %d after 5 records from %d", p.seqs[tp], seq)
	}
	p.seqs[tp] = seq // the response was "lost": resend
	base2, err := p.produceBatch(ctx, tp, recs, bound)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sent, p.buf) {
		t.Fatal("resent batch differs from the first")
	}
	if base2 != base {
		t.Fatalf("resent batch got offset %d, first %d", base2, base)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	want := append(recordKeys(makeRecords("warmup", 2)), recordKeys(recs)...)
	if got := keys(e.drain(topic, 0, false)); !slices.Equal(got, want) {
		t.Fatalf("read_committed keys %v, want %v", got, want)
	}
	if got := keys(e.drain(topic, 0, true)); !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted keys %v, want %v (duplicate stored?)", got, want)
	}
}

// Sequences continue across the transactions of one epoch and restart at 0
// after Init; the broker checks them (OUT_OF_ORDER_SEQUENCE_NUMBER).
func TestSequences(t *testing.T) {
	e := newEnv(t)
	topic := e.topic(2)
	p := e.producer("seq")
	for i := range 3 {
		mustTxn(t, p, topic, 0, makeRecords(fmt.Sprint("s", i), 4), i != 1)
		mustTxn(t, p, topic, 1, makeRecords(fmt.Sprint("t", i), 2), true)
	}
	if s0, s1 := p.seqs[topicPartition{topic, 0}], p.seqs[topicPartition{topic, 1}]; s0 != 12 || s1 != 6 {
		t.Fatalf("sequences %d, %d; want 12, 6", s0, s1)
	}
	_, epoch := p.ProducerID()
	if err := p.Init(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, e2 := p.ProducerID(); e2 == epoch || len(p.seqs) != 0 {
		t.Fatalf("after Init: epoch %d (was %d), sequences %v", e2, epoch, p.seqs)
	}
	mustTxn(t, p, topic, 0, makeRecords("after", 4), true)
	got := keys(e.drain(topic, 0, false))
	if len(got) != 12 || got[8] != "after-0" {
		t.Fatalf("read_committed keys %v; %s", got, e.explainMissing(topic, 0, got))
	}
	// A gap in the sequence is refused by the broker and is ambiguous.
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctxT(t), topic, 0, makeRecords("x", 1)); err != nil {
		t.Fatal(err)
	}
	p.seqs[topicPartition{topic, 0}] += 3
	_, err := p.Produce(ctxT(t), topic, 0, makeRecords("gap", 1))
	var amb *AmbiguousError
	if !errors.As(err, &amb) || amb.Err.Code != kafka.OutOfOrderSequenceNumber {
		t.Fatalf("produce after a sequence gap: %v, want ambiguous OUT_OF_ORDER_SEQUENCE_NUMBER", err)
	}
	if err := p.Commit(ctxT(t)); !errors.Is(err, ErrState) {
		t.Fatalf("commit after an ambiguous error: %v, want ErrState", err)
	}
	if err := p.Abort(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	mustTxn(t, p, topic, 0, makeRecords("recovered", 1), true)
	if got := keys(e.drain(topic, 0, false)); got[len(got)-1] != "recovered-0" || slices.Contains(got, "x-0") {
		t.Fatalf("keys after recovery %v", got)
	}
}

// Large calls are split into batches of at most MaxBatchBytes.
func TestProduceSplitsBatches(t *testing.T) {
	e := newEnv(t)
	topic := e.topic(1)
	p := e.producer("split", func(c *Config) { c.MaxBatchBytes = 4096 })
	recs := benchRecords(200, 100)
	res := mustTxn(t, p, topic, 0, recs, true)
	if res.Batches < 6 || res.NextOffset-res.BaseOffset != 200 {
		t.Fatalf("result %+v", res)
	}
	got := e.drain(topic, 0, false)
	if !slices.Equal(keys(got), recordKeys(recs)) {
		t.Fatalf("got %d records", len(got))
	}
	if got[0].Offset != res.BaseOffset || got[199].Offset+1 != res.NextOffset {
		t.Fatalf("offsets %d..%d, result %+v", got[0].Offset, got[199].Offset, res)
	}
}

// (f) TxnOffsetCommit offsets become the group's committed offsets with the
// commit, not before, and not after an abort.
func TestTxnOffsetCommit(t *testing.T) {
	e := newEnv(t)
	out, in := e.topic(1), e.topic(2)
	ctx := ctxT(t)
	p := e.producer("offsets")
	g := Group{ID: "offsets-static"}

	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, out, 0, makeRecords("o", 2)); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsets(ctx, g, []Offset{{in, 0, 42, "m"}, {in, 1, 7, ""}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.fetchOffsets(g.ID, in, 0, 1); !slices.Equal(got, []int64{42, 7}) {
		t.Fatalf("committed offsets %v, want [42 7]", got)
	}

	// Aborted: offsets stay.
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsets(ctx, g, []Offset{{in, 0, 99, ""}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.fetchOffsets(g.ID, in, 0, 1); !slices.Equal(got, []int64{42, 7}) {
		t.Fatalf("offsets after abort %v, want [42 7]", got)
	}

	// Offsets alone, no records.
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendOffsets(ctx, g, []Offset{{in, 1, 8, ""}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.fetchOffsets(g.ID, in, 0, 1); !slices.Equal(got, []int64{42, 8}) {
		t.Fatalf("offsets after offsets-only commit %v, want [42 8]", got)
	}
}

// (f, group mode) The generation and member id of a consumer group member go
// with TxnOffsetCommit; a stale member is fenced.
func TestTxnOffsetCommitGroupGeneration(t *testing.T) {
	e := newEnv(t)
	in := e.topic(1)
	ctx := ctxT(t)
	group := "offsets-member"
	member := kafkatest.NewClient(t, e.brokers, kgo.ConsumerGroup(group), kgo.ConsumeTopics(in), kgo.DisableAutoCommit(),
		kgo.FetchMaxWait(50*time.Millisecond))
	var memberID string
	var gen int32
	for memberID == "" {
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		member.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			t.Fatal("consumer did not join the group")
		}
		if id, g := member.GroupMetadata(); g >= 0 {
			memberID, gen = id, g
		}
	}
	p := e.producer("offsets-member")
	commit := func(g Group, off int64) error {
		if err := p.Begin(); err != nil {
			return err
		}
		if err := p.SendOffsets(ctx, g, []Offset{{Topic: in, Partition: 0, Offset: off}}); err != nil {
			p.Abort(ctx) // ErrFenced again when fenced
			return err
		}
		return p.Commit(ctx)
	}
	if err := commit(Group{ID: group, MemberID: memberID, GenerationID: gen}, 5); err != nil {
		t.Fatal(err)
	}
	if got := e.fetchOffsets(group, in, 0); got[0] != 5 {
		t.Fatalf("offset %d, want 5", got[0])
	}
	for _, g := range []Group{
		{ID: group, MemberID: memberID, GenerationID: gen + 1},
		{ID: group, MemberID: "someone-else", GenerationID: gen},
	} {
		err := commit(g, 6)
		if !errors.Is(err, ErrFenced) {
			t.Fatalf("commit as %+v: %v, want ErrFenced", g, err)
		}
		p = e.producer("offsets-member") // a fenced stage restarts with a new producer
	}
	if got := e.fetchOffsets(group, in, 0); got[0] != 5 {
		t.Fatalf("offset %d after rejected commits, want 5", got[0])
	}
}

// Several producers (stages) run concurrently on one shared transport.
func TestConcurrentProducersSharedTransport(t *testing.T) {
	e := newEnv(t)
	const stages, txns, n = 4, 6, 50
	topic := e.topic(stages)
	var wg sync.WaitGroup
	for s := range int32(stages) {
		p := e.producer(fmt.Sprintf("stage-%d", s))
		wg.Go(func() {
			ctx := ctxT(t)
			for i := range txns {
				if err := p.Begin(); err != nil {
					t.Error(err)
					return
				}
				if _, err := p.Produce(ctx, topic, s, makeRecords(fmt.Sprintf("s%d-t%d", s, i), n)); err != nil {
					t.Error(err)
					return
				}
				if err := p.SendOffsets(ctx, Group{ID: "shared"}, []Offset{{topic, s, int64(i), ""}}); err != nil {
					t.Error(err)
					return
				}
				end := p.Commit
				if i%3 == 2 {
					end = p.Abort
				}
				if err := end(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for s := range int32(stages) {
		var want []string
		for i := range txns {
			if i%3 != 2 {
				want = append(want, recordKeys(makeRecords(fmt.Sprintf("s%d-t%d", s, i), n))...)
			}
		}
		if got := keys(e.drain(topic, s, false)); !slices.Equal(got, want) {
			t.Errorf("partition %d: %d records, want %d; %s", s, len(got), len(want), e.explainMissing(topic, s, got))
		}
	}
	if got := e.fetchOffsets("shared", topic, 0, 1, 2, 3); !slices.Equal(got, []int64{4, 4, 4, 4}) {
		t.Errorf("offsets %v, want 4 each (txn 5 aborted)", got)
	}
}

// The coordinators are looked up once, not before every request.
func TestCoordinatorCached(t *testing.T) {
	e := newFakeEnv(t)
	topic := e.topic(1)
	h := e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.FindCoordinator}, Observe: true, Count: -1})
	defer h.Remove()
	p := e.producer("cached")
	for i := range 5 {
		if err := p.Begin(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Produce(ctxT(t), topic, 0, makeRecords(fmt.Sprint(i), 3)); err != nil {
			t.Fatal(err)
		}
		if err := p.SendOffsets(ctxT(t), Group{ID: "cached"}, []Offset{{topic, 0, int64(i), ""}}); err != nil {
			t.Fatal(err)
		}
		if err := p.Commit(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.Hits(); n != 2 {
		t.Fatalf("%d FindCoordinator requests for 5 transactions, want 2 (transaction + group)", n)
	}
}

// Leader and coordinator moves: NOT_LEADER_FOR_PARTITION refreshes the
// leader from metadata, NOT_COORDINATOR looks the coordinator up again.
func TestLeaderAndCoordinatorMove(t *testing.T) {
	e := newFakeEnv(t, kfake.Ports(0, 0, 0)) // kafkatest's Ports(0) would override NumBrokers
	topic := e.topic(1)
	p := e.producer("moving")
	var want []string
	for i := range 6 {
		recs := makeRecords(fmt.Sprint("m", i), 5)
		want = append(want, recordKeys(recs)...)
		mustTxn(t, p, topic, 0, recs, true)
		if i%2 == 0 {
			leader := e.cluster.LeaderFor(topic, 0)
			if err := e.cluster.MoveTopicPartition(topic, 0, (leader+1)%3); err != nil {
				t.Fatal(err)
			}
		} else {
			e.cluster.RehashCoordinators()
		}
	}
	if got := keys(e.drain(topic, 0, false)); !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
}

func TestStateErrors(t *testing.T) {
	e := newEnv(t)
	topic := e.topic(1)
	ctx := ctxT(t)
	p, err := NewProducer(e.config("state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Begin(); !errors.Is(err, ErrState) {
		t.Errorf("begin before init: %v", err)
	}
	if err := p.Abort(ctx); err != nil {
		t.Errorf("abort with nothing open: %v", err)
	}
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, topic, 0, makeRecords("x", 1)); !errors.Is(err, ErrState) {
		t.Errorf("produce without begin: %v", err)
	}
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if err := p.Begin(); !errors.Is(err, ErrState) {
		t.Errorf("begin twice: %v", err)
	}
	if err := p.Commit(ctx); err != nil {
		t.Errorf("commit of an empty transaction: %v", err)
	}
	// A fatal produce error (unknown topic is retriable: use an oversize
	// record) leaves the transaction abort-only.
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, topic, 0, makeRecords("ok", 1)); err != nil {
		t.Fatal(err)
	}
	huge := []Record{{Value: make([]byte, 2<<20)}}
	_, err = p.Produce(ctx, topic, 0, huge)
	if ClassOf(err) != ClassFatal || !strings.Contains(err.Error(), "produce") {
		t.Fatalf("oversize record: %v (class %v), want fatal", err, ClassOf(err))
	}
	if err := p.Commit(ctx); !errors.Is(err, ErrState) {
		t.Fatalf("commit after a failed produce: %v, want ErrState", err)
	}
	if err := p.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	mustTxn(t, p, topic, 0, makeRecords("after", 1), true)
	if got := keys(e.drain(topic, 0, false)); !slices.Equal(got, []string{"after-0"}) {
		t.Fatalf("keys %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	_, err := NewProducer(Config{Client: &kafka.Client{}, MaxBatchBytes: 10, Compression: 9, RetryBackoff: time.Second, MaxRetryBackoff: time.Millisecond})
	if err == nil {
		t.Fatal("invalid config accepted")
	}
	for _, field := range []string{"Client.Addr", "TransactionalID", "MaxBatchBytes", "Compression", "MaxRetryBackoff"} {
		if !strings.Contains(err.Error(), "sink: "+field+":") {
			t.Errorf("no problem reported for %s in:\n%v", field, err)
		}
	}
	var c Config
	c.ApplyDefaults()
	if c.TransactionTimeout != DefaultTransactionTimeout || c.MaxBatchBytes != DefaultMaxBatchBytes || c.Compression != compress.None {
		t.Errorf("defaults %+v", c)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code kafka.Error
		want Class
	}{
		{kafka.ConcurrentTransactions, ClassRetriable},
		{kafka.NotCoordinatorForGroup, ClassRetriable},
		{kafka.GroupLoadInProgress, ClassRetriable},
		{kafka.NotLeaderForPartition, ClassRetriable},
		{kafka.ProducerFenced, ClassFenced},
		{kafka.InvalidProducerEpoch, ClassFenced},
		{kafka.TransactionalIDAuthorizationFailed, ClassFenced},
		{kafka.IllegalGeneration, ClassFenced},
		{kafka.OutOfOrderSequenceNumber, ClassAmbiguous},
		{kafka.InvalidProducerIDMapping, ClassAmbiguous},
		{kafka.MessageSizeTooLarge, ClassFatal},
		{kafka.TopicAuthorizationFailed, ClassFatal},
	} {
		if got := classifyCode(tc.code); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.code, got, tc.want)
		}
	}
	fenced := fmt.Errorf("stage 3: %w", &Error{Op: "produce", Class: ClassFenced, Err: kafka.ProducerFenced})
	if !errors.Is(fenced, ErrFenced) || ClassOf(fenced) != ClassFenced {
		t.Error("wrapped fenced error not recognised")
	}
	amb := fmt.Errorf("x: %w", &AmbiguousError{Err: &Error{Op: "end txn", Class: ClassAmbiguous, Err: context.DeadlineExceeded}})
	if errors.Is(amb, ErrFenced) || ClassOf(amb) != ClassAmbiguous || !errors.Is(amb, context.DeadlineExceeded) {
		t.Error("ambiguous error misclassified")
	}
	if !notSent(fmt.Errorf("x: %w", kafka.BrokerNotAvailable)) || !notSent(&net.OpError{Op: "dial", Err: errors.New("refused")}) ||
		notSent(&net.OpError{Op: "read", Err: errors.New("reset")}) || notSent(context.DeadlineExceeded) {
		t.Error("notSent misjudges transport errors")
	}
	if ClassOf(errors.New("other")) != ClassFatal || ClassOf(fmt.Errorf("%w", ErrState)) != ClassFatal {
		t.Error("other errors should be fatal")
	}
}

// After an ambiguous error, Init (and Abort) re-initialise with the held
// producer id and epoch (KIP-360), so a replaced producer is told it is
// fenced instead of taking the transactional id back; a fresh Init sends
// -1/-1 and takes over.
func TestRecoveryReinitSendsProducerID(t *testing.T) {
	e := newFakeEnv(t)
	topic := e.topic(1)
	ctx := ctxT(t)
	sent := observeInitProducerID(e, "reinit")
	p := e.producer("reinit")
	pid, epoch := p.ProducerID()
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, topic, 0, makeRecords("x", 1)); err != nil {
		t.Fatal(err)
	}
	p.seqs[topicPartition{topic, 0}] += 7 // the broker will disagree
	if _, err := p.Produce(ctx, topic, 0, makeRecords("y", 1)); ClassOf(err) != ClassAmbiguous {
		t.Fatalf("produce after a sequence gap: %v, want ambiguous", err)
	}
	if err := p.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if pid2, epoch2 := p.ProducerID(); pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("after recovery: producer %d/%d, want %d/%d", pid2, epoch2, pid, epoch+1)
	}
	mustTxn(t, p, topic, 0, makeRecords("z", 1), true)
	if err := p.Init(ctx); err != nil { // a fresh Init takes over
		t.Fatal(err)
	}
	want := [][2]int64{{-1, -1}, {pid, int64(epoch)}, {-1, -1}}
	if got := sent(); !slices.Equal(got, want) {
		t.Fatalf("InitProducerID requests %v, want %v", got, want)
	}
	if got := keys(e.drain(topic, 0, false)); !slices.Equal(got, []string{"z-0"}) {
		t.Fatalf("keys %v", got)
	}
}

// Resume, unlike Init, never takes the transactional id over once the
// producer holds one: it re-initialises with its own producer id and epoch
// (before the first Init it sends -1/-1), and a fenced producer is not
// re-initialised at all.
func TestResumeKeepsOwnership(t *testing.T) {
	e := newFakeEnv(t)
	topic := e.topic(1)
	ctx := ctxT(t)
	sent := observeInitProducerID(e, "resume")
	p, err := NewProducer(e.config("resume"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx); err != nil { // first: like Init
		t.Fatal(err)
	}
	pid, epoch := p.ProducerID()
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, topic, 0, makeRecords("open", 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(ctx); err != nil { // aborts the open transaction
		t.Fatal(err)
	}
	if pid2, epoch2 := p.ProducerID(); pid2 != pid || epoch2 != epoch+1 {
		t.Fatalf("after Resume: producer %d/%d, want %d/%d", pid2, epoch2, pid, epoch+1)
	}
	mustTxn(t, p, topic, 0, makeRecords("after", 1), true)

	// A successor takes the id over; the old producer finds out when it
	// next writes, and Resume then reports the fencing instead of asking.
	e.producer("resume") // Init: -1/-1, bumps the epoch
	if err := p.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Produce(ctx, topic, 0, makeRecords("zombie", 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("zombie produce: %v, want ErrFenced", err)
	}
	before := len(sent())
	if err := p.Resume(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("Resume of a fenced producer: %v, want ErrFenced", err)
	}
	if got := sent(); len(got) != before {
		t.Fatalf("Resume of a fenced producer sent InitProducerID %v", got[before:])
	}
	want := [][2]int64{{-1, -1}, {pid, int64(epoch)}, {-1, -1}}
	if got := sent(); !slices.Equal(got, want) {
		t.Fatalf("InitProducerID requests %v, want %v", got, want)
	}
	if got := keys(e.drain(topic, 0, false)); !slices.Equal(got, []string{"after-0"}) {
		t.Fatalf("committed keys %v, want only after-0", got)
	}
}

// observeInitProducerID records the producer id and epoch of every
// InitProducerID request for txnID; the returned function reads them.
func observeInitProducerID(e *env, txnID string) func() [][2]int64 {
	var mu sync.Mutex
	var sent [][2]int64
	e.cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, TxnID: txnID, Observe: true, Count: -1,
		When: func(r kmsg.Request) bool {
			req := r.(*kmsg.InitProducerIDRequest)
			mu.Lock()
			sent = append(sent, [2]int64{req.ProducerID, int64(req.ProducerEpoch)})
			mu.Unlock()
			return true
		}})
	return func() [][2]int64 {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
}
