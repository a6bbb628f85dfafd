package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/pipeline"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/dedupstream/dedupstream/statestore"
)

// misrouteWarnEvery rate-limits the warning about records found on the
// wrong partition: one line per partition per interval.
const misrouteWarnEvery = time.Minute

// runner drives the stage of one owned partition p: raw partition p in,
// output partition p out, one transactional producer.
type runner struct {
	j     *Job
	p     int
	lay   layout
	group sink.Group // the membership sent with the input offsets
	gate  *startGate // holds the stages started together until all checked their state (nil: none)
	log   *slog.Logger

	stage *pipeline.Stage
	prod  *sink.Producer
	ins   []*fetch.Fetcher // partition p of each raw topic, as Job.topics
	in    *prefetcher      // reads ins in turn, one batch ahead
	out   *fetch.Fetcher   // output partition p, read back in recovery

	// owned is set once Init took the transactional id over; later
	// recoveries Resume with the id and epoch held, so a replaced instance
	// is fenced instead of fencing its successor.
	owned bool

	// outNext is one past the last output record known: committed ones
	// after recovery, and those of the open cycle after a produce.
	outNext int64
	// tail is where the stage's next output record must land
	// (otherwriter.go).
	tail ownTail
	// restoreTail is how long the last restore took after its read
	// (Stage.EndRestore writing the loaded keys); BenchmarkRestore
	// reports it.
	restoreTail time.Duration

	// Reused per batch.
	recs   []pipeline.Record
	decs   []pipeline.Decision
	emits  []sink.Record
	dlq    []sink.Record
	arena  arena
	topicB [][]byte // raw topic names for the DLQ header
	pos    []int64  // input positions at the start of a cycle
	cur    int      // input (index into ins) of the batch being decided

	lastMisrouteWarn time.Time
	snapAt           time.Time     // last periodic Bloom snapshot
	ready            bool          // counted in Stats.Ready
	met              *stageMetrics // see metrics.go

	// doubt is the cycle whose EndTxn(commit) failed ambiguously: the
	// broker may have committed it. Recovery counts it once the committed
	// input offsets show that it did.
	doubt *doubtfulCycle
	begun time.Time // when the open cycle began (its transaction opens with its first request)
	// produced counts the open cycle's records sent to its output
	// partition.
	produced int64
	// marks are where the clock entered each live generation in the
	// output (marks.go), as committed; pending are the open cycle's, by
	// the index of the record among the cycle's output, and markGen the
	// newest generation marked or pending.
	marks   genMarks
	pending []pendingMark
	markGen uint64
	// marksEnd is where the marks stop being known: the committed ones
	// cover the whole committed output (math.MaxInt64), a store's
	// checkpoint's only the output it had seen (storeMarks); a restore
	// notes marks for the output past it (restore.go, tailMarks).
	marksEnd int64
	// emitted bounds the times of the next restore's records (restore.go):
	// nil without marks.
	emitted *emitTimes
}

// pendingMark is a mark of the open cycle: its idx-th output record is
// the first emitted in generation gen.
type pendingMark struct {
	gen uint64
	idx int64
}

// doubtfulCycle is a cycle whose commit outcome is unknown.
type doubtfulCycle struct {
	pos   []int64 // the input offsets it committed
	cycle Stats
	// openFor is how long the cycle had been under way when its commit
	// failed: past kafka.transaction_timeout, the coordinator aborts the
	// transaction (the process stood still, or the brokers did not answer).
	openFor time.Duration
}

var _ task = (*runner)(nil)

// setReady keeps Stats.Ready in step with the stage's state.
func (r *runner) setReady(ready bool) {
	if r.ready == ready {
		return
	}
	r.ready = ready
	d := 1
	if !ready {
		d = -1
	}
	r.j.addStats(func(s *Stats) { s.Ready += d })
}

func newRunner(j *Job, p int, lay layout, group sink.Group) *runner {
	r := &runner{
		j:     j,
		p:     p,
		lay:   lay,
		group: group,
		log:   j.log.With("stage", p),
	}
	r.met = newStageMetrics(j, p, r.log.Info)
	r.arena.dlqLimit = lay.dlqMaxBytes
	return r
}

// failure kinds: what the runner does with an error.
type kind uint8

