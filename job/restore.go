package job

import (
	"context"
	"math"
	"runtime/pprof"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

// restoreAhead is how many keyed batches the restore's reader may have
// ready before the stage records them.
const restoreAhead = 2

// restoreFetchAhead is how many fetched batches the restore's read may
// hold ahead of the keying (fetch.Fetcher.ReadRangeAhead).
const restoreFetchAhead = 2

// keyedBatch is one batch of output records, keyed, on its way from the
// restore's reader to the stage.
type keyedBatch struct {
	keys  pipeline.Restored
	next  int64     // the output offset after the batch
	n     int       // records
	marks []GenMark // noted for the batch's records past the marks known (tailMarks)
}

// restoreOutput reads the committed output from offset from to the last
// stable offset (to, for progress) back into the store, with each batch
// committing the checkpoint of input positions resume and the offset after
// it. It returns how many records it restored.
//
// Four goroutines share the work: one fetches and decodes the next
// batches (fetch.Fetcher.ReadRangeAhead: the round trip no longer waits
// for the keying, nor the keying for it), one keys half of each batch's
// records while a helper keys the other half (splitKeyer: the JSON
// extraction and the hash, the costliest part of the read side), and the
// caller's records the keys in the Bloom front and the store
// (Stage.RestoreKeyed), in output order, while the next batch is read and
// keyed. When the output is read, the store writes what it still holds
// in memory (Stage.EndRestore), so the restore ends with every key in the
// store. BenchmarkRestore measures it.
//
// Each goroutine runs under a profiler label, piece=fetch, key,
// key-helper, stage (the caller, EndRestore included), and the store's
// load-write (statestore), so that a CPU profile tells
// what each piece costs and which goroutine bounds the restore
// (go tool pprof -tags; docs/benchmarks.md, "Restore, session 9").
func (r *runner) restoreOutput(ctx context.Context, from, to int64, resume []int64) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	free := make(chan *keyedBatch, restoreAhead+1)
	for range restoreAhead + 1 {
		free <- &keyedBatch{}
	}
	full := make(chan *keyedBatch, restoreAhead)
	readErr := make(chan error, 1)
	emitted := r.emitted
	tail := r.tailMarks()
	go pprof.Do(ctx, pprof.Labels("piece", "key"), func(ctx context.Context) {
		defer close(full)
		keyer := newSplitKeyer(ctx, r.stage, emitted)
		defer keyer.close() // its only user is this goroutine
		readErr <- r.out.ReadRangeAhead(ctx, from, fetch.ToLastStable, restoreFetchAhead, func(b *fetch.Batch) error {
			var kb *keyedBatch
			select {
			case kb = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
			keyer.keyBatch(b, &kb.keys)
			kb.next, kb.n = b.NextOffset, len(b.Records)
			kb.marks = tail.note(kb.marks[:0], b, kb.keys.Keyed)
			select {
			case full <- kb:
				return nil
			case <-ctx.Done(): // the caller returned (or panicked) early
				return ctx.Err()
			}
		})
	})
	var (
		restored, unkeyed int
		applyErr          error
	)
	defer pprof.SetGoroutineLabels(ctx)
	pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("piece", "stage")))
	// Drained to the end, even after an error: the reader then stops at
	// its next batch and closes full.
	for kb := range full {
		if applyErr == nil {
			for _, k := range kb.marks {
				r.marks = r.marks.note(k.Gen, k.Offset)
			}
			// The batch was emitted with the clock in its newest mark's
			// generation or later (marks.go): its keys are filed there
			// at least, whatever their timestamps say.
			if g, ok := r.marks.genAt(kb.next - 1); ok {
				r.stage.AdvanceTo(g)
			}
			if err := r.stage.RestoreKeyed(&kb.keys, r.checkpoint(resume, kb.next)); err != nil {
				applyErr = &fatalError{err}
				cancel() // the reader stops at its next batch
			} else {
				restored += kb.n
				r.met.restoredUpTo(from, to, kb.next, kb.n)
				if u := kb.keys.Unkeyed(); u > 0 {
					unkeyed += u
					r.met.restoreUnkeyed(u)
				}
				r.j.opts.failpoint(testhook.Restored)
			}
		}
		free <- kb
	}
	err := <-readErr
	if unkeyed > 0 {
		r.log.Warn("output records without a business key under the current dedup settings were left out of the restore: "+
			"they were emitted under another dedup.key, or written to the output by another producer; no record can repeat a key they do not have",
			"records", unkeyed, "from", from)
	}
	if applyErr != nil {
		return restored, applyErr
	}
	if err != nil {
		return restored, err
	}
	if restored > 0 {
		// The restore is over when the store holds its keys: they are
		// written as runs now, not by the first cycle's Commit.
		start := time.Now()
		err := r.stage.EndRestore()
		r.restoreTail = time.Since(start)
		if err != nil {
			return restored, &fatalError{err}
		}
	}
	// Only now: the progress reached 1 with the last batch read, while
	// the store still had most of the restore to write (10M keys: the
	// runs took longer than the read).
	r.met.restoreDurable()
	return restored, nil
}

