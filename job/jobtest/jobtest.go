// Package jobtest generates raw input with the real kinds of duplicates and
// checks what a dedupstream job made of it, reading the output with an
// independent client (franz-go's kgo) with isolation level read_committed.
// The job's tests, the CLI's crash tests and "dedupstream demo" share it.
package jobtest

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/dedupstream/dedupstream/job"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Spec describes a workload. Business keys are "o-<i>", carried both as the
// Kafka key and as the JSON member order_id; records are routed with
// murmur2, as Java producers do.
type Spec struct {
	Topic      string
	Partitions int
	// Keys is the number of distinct business keys (first occurrences).
	Keys int
	// Replay is how many of the earliest first records are produced again,
	// byte for byte, after all others: an upstream backlog replay.
	Replay int
	// ReplayTopic, when set, receives the replayed records instead of
	// Topic: a second raw topic carrying a backlog of the first.
	ReplayTopic string
	// Seed makes the workload reproducible.
	Seed uint64
}

// Workload is raw input in produce order and what a correct job makes of it.
type Workload struct {
	Spec    Spec
	Records []*kgo.Record
	// First maps each business key to the value of its first record: the
	// one the output must hold.
	First map[string][]byte
	// Poison counts records that must land in the DLQ.
	Poison int
	// Resends and Redeliveries count the duplicates of those kinds.
	Resends, Redeliveries int
	// Unordered is set by a test that moves records of one key to
	// different partitions or topics: "first" is then not defined across
	// them, and Check accepts any of the key's records as the one emitted.
	Unordered bool
}

// values maps each business key to every value produced for it.
func (w *Workload) values() map[string][][]byte {
	vs := map[string][][]byte{}
	for _, r := range w.Records {
		var v struct {
			OrderID string `json:"order_id"`
		}
		if json.Unmarshal(r.Value, &v) == nil && v.OrderID != "" {
			vs[v.OrderID] = append(vs[v.OrderID], r.Value)
		}
	}
	return vs
}

// PoisonNotJSON is the value of the poison records that are not JSON; the
// others are JSON without order_id.
const PoisonNotJSON = "not json {"

func orderValue(id string, msg, amount int) []byte {
	return fmt.Appendf(nil, `{"order_id":%q,"msg_id":"m-%d","amount":%d}`, id, msg, amount)
}

// New makes a workload. After each first record, with probability 1/5 a
// producer resend follows within a few dozen records (same order, new
// message id, so new bytes), and with probability 1/10 an identical
// redelivery; every 150th key slot also gets a poison record (not JSON, or
// JSON without order_id). Then Spec.Replay early records are replayed.
func New(spec Spec) *Workload {
	rng := rand.New(rand.NewPCG(spec.Seed, 7))
	w := &Workload{Spec: spec, First: make(map[string][]byte, spec.Keys)}
	type ev struct {
		pos int
		rec *kgo.Record
	}
	evs := make([]ev, 0, spec.Keys*14/10)
	add := func(pos int, key string, value []byte) *kgo.Record {
		r := &kgo.Record{Topic: spec.Topic, Key: []byte(key), Value: value,
			Partition: int32(partition.Murmur2Partition([]byte(key), spec.Partitions))}
		evs = append(evs, ev{pos, r})
		return r
	}
	var firsts []*kgo.Record
	msg := 0
	for i := range spec.Keys {
		id := "o-" + strconv.Itoa(i)
		msg++
		v := orderValue(id, msg, i)
		w.First[id] = v
		firsts = append(firsts, add(i*10, id, v))
		if rng.IntN(5) == 0 {
			msg++
			w.Resends++
			add(i*10+1+rng.IntN(60), id, orderValue(id, msg, i))
		}
		if rng.IntN(10) == 0 {
			w.Redeliveries++
			add(i*10+1+rng.IntN(60), id, v)
		}
		if i%150 == 0 {
			w.Poison++
			value := []byte(`{"msg_id":"no order"}`)
			if i%300 == 0 {
				value = []byte(PoisonNotJSON)
			}
			add(i*10+5, "bad-"+strconv.Itoa(i), value)
		}
	}
	slices.SortStableFunc(evs, func(a, b ev) int { return a.pos - b.pos })
	w.Records = make([]*kgo.Record, 0, len(evs)+spec.Replay)
	for _, e := range evs {
		w.Records = append(w.Records, e.rec)
	}
	replayTopic := cmp.Or(spec.ReplayTopic, spec.Topic)
	for _, r := range firsts[:min(spec.Replay, len(firsts))] {
		w.Records = append(w.Records, &kgo.Record{Topic: replayTopic, Key: r.Key, Value: r.Value, Partition: r.Partition})
	}
	return w
}