const (
	transient kind = iota // abort, back off, re-run recovery
	fatal                 // stop the job with the error
	fenced                // another producer owns the partition: stop
	corrupt               // the stage's store is corrupt: state.on_corruption (corrupt.go)
)

// fatalError marks an error that retrying cannot fix.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

func fatalf(format string, args ...any) error {
	return &fatalError{fmt.Errorf(format, args...)}
}

// storeFS is the test hook's file system for this partition's store, or
// nil for the operating system's files.
func (r *runner) storeFS() vfs.FS {
	if r.j.opts.hooks.StoreFS == nil {
		return nil
	}
	return r.j.opts.hooks.StoreFS(r.p)
}

func classify(err error) kind {
	var (
		fe  *fatalError
		se  *sink.Error
		ae  *sink.AmbiguousError
		oor *fetch.OutOfRangeError
	)
	switch {
	case errors.Is(err, sink.ErrFenced):
		return fenced
	case isCorrupt(err):
		return corrupt
	case errors.As(err, &fe), errors.As(err, &oor), errors.Is(err, sink.ErrState):
		return fatal
	case errors.As(err, &ae):
		return transient
	case errors.As(err, &se):
		if sink.ClassOf(err) == sink.ClassFatal {
			return fatal
		}
		return transient
	}
	// Network errors and fetch retries that ran out: the broker may come
	// back.
	return transient
}

// run opens the stage and drives its recovery and commit cycles until ctx
// ends or a failure is not transient.
func (r *runner) run(ctx context.Context) (err error) {
	if err := r.open(); err != nil {
		r.gate.pass(ctx, false)
		return err
	}
	if r.group.MemberID != "" {
		defer r.met.stopped() // the partition may move to another member
		defer r.j.links.forget(r.p)
	}
	defer r.in.close()
	defer r.prod.Close()
	defer func() {
		if r.stage == nil {
			return // a corrupt store was moved aside and no new one opened
		}
		if cerr := r.stage.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("partition %d: close state: %w", r.p, cerr)
		}
	}()
	hint := fmt.Sprintf("another instance took over transactional id %q (is this partition assigned to two instances?)", r.prod.TransactionalID())
	if r.group.MemberID != "" {
		hint = "the partition moved to another group member (a rebalance, or this member missed its heartbeats)"
	}
	if err := r.checkOpenedState(); !r.gate.pass(ctx, err == nil) {
		return err // nil when another stage failed: runStages reports it
	}
	d := r.j.newDriver(fmt.Sprintf("partition %d", r.p), hint, r.log)
	d.ready = r.setReady
	d.onStop = r.settleOnExit
	d.onFenced = r.onFenced // see fenced.go
	d.onCorrupt = r.onCorrupt
	return d.run(ctx, r)
}

// open opens the stage's state and makes its producer and fetchers. The
// caller closes r.stage.
func (r *runner) open() error {
	if err := r.openStage(); err != nil {
		return err
	}
	if err := r.dropStateOfOtherSettings(); err != nil {
		if r.stage != nil {
			r.stage.Close()
		}
		return err
	}
	if err := r.connect(); err != nil {
		r.stage.Close()
		return fmt.Errorf("partition %d: %w", r.p, err)
	}
	return nil
}

// openStage opens the stage on the partition's state directory. A store
// found corrupt at open (its files, or a checkpoint that does not decode)
// is moved aside and a new one opened, as state.on_corruption says
// (corrupt.go).
func (r *runner) openStage() error {
	for moved := false; ; moved = true {
		err := r.openStageOnce()
		if moved {
			err = r.stuckCorrupt(err)
		}
		if err == nil || !isCorrupt(err) {
			return err
		}
		if err := r.moveCorrupt(err); err != nil {
			return err
		}
	}
}

// openStageOnce opens the stage on the partition's state directory and
// checks that its checkpoint decodes.
func (r *runner) openStageOnce() error {
	var err error
	r.stage, err = pipeline.Open(r.j.stateDir(r.p), r.j.pc, pipeline.Options{
		Clock:  r.j.opts.Clock,
		Logger: r.log,
		Store:  r.j.storeOptions(statestore.Options{FS: r.storeFS(), Logger: r.log}),
	})
	if err != nil {
		return fmt.Errorf("partition %d: open state: %w", r.p, err)
	}
	if _, err := DecodeCheckpoint(r.stage.State().Checkpoint); isCorrupt(err) {
		return fmt.Errorf("partition %d: state %s: %w", r.p, r.j.stateDir(r.p), err)
	}
	return nil
}