// tailMarks notes generation marks for the output past the marks a
// recovery knows (runner.marksEnd: the marks came from the store's
// checkpoint, which vouches only for the output it had seen; storeMarks).
// The restore files those records by their times on the stage clock, as
// without marks; the marks it notes say the same and no more: a mark for
// the first record whose time is in a newer generation than the newest
// mark's, among the records the restore files (those without a business
// key move no clock). Each is true as the marks require (the clock that
// emitted a record had reached its time, and it never goes back; the
// stage emits on from the clock this restore leaves) and no record after
// it is counted later than its own time says (emitTimes), so a store
// rebuilt later from the marks written back (cycleMarks) files these
// records as this restore did. Without them, the marks written back
// would claim that these records were emitted in the generation of the
// store's newest mark, and a store rebuilt later would count a record
// stamped in a newer generation at that generation's end: its key would
// expire early and its replay pass.
type tailMarks struct {
	pc     *pipeline.Config
	clock  func() time.Time
	spanMs int64
	from   int64  // the first offset noted for; math.MaxInt64: none
	gen    uint64 // the newest mark's generation
}

// tailMarks returns the restore's noter of marks (which notes none when
// the marks are known for the whole output).
func (r *runner) tailMarks() *tailMarks {
	t := &tailMarks{pc: &r.j.pc, clock: r.j.opts.Clock, spanMs: r.j.pc.SpanMs(), from: r.marksEnd}
	if n := len(r.marks); n > 0 {
		t.gen = r.marks[n-1].Gen
	} else {
		t.from = math.MaxInt64 // no marks to continue: the first cycle starts them
	}
	return t
}

// note appends to dst the marks of the records of b at or past t.from;
// keyed says which records the restore files (pipeline.Restored.Keyed).
func (t *tailMarks) note(dst []GenMark, b *fetch.Batch, keyed func(i int) bool) []GenMark {
	if t.from == math.MaxInt64 || b.NextOffset <= t.from {
		return dst
	}
	wall := t.clock().UnixMilli() // as Stage.RestoreKeyed reads it
	for i := range b.Records {
		fr := &b.Records[i]
		ms := t.pc.ClockTime(fr.Timestamp.UnixMilli(), wall)
		if fr.Offset < t.from || ms < 0 || !keyed(i) {
			continue
		}
		if g := uint64(ms / t.spanMs); g > t.gen {
			dst = append(dst, GenMark{Gen: g, Offset: fr.Offset})
			t.gen = g
		}
	}
	return dst
}

// splitKeyMin is the smallest batch splitKeyer hands half of to its
// helper: below it the hand-off costs more than it saves.
const splitKeyMin = 256

// splitKeyer keys a batch of output records on two goroutines, the
// caller's and a helper's, half each: keying on the reading goroutine alone
// bound the read side of a restore (0.37 us per key of 10M against the
// 0.22 us of the read alone). Each half keys the fetched records in place
// (keyBatch): with the conversion of the whole batch on the caller's
// goroutine, the caller did 1.2 s of a 10M restore's keying against the
// helper's 0.6 s (profile labels key and key-helper, BenchmarkRestore).
type splitKeyer struct {
	own, other *pipeline.RestoreKeyer
	emitted    *emitTimes // nil: every record counts at its timestamp
	work       chan splitWork
	done       chan struct{}
}

// splitWork is a half: from (fetched records) or else in, as records at..
// of b.
type splitWork struct {
	from    []fetch.Record
	in      []pipeline.Record
	b       *pipeline.Restored
	at      int
	emitted *emitTimes // see splitKeyer
}

// run keys w on the calling goroutine with rk. Fetched records are keyed
// in place (RestoreKeyer.KeyAt), as fromFetched would present them: no
// slice of converted records is written and read back (convert was 0.26 s
// of a 10M restore's CPU).
func (w *splitWork) run(rk *pipeline.RestoreKeyer) {
	if w.from == nil {
		rk.KeyInto(w.in, w.b, w.at)
		return
	}
	// One limit serves the half: its last record was emitted last.
	limit := w.emitted.batchLimit(w.from)
	for i := range w.from {
		fr := &w.from[i]
		rk.KeyAt(partition.Record{Key: fr.Key, Value: fr.Value, Headers: fr.Headers}, min(fr.Timestamp.UnixMilli(), limit), w.b, w.at+i)
	}
}