// Dropped is the number of records a correct job drops as duplicates.
func (w *Workload) Dropped() int { return len(w.Records) - len(w.First) - w.Poison }

// Report is the outcome of Check.
type Report struct {
	In, Out, DLQ int
	// Escaped counts output records whose business key was already in the
	// output (G1); Lost counts keys missing from it (G2).
	Escaped, Lost int
	// Problems describes every violation, capped at a few per kind.
	Problems []string
}

// OK reports whether the guarantees held.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

func (r *Report) addf(format string, args ...any) {
	if len(r.Problems) < 50 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Verify reads the output (partitions partitions) and the DLQ (one
// partition) read_committed with kgo and checks them with Check. The
// reader's client gets opts too (TLS and SASL of secured brokers).
func (w *Workload) Verify(ctx context.Context, brokers []string, outTopic, dlqTopic string, partitions int, opts ...kgo.Opt) (Report, error) {
	out, err := ReadCommitted(ctx, brokers, outTopic, partitions, opts...)
	if err != nil {
		return Report{}, err
	}
	dlq, err := ReadCommitted(ctx, brokers, dlqTopic, 1, opts...)
	if err != nil {
		return Report{}, err
	}
	return w.Check(out, dlq), nil
}

// Check verifies G1 (no key twice in out), G2 (every key present, with the
// bytes of its first record, on its input partition) and the DLQ (every
// poison record, with reason and source headers).
func (w *Workload) Check(out, dlq []*kgo.Record) Report {
	rep := Report{In: len(w.Records), Out: len(out), DLQ: len(dlq)}
	count := make(map[string]int, len(out))
	var values map[string][][]byte
	if w.Unordered {
		values = w.values()
	}
	for _, r := range out {
		var v struct {
			OrderID string `json:"order_id"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.OrderID == "" {
			rep.addf("output record %s/%d@%d is not an order: %q", r.Topic, r.Partition, r.Offset, r.Value)
			continue
		}
		count[v.OrderID]++
		if count[v.OrderID] > 1 {
			rep.Escaped++
			rep.addf("G1: key %s appears %d times in the output", v.OrderID, count[v.OrderID])
		}
		if want, ok := w.First[v.OrderID]; !ok {
			rep.addf("output holds key %s that was never produced", v.OrderID)
		} else if w.Unordered {
			if !slices.ContainsFunc(values[v.OrderID], func(b []byte) bool { return string(b) == string(r.Value) }) {
				rep.addf("G2: key %s: output holds %s, which was never produced for it", v.OrderID, r.Value)
			}
		} else if string(r.Value) != string(want) {
			rep.addf("G2: key %s: output holds %s, want its first record %s", v.OrderID, r.Value, want)
		}
		if p := partition.Murmur2Partition(r.Key, w.Spec.Partitions); int(r.Partition) != p {
			rep.addf("key %s is on output partition %d, want %d", v.OrderID, r.Partition, p)
		}
	}
	for k := range w.First {
		if count[k] == 0 {
			rep.Lost++
			rep.addf("G2: key %s is missing from the output", k)
		}
	}
	if len(dlq) != w.Poison {
		rep.addf("DLQ holds %d records, want the %d poison records", len(dlq), w.Poison)
	}
	for _, r := range dlq {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		want := "field_missing"
		if string(r.Value) == PoisonNotJSON {
			want = "not_json"
		}
		p := strconv.Itoa(partition.Murmur2Partition(r.Key, w.Spec.Partitions))
		if h[job.HeaderReason] != want || h[job.HeaderSourceTopic] != w.Spec.Topic || h[job.HeaderSourcePartition] != p {
			rep.addf("DLQ record %q: reason=%q topic=%q partition=%q, want %q %q %s",
				r.Key, h[job.HeaderReason], h[job.HeaderSourceTopic], h[job.HeaderSourcePartition], want, w.Spec.Topic, p)
		}
		if n, err := strconv.ParseInt(h[job.HeaderSourceOffset], 10, 64); err != nil || n < 0 {
			rep.addf("DLQ record %q: bad source offset header %q", r.Key, h[job.HeaderSourceOffset])
		}
	}
	return rep
}

// CheckAccounting compares the job's counters with the reader's view:
// in = out + dropped + dlq, and each term as the workload predicts.
func (w *Workload) CheckAccounting(st job.Stats, out, dlq int) []string {
	var problems []string
	dropped := st.DroppedBatch + st.DroppedHistory
	if st.In != st.Emitted+dropped+st.DeadLettered {
		problems = append(problems, fmt.Sprintf("job counters: in %d != out %d + dropped %d + dlq %d", st.In, st.Emitted, dropped, st.DeadLettered))
	}
	if st.In != uint64(len(w.Records)) || st.Emitted != uint64(out) || st.DeadLettered != uint64(dlq) || dropped != uint64(w.Dropped()) {
		problems = append(problems, fmt.Sprintf("job counted in=%d out=%d dropped=%d dlq=%d; want in=%d, out=%d and dlq=%d as read back, dropped=%d",
			st.In, st.Emitted, dropped, st.DeadLettered, len(w.Records), out, dlq, w.Dropped()))
	}
	return problems
}

// ReadCommitted reads topic with isolation level read_committed from the
// start up to a sentinel record it appends to every partition first (once a
// sentinel is visible, every transaction before it is decided). Sentinels
// are left out. Call it when no job writes to topic any more. The clients
// get opts too.
func ReadCommitted(ctx context.Context, brokers []string, topic string, partitions int, opts ...kgo.Opt) ([]*kgo.Record, error) {
	const sentinel = "dedupstream.jobtest.sentinel"
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var sents []*kgo.Record
	for p := range int32(partitions) {
		sents = append(sents, &kgo.Record{Topic: topic, Partition: p, Key: []byte(sentinel)})
	}
	if err := cl.ProduceSync(ctx, sents...).FirstErr(); err != nil {
		return nil, fmt.Errorf("produce sentinels to %s: %w", topic, err)
	}
	rd, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out []*kgo.Record
	seen := map[int32]bool{}
	for len(seen) < partitions {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %d records, sentinels of %d of %d partitions: %w", topic, len(out), len(seen), partitions, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if string(r.Key) == sentinel {
				seen[r.Partition] = true
				return
			}
			out = append(out, r)
		})
	}
	return out, nil
}

// Producer writes raw input with kgo, keeping each record's partition,
// and remembers the end offset of every partition it wrote to.
type Producer struct {
	cl  *kgo.Client
	End map[string]map[int32]int64 // topic -> partition -> one past the last produced offset
}

// NewProducer returns a Producer; Close it. Its client gets opts too.
func NewProducer(brokers []string, opts ...kgo.Opt) (*Producer, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		return nil, err
	}
	return &Producer{cl: cl, End: map[string]map[int32]int64{}}, nil
}

// Close closes the client.
func (p *Producer) Close() { p.cl.Close() }

// Produce writes recs and waits for every acknowledgement.
func (p *Producer) Produce(ctx context.Context, recs []*kgo.Record) error {
	if err := p.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce input: %w", err)
	}
	for _, r := range recs {
		if p.End[r.Topic] == nil {
			p.End[r.Topic] = map[int32]int64{}
		}
		p.End[r.Topic][r.Partition] = max(p.End[r.Topic][r.Partition], r.Offset+1)
	}
	return nil
}

// Committed returns the committed offsets of group on topic's partitions
// (those never committed are left out).
func (p *Producer) Committed(ctx context.Context, group, topic string, partitions int) (map[int32]int64, error) {
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = group
	rt := kmsg.NewOffsetFetchRequestTopic()
	rt.Topic = topic
	for i := range int32(partitions) {
		rt.Partitions = append(rt.Partitions, i)
	}
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	for _, t := range res.Topics {
		for _, tp := range t.Partitions {
			if tp.ErrorCode == 0 && tp.Offset >= 0 {
				out[tp.Partition] = tp.Offset
			}
		}
	}
	return out, nil
}

// Caught reports whether group committed at least frac of what p produced
// to topic on every partition, or on the partitions in only when given.
func (p *Producer) Caught(ctx context.Context, group, topic string, partitions int, frac float64, only ...int32) (bool, map[int32]int64, error) {
	c, err := p.Committed(ctx, group, topic, partitions)
	if err != nil {
		return false, nil, err
	}
	for part, end := range p.End[topic] {
		if len(only) > 0 && !slices.Contains(only, part) {
			continue
		}
		if float64(c[part]) < frac*float64(end) {
			return false, c, nil
		}
	}
	return true, c, nil
}

// ResetOffsets commits offsets for group on topic the way
// kafka-consumer-groups.sh --reset-offsets does: outside any generation,
// with empty metadata. The group must be empty.
func (p *Producer) ResetOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	// Newer versions name the topic by its id.
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mres, err := meta.RequestWith(ctx, p.cl)
	if err != nil {
		return err
	}
	if len(mres.Topics) != 1 || mres.Topics[0].ErrorCode != 0 {
		return fmt.Errorf("reset: no metadata for topic %s", topic)
	}
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group = group
	req.Generation = -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic, rt.TopicID = topic, mres.Topics[0].TopicID
	for part, off := range offsets {
		rp := kmsg.NewOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = part, off
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return err
	}
	for _, t := range res.Topics {
		if err := partitionsErr("reset", t.Topic, t.Partitions, func(tp kmsg.OffsetCommitResponseTopicPartition) (int32, int16) {
			return tp.Partition, tp.ErrorCode
		}); err != nil {
			return err
		}
	}
	return nil
}

// partitionsErr returns the first partition error of a response topic's
// partitions (code gives each one's number and error code), naming op.
func partitionsErr[P any](op, topic string, parts []P, code func(P) (int32, int16)) error {
	for _, tp := range parts {
		if n, c := code(tp); kerr.ErrorForCode(c) != nil {
			return fmt.Errorf("%s %s/%d: %w", op, topic, n, kerr.ErrorForCode(c))
		}
	}
	return nil
}

// DeleteRecords removes the records of topic's partitions below the given
// offsets, as kafka-delete-records.sh (or retention) does.
func (p *Producer) DeleteRecords(ctx context.Context, topic string, below map[int32]int64) error {
	req := kmsg.NewPtrDeleteRecordsRequest()
	rt := kmsg.NewDeleteRecordsRequestTopic()
	rt.Topic = topic
	for part, off := range below {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = part, off
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10_000
	res, err := req.RequestWith(ctx, p.cl)
	if err != nil {
		return err
	}
	for _, t := range res.Topics {
		if err := partitionsErr("delete records", t.Topic, t.Partitions, func(tp kmsg.DeleteRecordsResponseTopicPartition) (int32, int16) {
			return tp.Partition, tp.ErrorCode
		}); err != nil {
			return err
		}
	}
	return nil
}

// Gather gathers j's collector through a pedantic registry (which checks
// every metric's consistency on the way).
func Gather(j *job.Job) ([]*dto.MetricFamily, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(j.Collector()); err != nil {
		return nil, err
	}
	return reg.Gather()
}
