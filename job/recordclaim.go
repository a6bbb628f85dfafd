package job

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/segmentio/kafka-go"
)

// The partitions topic records the job's layout: the partition count (key
// "partitions", partrecord.go), the route ("route", routerecord.go) and
// the output topic ("output", outputcheck.go). Instances of a new job may
// start at the same moment, each find the topic empty and each come with a
// layout of its own (one saw 4 partitions, the other 6 after an operator
// grew the topics in between). Kafka has no conditional produce, and
// claiming the records one by one in a transaction of a shared
// transactional id did not hold: two claimers fenced each other in turn
// until both gave up (embedded broker), and on three brokers one instance
// won the count and the other the output topic, so both ran.
//
// So the layout is claimed whole, and the log's order decides. An
// instance that finds a layout record missing appends one claim record
// holding its whole layout (key "claim-<random>", value one "key=value"
// line per record) and reads the topic back until the claim shows. Every
// reader folds the topic in offset order the same way: a plain record
// (key "partitions", "route" or "output", written by Migrate or by
// earlier builds) sets its key; a claim sets only the keys nothing before
// it set. All readers see one order, so all agree on the layout in force:
// the first claim's, its three records together; the other instances
// compare and refuse (exit 2). Compaction keeps the result: every claim
// has a key of its own, and of a plain key it keeps the last record, which
// decides the fold's value for that key whatever claims come before it.
// Each attempt takes a new random key, so a retried produce that landed
// twice adds a later claim instead of moving the first one.

// claimKeyPrefix starts the key of every claim record.
const claimKeyPrefix = "claim-"

// layoutKeys are the partitions topic's plain record keys, in the order a
// claim lists them.
var layoutKeys = []string{partitionsRecordKey, routeRecordKey, outputRecordKey}

// jobRecord is the value in force of one layout key and the offset of the
// record that set it.
type jobRecord struct {
	value  []byte
	offset int64
}

// jobRecords are the values in force in the partitions topic by key.
type jobRecords map[string]jobRecord

// fold applies the record at offset off to recs by the rule above.
func (recs jobRecords) fold(key, value []byte, off int64) {
	k := string(key)
	if slices.Contains(layoutKeys, k) || k == movedRecordKey {
		recs[k] = jobRecord{value: bytes.Clone(value), offset: off}
		return
	}
	if !strings.HasPrefix(k, claimKeyPrefix) {
		return
	}
	for line := range bytes.Lines(value) {
		name, v, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte("="))
		if _, set := recs[string(name)]; !ok || set || !slices.Contains(layoutKeys, string(name)) {
			continue
		}
		if len(v) > 0 && v[0] == '"' {
			u, err := strconv.Unquote(string(v))
			if err != nil {
				continue // malformed: sets nothing
			}
			v = []byte(u)
		}
		recs[string(name)] = jobRecord{value: bytes.Clone(v), offset: off}
	}
}

// missing reports whether a key of want has no value in recs.
func (recs jobRecords) missing(want map[string]string) bool {
	for k := range want {
		if _, ok := recs[k]; !ok {
			return true
		}
	}
	return false
}

// claimValue is the value of a claim record of the layout want. A value
// that a line cannot hold as it is (a route naming a JSON member or header
// with a newline in it) is written quoted, Go syntax, and fold unquotes it;
// other values are written plain, as earlier builds wrote and read them.
func claimValue(want map[string]string) []byte {
	var b bytes.Buffer
	for _, k := range layoutKeys {
		v, ok := want[k]
		if !ok {
			continue
		}
		if strings.ContainsAny(v, "\n\r") || strings.HasPrefix(v, `"`) {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "%s=%s\n", k, v)
	}
	return b.Bytes()
}

// readJobRecords folds the partitions topic, read_committed from its start
// to its last stable offset; empty when the topic does not exist.
func (j *Job) readJobRecords(ctx context.Context) (jobRecords, error) {
	topic := PartitionsTopic(j.cfg.Job.ID)
	var recs jobRecords
	err := j.retryAdmin(ctx, "read topic "+topic, func() error {
		recs = jobRecords{}
		counts, err := j.partitionCounts(ctx, []string{topic})
		if err != nil || counts[topic] == 0 {
			return err
		}
		f, err := fetch.New(j.client, topic, 0, fetch.Options{RequestTimeout: j.opts.RequestTimeout, RetryTimeout: j.opts.RetryTimeout, ClientID: j.cfg.Kafka.ClientID, Logger: j.log})
		if err != nil {
			return err
		}
		offs, err := f.ListOffsets(ctx)
		if err != nil {
			return err
		}
		return f.ReadRange(ctx, offs.Earliest, offs.LastStable, func(b *fetch.Batch) error {
			for _, r := range b.Records {
				recs.fold(r.Key, r.Value, r.Offset)
			}
			return nil
		})
	})
	return recs, err
}