func (r *runner) connect() error {
	j, cfg := r.j, r.j.cfg
	client := j.links.client(r.p, j.client) // watched: see links.go
	var err error
	r.prod, err = sink.NewProducer(sink.Config{
		Client:             client,
		TransactionalID:    fmt.Sprintf("%s-%d", cfg.Job.ID, r.p),
		TransactionTimeout: cfg.Kafka.TransactionTimeout,
		RequestTimeout:     j.opts.RequestTimeout,
		RetryTimeout:       j.opts.RetryTimeout,
		Compression:        j.codec,
		MaxBatchBytes:      r.lay.maxBatchBytes(int(cfg.Produce.BatchMaxBytes)),
		MaxInFlight:        cfg.Produce.MaxInFlight,
		Dialer:             j.dialer,
		Watch:              j.links.producerWatch(r.p), // the produce connections, watched like client
		Logger:             r.log,
	})
	if err != nil {
		return err
	}
	// With several raw topics the fetchers take turns, so an idle topic may
	// hold a cycle up for MaxWait each turn.
	fo := fetch.Options{
		MaxWait:         min(max(cfg.Commit.Interval/time.Duration(len(j.topics)), 10*time.Millisecond), fetch.DefaultMaxWait),
		MaxBytes:        int(cfg.Fetch.PartitionMaxBytes),
		MaxRequestBytes: int(cfg.Fetch.RequestMaxBytes),
		RequestTimeout:  j.opts.RequestTimeout,
		RetryTimeout:    j.opts.RetryTimeout,
		ClientID:        cfg.Kafka.ClientID,
		Logger:          r.log,
	}
	for _, t := range j.topics {
		f, err := fetch.New(client, t, r.p, j.inputOptions(fo, t, r.p))
		if err != nil {
			return err
		}
		r.ins = append(r.ins, f)
		r.topicB = append(r.topicB, []byte(t))
	}
	r.pos = make([]int64, len(j.topics))
	r.out, err = fetch.New(client, cfg.Output.Topic, r.p, fo)
	if err != nil {
		return err
	}
	r.in = newPrefetcher(r.ins, cfg.Fetch.FetchAhead(), fetch.Wait{Max: fo.MaxWait, MinBytes: int(cfg.Fetch.MinBytes)})
	return nil
}

// checkpoint encodes the state a stage commits: the raw partitions'
// positions in, as Job.topics (sentinels are left out), the output
// position out, and the generation marks.
func (r *runner) checkpoint(in []int64, out int64) []byte {
	c := Checkpoint{Output: out, Partitions: r.lay.partitions, Dedup: r.j.dedup, OutputTopic: r.j.cfg.Output.Topic}
	if len(r.marks) > 0 {
		// A copy of the marks committed with the offsets (marks.go).
		c.Marks, c.MarksSpan = r.marks, r.j.pc.SpanMs()
	}
	for i, off := range in {
		if off >= 0 {
			c.Inputs = append(c.Inputs, InputOffset{Topic: r.j.topics[i], Partition: int32(r.p), Offset: off})
		}
	}
	return c.AppendEncode(nil)
}

// positions returns into dst the input positions after the batches
// decided (the fetchers may be one batch ahead: see prefetcher).
func (r *runner) positions(dst []int64) []int64 {
	return r.in.positions(dst)
}