// newSplitKeyer starts the helper, under the labels of ctx with
// piece=key-helper; emitted (nil: none) bounds the fetched records' times.
func newSplitKeyer(ctx context.Context, s *pipeline.Stage, emitted *emitTimes) *splitKeyer {
	k := &splitKeyer{own: s.NewRestoreKeyer(), other: s.NewRestoreKeyer(), emitted: emitted, work: make(chan splitWork), done: make(chan struct{})}
	go func() {
		pprof.SetGoroutineLabels(pprof.WithLabels(ctx, pprof.Labels("piece", "key-helper")))
		for w := range k.work {
			w.run(k.other)
			k.done <- struct{}{}
		}
	}()
	return k
}

// close ends the helper; key must not be called after it.
func (k *splitKeyer) close() { close(k.work) }

// key replaces the contents of b with the keys of in, as
// pipeline.RestoreKeyer.Key does.
func (k *splitKeyer) key(in []pipeline.Record, b *pipeline.Restored) {
	k.split(nil, in, b)
}

// keyBatch is key of the records of fb, as convert would present them,
// keyed in place (splitWork.run).
func (k *splitKeyer) keyBatch(fb *fetch.Batch, b *pipeline.Restored) {
	k.split(fb.Records, nil, b)
}

// split keys from (when not nil) or else in into b, half on the helper.
func (k *splitKeyer) split(from []fetch.Record, in []pipeline.Record, b *pipeline.Restored) {
	n := len(in)
	if from != nil {
		n = len(from)
	}
	b.SetLen(n)
	if n < splitKeyMin {
		w := splitWork{from: from, in: in, b: b, emitted: k.emitted}
		w.run(k.own)
		return
	}
	half := n / 2
	var theirs, mine splitWork
	if from != nil {
		theirs, mine = splitWork{from: from[half:], b: b, at: half, emitted: k.emitted}, splitWork{from: from[:half], b: b, emitted: k.emitted}
	} else {
		theirs, mine = splitWork{in: in[half:], b: b, at: half}, splitWork{in: in[:half], b: b}
	}
	k.work <- theirs
	mine.run(k.own)
	<-k.done
}

// emitTimes bounds the time a restore counts an output record as on the
// stage clock by the generation it was emitted in. The stage counted a
// record stamped more than max_future_skew ahead of the wall clock (a
// producer whose clock is wrong) as the wall clock of its decision
// (pipeline.Config.ClockTime), which the restore cannot know: counted at
// the wall clock of the restore, or at its stamp once the wall clock has
// passed it, it moved the clock as far as the job had stood still; every
// key emitted in the window before it expired, and the keys restored with
// it were kept past their window (TestRestoreFutureRecord: a replay passed,
// a later record was dropped). The marks name the generation each record
// was emitted in (marks.go: a mark for the first record emitted in each
// newer generation, so every record lies in the generation of the newest
// mark at or before it), and no record counts later than its end.
type emitTimes struct {
	marks  genMarks // as committed, in generations of spanMs
	spanMs int64
	// upTo is the output's end committed with the marks (<= 0: not
	// known, they cover all of it): records from there on were emitted
	// by later commits, whose marks these are not.
	upTo int64
}

// batchLimit is limit for records fetched in offset order: one bound
// serves them all, their last was emitted last. math.MaxInt64 for e nil
// (no marks) or no records.
func (e *emitTimes) batchLimit(recs []fetch.Record) int64 {
	if e == nil || len(recs) == 0 {
		return math.MaxInt64
	}
	return e.limit(recs[len(recs)-1].Offset)
}

// outputRecord is output record fr for a store, counted at its timestamp
// or limit, whichever is earlier (emitTimes).
func outputRecord(fr *fetch.Record, limit int64) pipeline.Record {
	return pipeline.Record{Record: partition.Record{Key: fr.Key, Value: fr.Value, Headers: fr.Headers}, TimestampMs: min(fr.Timestamp.UnixMilli(), limit)}
}

// limit returns the latest time a restore may count the output records at
// offsets up to last as: the end of the generation the record at last was
// emitted in, math.MaxInt64 when no mark covers it.
func (e *emitTimes) limit(last int64) int64 {
	if e.upTo > 0 && last >= e.upTo {
		return math.MaxInt64
	}
	g, ok := e.marks.genAt(last)
	if !ok || g >= uint64(math.MaxInt64/e.spanMs) {
		return math.MaxInt64
	}
	return (int64(g)+1)*e.spanMs - 1
}