// readJobRecord returns the value in force of key and the offset of the
// record that set it; nil when the topic or the record does not exist.
func (j *Job) readJobRecord(ctx context.Context, key string) (value []byte, offset int64, err error) {
	recs, err := j.readJobRecords(ctx)
	if r, ok := recs[key]; ok && err == nil {
		return r.value, r.offset, nil
	}
	return nil, -1, err
}

// claimJobRecords returns the layout in force, first claiming want (key
// -> value) when a key of it has no record: one claim record, then the
// topic read back until no key of want is missing. The layout returned is
// then the first claim's, ours or another instance's.
func (j *Job) claimJobRecords(ctx context.Context, want map[string]string) (jobRecords, error) {
	topic := PartitionsTopic(j.cfg.Job.ID)
	if err := j.checkPartitionsTopicConfig(ctx); err != nil {
		return nil, err
	}
	recs, err := j.readJobRecords(ctx)
	if err != nil || !recs.missing(want) {
		return recs, err // a job whose topic holds its layout needs no right to create it
	}
	j.opts.failpoint(testhook.JobRecordMissing)
	if err := j.retryAdmin(ctx, "create topic "+topic, func() error { return j.createJobTopic(ctx) }); err != nil {
		return nil, err
	}
	// Someone else may have created it first, under other configs.
	if err := j.checkPartitionsTopicConfig(ctx); err != nil {
		return nil, err
	}
	if _, ok := recs[partitionsRecordKey]; !ok {
		// Before the claim: once the layout shows, no start comes here.
		n, _ := strconv.Atoi(want[partitionsRecordKey])
		if err := j.recordLostMoves(ctx, n); err != nil {
			return nil, err
		}
	}
	value := claimValue(want)
	err = j.retryAdmin(ctx, "claim the job's layout in topic "+topic, func() error {
		j.opts.failpoint(testhook.JobRecordClaim)
		key := claimKeyPrefix + rand.Text()
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		pres, err := j.client.Produce(rctx, &kafka.ProduceRequest{
			Topic: topic, Partition: 0, RequiredAcks: kafka.RequireAll,
			Records: kafka.NewRecordReader(kafka.Record{Key: kafka.NewBytes([]byte(key)), Value: kafka.NewBytes(value)}),
		})
		if err == nil {
			err = pres.Error
		}
		if err != nil {
			return fmt.Errorf("write claim %q to topic %q: %w", key, topic, err)
		}
		j.log.Info("claimed the job's layout", "topic", topic, "offset", pres.BaseOffset, "claim", strings.TrimSpace(string(value)))
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A read_committed read stops at the first open transaction (a
	// Migrate's or an earlier build's): read until the claim shows.
	err = j.retryAdmin(ctx, "read back the job's layout", func() error {
		if recs, err = j.readJobRecords(ctx); err == nil && recs.missing(want) {
			err = fmt.Errorf("the layout claimed in topic %q is not readable yet", topic)
		}
		return err
	})
	return recs, err
}

// checkLayoutRecords refuses to start under another partition count, route
// or output topic than the partitions topic records, claiming the
// configured ones when it records none. When the brokers refuse the job
// that topic, the guards it holds are off: it says so, and the committed
// offsets and the stores still guard the count and the output topic.
func (j *Job) checkLayoutRecords(ctx context.Context, lay layout) error {
	recs, err := j.claimJobRecords(ctx, map[string]string{
		partitionsRecordKey: strconv.Itoa(lay.partitions),
		routeRecordKey:      j.routeSettings(),
		outputRecordKey:     j.cfg.Output.Topic,
	})
	if errors.Is(err, errPartitionsTopicRefused) {
		j.log.Warn("the job's layout cannot be recorded: a changed partition count is detected only by the committed offsets and the local state, "+
			"a renamed output.topic only by the committed offsets, a changed dedup.key, input.partitioning or input.partitioner not at all",
			"topic", PartitionsTopic(j.cfg.Job.ID), "err", err,
			"fix", "let the job create, read and write this topic (one partition, cleanup.policy=compact)")
		recs, err = jobRecords{}, nil
	}
	if r, ok := recs[movedRecordKey]; ok {
		j.moved = parseMoved(r.value) // see restoremoved.go
	}
	if err == nil {
		err = j.checkPartitionsRecord(recs, lay.partitions)
	}
	if err == nil {
		err = j.checkRouteRecord(recs)
	}
	if err != nil {
		return j.otherJob(err, recs)
	}
	return j.checkOutputTopic(ctx, lay, recs)
}