// recover is the recovery protocol of DESIGN section 5: fence the previous
// owner and settle its transaction, find the committed input offset, bring
// the store up to the committed output, and resume the input.
func (r *runner) recover(ctx context.Context) error {
	r.j.addStats(func(s *Stats) { s.Recoveries++ })
	if err := acquire(ctx, r.prod, &r.owned); err != nil {
		return err
	}
	committed, meta, err := r.j.committedOffsetsMeta(ctx, r.j.cfg.Job.ID, r.j.topics, r.p)
	if err != nil {
		return fmt.Errorf("committed offsets: %w", err)
	}
	r.settleDoubt(committed)
	// The marks committed with the output (the newest among the inputs'
	// offsets: committedMarks), in the generation span in force; none
	// from an older build, after a migration by one, or on processing
	// time. They are known for the output up to the end committed with
	// them. The restore bounds the records' times by them as written
	// (restore.go, emitTimes).
	r.marks, r.emitted, r.marksEnd = nil, nil, math.MaxInt64
	if om, ok := committedMarks(meta); ok && r.j.pc.TimeBase == pipeline.RecordTime {
		r.marks = om.marks.inSpan(om.marksSpan, r.j.pc.SpanMs())
		r.emitted = &emitTimes{marks: om.marks, spanMs: om.marksSpan, upTo: om.outputNext}
		if om.outputNext >= 0 {
			r.marksEnd = om.outputNext
		}
	}
	st := r.stage.State()
	ck, err := DecodeCheckpoint(st.Checkpoint)
	if err != nil {
		return fatalf("state %s: %w", r.j.stateDir(r.p), err)
	}
	if err := r.checkStatePartitions(ck); err != nil {
		return err
	}
	if r.j.pc.TimeBase == pipeline.RecordTime {
		// Offsets committed without marks (reset with the Kafka tooling,
		// expired), or with older ones than the store's (only an input
		// put back into input.topics carries marks, those of the last
		// commit that included it): the store's copy, which the next
		// commit writes back with the offsets, so that a store rebuilt
		// later finds them there (marks.go, storeMarks).
		if m, end := storeMarks(ck, r.j.cfg.Output.Topic, r.j.pc.SpanMs()); m != nil && m.newerThan(r.marks) {
			r.marks, r.marksEnd, r.emitted = m, end, nil
		}
	}
	offs, err := r.out.ListOffsets(ctx)
	if err != nil {
		return fmt.Errorf("output offsets: %w", err)
	}
	r.tail.recovered(offs)
	from := ck.Output
	if len(st.Checkpoint) == 0 {
		// A new store (a new instance, a moved partition, a lost state
		// directory) needs only the output still inside the window.
		if from, err = r.windowStart(ctx, offs); err != nil {
			return fmt.Errorf("output offsets: %w", err)
		}
		// The output of the live generations begins at the oldest
		// live one's mark, which may be before the first record stamped
		// inside the window: a late record emitted after a record that
		// is not in the output moved the clock (marks.go).
		from = r.marks.liveStart(&r.j.pc, from)
		// Keys a migration moved here lie in other output partitions
		// (restoremoved.go).
		moved, err := r.restoreMoved(ctx)
		if err != nil {
			return fmt.Errorf("restore the keys moved to partition %d: %w", r.p, err)
		}
		if moved > 0 {
			if err := r.stage.EndRestore(); err != nil {
				return &fatalError{err}
			}
			r.j.addStats(func(s *Stats) { s.Restored += uint64(moved) })
		}
	}
	if from > offs.LastStable {
		return &fatalError{r.j.otherOutput(fmt.Sprintf("state %s is ahead of output %s/%d (checkpoint output offset %d, last stable offset %d): "+
			"the output topic was deleted and created again, or truncated", r.j.stateDir(r.p), r.j.cfg.Output.Topic, r.p, from, offs.LastStable))}
	}
	if from < offs.Earliest {
		r.log.Warn("output records the store has not seen were deleted by retention; their keys cannot be restored",
			"from", from, "log_start", offs.Earliest)
		from = offs.Earliest
	}
	resume := committed
	for i, t := range r.j.topics {
		if resume[i] < 0 {
			// No committed group offset (first start, or the group's
			// offsets expired): the store's checkpoint, else the log start.
			if resume[i] = ck.Input(t, int32(r.p)); resume[i] < 0 {
				resume[i] = fetch.OffsetEarliest
			}
		}
	}
	var restored int
	r.outNext = from
	if from < offs.LastStable {
		start := time.Now()
		var err error
		restored, err = r.restoreOutput(ctx, from, offs.LastStable, resume)
		if err != nil {
			return fmt.Errorf("restore from output %s/%d: %w", r.j.cfg.Output.Topic, r.p, err)
		}
		r.outNext = max(from, r.out.Position())
		if restored > 0 {
			r.log.Info("restored the store from the committed output", "records", restored, "from", from, "to", r.outNext, "took", time.Since(start))
		}
	}
	r.j.addStats(func(s *Stats) { s.Restored += uint64(restored); s.Recovered++ })
	r.in.reset(ctx, resume)
	r.skipFirstSnapshotIfEmpty()
	r.log.Info("recovered", "input_offset", resume, "output_offset", r.outNext, "store_seq", st.Seq)
	return nil
}

// windowTail is how many offsets at the end of the output partition
// windowStart reads to find the newest record time.
const windowTail = 1000

// windowStart returns where a restore into an empty store may begin: the
// first output offset whose timestamp can still be inside the window. With
// the window on record time, output records carry their input's timestamp;
// everything before the first record at or after newest - (window +
// window/generations + max_future_skew) is older than the longest a key is
// remembered, newest being the newest timestamp near the partition's end.
// With the window on processing time, on a LogAppendTime output topic, or
// when no timestamp is found, the whole partition is read.
func (r *runner) windowStart(ctx context.Context, offs fetch.Offsets) (int64, error) {
	pc := &r.j.pc
	if pc.TimeBase != pipeline.RecordTime || offs.LastStable <= offs.Earliest {
		return offs.Earliest, nil
	}
	// The newest time on the stage's own clock: a record stamped more
	// than max_future_skew ahead counts as now, as it does in the stage.
	newest, appendTime := int64(-1), false
	wall := r.j.opts.Clock().UnixMilli()
	tail := max(offs.Earliest, offs.LastStable-windowTail)
	err := r.out.ReadRange(ctx, tail, offs.LastStable, func(b *fetch.Batch) error {
		for i := range b.Records {
			newest = max(newest, pc.ClockTime(b.Records[i].Timestamp.UnixMilli(), wall))
		}
		appendTime = appendTime || b.AppendTime
		return nil
	})
	if err != nil || newest < 0 || appendTime {
		// A LogAppendTime output carries the broker's clock, not the
		// records' time the window runs on.
		return offs.Earliest, err
	}
	cutoff := pc.RestoreFrom(newest)
	if cutoff <= 0 {
		return offs.Earliest, nil
	}
	off, err := r.out.OffsetForTime(ctx, cutoff)
	if err != nil || off < 0 {
		return offs.Earliest, err
	}
	if off > offs.Earliest {
		r.log.Info("restoring only the window of the output", "from", off, "log_start", offs.Earliest,
			"cutoff", time.UnixMilli(cutoff).UTC())
	}
	return max(off, offs.Earliest), nil
}

// begin opens a cycle's transaction and notes the input positions it
// starts from.
func (r *runner) begin() error {
	r.begun, r.produced = time.Now(), 0
	r.pending, r.markGen = r.pending[:0], 0
	if n := len(r.marks); n > 0 {
		r.markGen = r.marks[n-1].Gen
	}
	r.in.phase(r.begun.Add(r.j.cfg.Commit.Interval))
	r.pos = r.positions(r.pos)
	return r.prod.Begin()
}

// fetch returns the next batch of the raw topics, taken in turn (the
// turns run on across cycles), fetched ahead by r.in.
func (r *runner) fetch(context.Context, int) (*fetch.Batch, error) {
	b, t, err := r.in.next()
	r.cur = t
	if err != nil {
		return nil, fmt.Errorf("fetch %s/%d: %w", r.j.topics[t], r.p, r.j.inputFailed(err))
	}
	return b, nil
}

// settle ends a cycle: a cycle that read nothing ends its transaction
// without a request, any other commits (see commit).
func (r *runner) settle(ctx context.Context, cycle *Stats) error {
	pos := r.positions(nil)
	if !slices.Equal(pos, r.pos) {
		return r.commit(ctx, pos, cycle)
	}
	if err := r.prod.Commit(ctx); err != nil {
		return r.abort(ctx, err)
	}
	return nil
}

// commit ends a cycle: input offsets into the transaction, EndTxn(commit),
// then the store commit of the cycle's keys with the checkpoint.
//
// The offsets' metadata names the output's end after the cycle
// (outputcheck.go), which the produce acknowledgements tell. It is known
// before them when the stage knows where its records land (ownTail): then
// the offsets go to the coordinator beside the produce requests still out
// (sink.SendOffsetsAhead), one round trip fewer before EndTxn; should the
// records land elsewhere after all, they are sent again with the end the
// acknowledgements tell, which replaces them.
func (r *runner) commit(ctx context.Context, pos []int64, cycle *Stats) error {
	// The partition-count check of this cycle (topicguard.go) starts now,
	// after its last fetch, and runs while the produces are flushed.
	since := time.Now()
	r.j.guard.begin(ctx, since)
	var err error
	var marks genMarks // the marks committed with the cycle's offsets
	ahead := r.outNext
	if r.produced > 0 {
		ahead = -1
		if r.tail.known {
			ahead = r.tail.next + r.produced
		}
	}
	if ahead >= 0 {
		marks = r.cycleMarks(r.tail.next)
		err = r.prod.SendOffsetsAhead(ctx, r.group, r.offsets(pos, ahead, marks))
	}
	// Every produce of the cycle answered: the output offset is known.
	if err == nil {
		err = r.prod.Flush(ctx)
	}
	span, wrote := r.prod.Span(r.j.cfg.Output.Topic, int32(r.p))
	if from, to, gap := r.tail.check(span); err == nil && gap {
		err = r.checkGap(ctx, from, to)
	}
	if err == nil {
		if span.Next >= 0 {
			r.outNext = span.Next
		}
		first := firstOffset(span, r.produced)
		switch {
		case ahead >= 0 && ahead == r.outNext:
			err = r.prod.OffsetsSent()
		case first < 0 && len(r.pending) > 0 && r.j.pc.TimeBase == pipeline.RecordTime:
			// A restore takes every output record to be emitted in the
			// generation of the newest mark before it (restore.go,
			// emitTimes): a cycle that entered a generation must mark it.
			err = fmt.Errorf("output %s/%d: the broker did not say where the cycle's records begin, so their generation marks cannot be placed: the cycle is run again",
				r.j.cfg.Output.Topic, r.p)
		default:
			marks = r.cycleMarks(first)
			err = r.prod.SendOffsets(ctx, r.group, r.offsets(pos, r.outNext, marks))
		}
	}
	if err == nil {
		// The topics must still have the counts the job started with.
		err = r.j.guard.confirm(ctx, since)
	}
	if err == nil {
		r.j.opts.failpoint(testhook.Produced)
		if err = r.prod.Commit(ctx); err != nil {
			r.doubt = &doubtfulCycle{pos: slices.Clone(pos), cycle: *cycle, openFor: time.Since(r.begun)}
		}
	}
	if err != nil {
		return r.abort(ctx, fmt.Errorf("commit input offsets %v: %w%s", pos, err, r.lay.tooLarge(err)))
	}
	// The transaction committed: the output is the truth from here on. A
	// failed store commit leaves the store behind, which recovery repairs.
	r.marks = marks
	r.tail.committed(span, wrote)
	r.j.opts.failpoint(testhook.Committed)
	if err := r.stage.Commit(r.checkpoint(pos, r.outNext)); err != nil {
		return fatalf("commit state at input offsets %v: %w", pos, err)
	}
	r.met.committed(pos, cycle, r.stage) // counts it, see Job.Stats
	r.j.countTruncated(cycle)
	r.snapshot()
	return nil
}

// cycleMarks returns the marks to commit with the open cycle: the
// committed ones and the cycle's own, its output beginning at offset first
// (-1: not known, which commit allows only for a cycle without marks of
// its own), those of expired generations dropped. None on processing time:
// the clock is the wall's, no record is late, and a restore files what it
// reads at the wall clock.
func (r *runner) cycleMarks(first int64) genMarks {
	if r.j.pc.TimeBase != pipeline.RecordTime {
		return nil
	}
	m := r.marks
	if first >= 0 {
		for _, p := range r.pending {
			m = m.note(p.gen, first+p.idx)
		}
	}
	return m.live(r.stage.OldestLive())
}

// firstOffset is where the cycle's produced records begin in span: its
// first record's offset, else (the first batch was a resend answered
// without it) its end less the records, if the end is exact; else -1.
func firstOffset(span sink.Span, produced int64) int64 {
	switch {
	case span.First >= 0:
		return span.First
	case span.Exact && span.Next >= produced:
		return span.Next - produced
	}
	return -1
}

// offsets are the input positions pos as offsets to commit, with the
// output topic and its end after the cycle, outNext (outputcheck.go), and
// the generation marks (marks.go) in their metadata.
func (r *runner) offsets(pos []int64, outNext int64, marks genMarks) []sink.Offset {
	meta := offsetMeta(r.lay.partitions, r.j.cfg.Output.Topic, outNext, marks, r.j.pc.SpanMs())
	offsets := make([]sink.Offset, 0, len(pos))
	for i, off := range pos {
		if off >= 0 {
			offsets = append(offsets, sink.Offset{Topic: r.j.topics[i], Partition: int32(r.p), Offset: off, Metadata: meta})
		}
	}
	return offsets
}

// snapshotEvery is how often a stage writes its Bloom snapshot between
// cycles: after a crash, Open starts from it and adds only the keys the
// store received since (statestore.Store.ScanSince), instead of scanning
// the whole store.
const snapshotEvery = time.Minute

// snapshot writes the Bloom snapshot when the last one is snapshotEvery
// old (the first right after recovery, as Open consumed the previous one,
// unless the store was empty then: see skipFirstSnapshotIfEmpty). A
// failure costs only a slower start after a crash: it is logged.
func (r *runner) snapshot() {
	if now := time.Now(); now.Sub(r.snapAt) >= snapshotEvery {
		r.snapAt = now
		if err := r.stage.SaveSnapshot(); err != nil {
			r.log.Warn("writing the bloom snapshot failed; a restart after a crash rebuilds the filter from the store", "err", err)
		}
	}
}

// skipFirstSnapshotIfEmpty puts the stage's first snapshot off by
// snapshotEvery when recovery left its store without a commit (a new job,
// a new or removed state directory with nothing to restore). A snapshot
// spares a restart after a crash the scan of the whole store: without one
// Open rebuilds the filter from the store's live generations, with one it
// adds the keys committed since. Starting from an empty store both visit
// the same keys, those committed since recovery, so that snapshot (the
// whole front written and synced, in the first cycle of every new stage)
// would buy nothing.
func (r *runner) skipFirstSnapshotIfEmpty() {
	if r.snapAt.IsZero() && r.stage.State().Seq == 0 {
		r.snapAt = time.Now()
	}
}

// settleOnExit learns, before a stop, whether a cycle whose commit was
// ambiguous committed, so that the counters are exact at exit: Resume
// settles the transaction (a received EndTxn completes first), then the
// group's offsets tell. It is bounded by the shutdown timeout and only logs
// when it cannot tell.
func (r *runner) settleOnExit(ctx context.Context) {
	if r.doubt == nil {
		return
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.j.opts.ShutdownTimeout)
	defer cancel()
	err := r.prod.Resume(c)
	var committed []int64
	if err == nil {
		committed, err = r.j.committedOffsets(c, r.j.cfg.Job.ID, r.j.topics, r.p)
	}
	if err != nil {
		r.log.Warn("stopping without knowing whether the last cycle committed; the counters may miss it", "err", err)
		return
	}
	r.settleDoubt(committed)
}

// settleDoubt counts the cycle whose commit was ambiguous if the group's
// committed offsets (as Job.topics) are the ones it sent: then its
// transaction committed, its input is not read again, and without this its
// records would be missing from in = out + dropped + dlq. Otherwise the
// transaction was aborted and the input is read again from the committed
// offsets. When the cycle had been under way longer than
// kafka.transaction_timeout, the coordinator aborted it for that (the
// process stood still, or the brokers did not answer): the same event a
// fence with cause timed_out reports, met here while the outcome of EndTxn
// was unknown, and said as such. Each settlement is counted in
// dedupstream_ambiguous_commits_total by outcome.
func (r *runner) settleDoubt(committed []int64) {
	d := r.doubt
	r.doubt = nil
	if d == nil || len(committed) != len(d.pos) {
		return
	}
	aborted := false
	for i, off := range d.pos {
		if off >= 0 && committed[i] != off {
			aborted = true
			break
		}
	}
	// The transaction opens with the cycle's first request, at most about
	// one commit interval after the cycle began.
	timeout := r.j.cfg.Kafka.TransactionTimeout
	switch {
	case !aborted:
		r.log.Info("the cycle whose commit was ambiguous had committed", "input_offset", d.pos)
		r.met.ambiguous(ambiguousCommitted)
		r.met.settled(&d.cycle)
		r.j.countTruncated(&d.cycle)
	case timeout > 0 && d.openFor >= timeout+r.j.cfg.Commit.Interval:
		r.log.Warn("the cycle whose commit was ambiguous had not committed: its transaction stayed open past the transaction timeout "+
			"(the process stood still, or the brokers did not answer), so the transaction coordinator aborted it; "+
			"its input is read again from the committed offsets, nothing is lost or repeated",
			"open_for", d.openFor.Round(time.Millisecond), "transaction_timeout", timeout, "input_offset", d.pos, "committed_offset", committed)
		r.met.ambiguous(ambiguousTimedOut)
	default:
		r.log.Info("the cycle whose commit was ambiguous had not committed; its input is read again from the committed offsets",
			"open_for", d.openFor.Round(time.Millisecond), "input_offset", d.pos, "committed_offset", committed)
		r.met.ambiguous(ambiguousAborted)
	}
}

// abort ends the open transaction without effect and forgets the stage's
// open cycle; cause is returned for the caller to classify.
func (r *runner) abort(ctx context.Context, cause error) error {
	r.in.discard() // read again after recovery
	r.tail.forget()
	r.stage.Abort()
	return abortTxn(ctx, r.prod, r.log, cause)
}

// decide runs one fetched batch through the stage and lays its emits and
// DLQ records out for produce.
func (r *runner) decide(_ int, b *fetch.Batch, cycle *Stats) error {
	t := r.cur
	r.met.batch(b, t, r.pos[t], cycle.In)
	var misrouted uint64
	if r.j.partFn != nil {
		r.recs, misrouted = convertRouted(r.recs, b, r.j.partFn, r.lay.partitions, r.p)
	} else {
		r.recs = convert(r.recs, b)
	}
	decs, counts, err := r.stage.Process(r.recs, r.decs[:0])
	r.decs = decs
	if err != nil {
		return &fatalError{err}
	}
	cycle.Counts.Add(counts)
	r.checkRoute(misrouted, t, cycle)

	nd := 0
	for i := range decs {
		if decs[i].Verdict == pipeline.DeadLetter {
			nd++
		}
	}
	r.arena.reset(b, nd)
	r.emits, r.dlq = slices.Grow(r.emits[:0], len(decs)-nd), slices.Grow(r.dlq[:0], nd)
	starts := r.stage.GenStarts()
	for i, d := range decs {
		switch d.Verdict {
		case pipeline.Emit:
			if len(starts) > 0 && starts[0].Index == i {
				if g := starts[0].Gen; g > r.markGen || len(r.marks)+len(r.pending) == 0 {
					// The first record emitted in a newer generation.
					r.pending = append(r.pending, pendingMark{g, r.produced + int64(len(r.emits))})
					r.markGen = g
				}
				starts = starts[1:]
			}
			r.emits = append(r.emits, r.arena.record(&b.Records[i], "", nil, 0))
		case pipeline.DeadLetter:
			r.dlq = append(r.dlq, r.arena.record(&b.Records[i], d.Reason, r.topicB[t], r.p))
		}
	}
	cycle.DLQTruncated += r.arena.cut
	return nil
}

// produce sends the batch's emits to output partition p and its DLQ
// records to the stage's DLQ partition, inside the open transaction.
func (r *runner) produce(ctx context.Context) error {
	if len(r.emits) > 0 {
		if _, err := r.prod.Produce(ctx, r.j.cfg.Output.Topic, int32(r.p), r.emits); err != nil {
			return fmt.Errorf("produce to %s/%d: %w", r.j.cfg.Output.Topic, r.p, err)
		}
		r.produced += int64(len(r.emits))
		// The cycle will commit input offsets: add the group to the
		// transaction while the batches are out.
		r.prod.AddOffsetsEarly(ctx, r.group.ID)
	}
	if len(r.dlq) > 0 {
		dp := int32(r.p % r.lay.dlqPartitions)
		if _, err := r.prod.Produce(ctx, r.j.cfg.Output.DLQTopic, dp, r.dlq); err != nil {
			return fmt.Errorf("produce to %s/%d: %w", r.j.cfg.Output.DLQTopic, dp, err)
		}
	}
	return nil
}

// checkRoute counts the batch's misrouted records, those whose Kafka key
// (the business key) the configured partitioner sends elsewhere (counted
// by convertRouted): input mode is unsound for them.
func (r *runner) checkRoute(n uint64, t int, cycle *Stats) {
	if n == 0 {
		return
	}
	cycle.Misrouted += n
	if now := time.Now(); now.Sub(r.lastMisrouteWarn) >= misrouteWarnEvery {
		r.lastMisrouteWarn = now
		r.log.Warn("records arrived on another partition than their key's: producers disagree on the partitioner; consider partitioning: repartition",
			"topic", r.j.topics[t], "partition", r.p, "partitioner", r.j.cfg.Input.Partitioner, "in_batch", n)
	}
}
