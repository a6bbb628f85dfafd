package job

import (
	"context"
	"errors"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/sink"
)

// Stage p is the only writer of output partition p: every other copy of
// the stage (a zombie, a second instance assigned p, the group's next
// owner) uses the transactional id "<job.id>-<p>" and is fenced. A producer
// under another transactional id is not: a second job with another job.id
// and the same output topic (a rolling update that changed job.id while
// instances under the old id still run, two configs naming one output, a
// client writing into the output by hand) writes beside the stage, and the
// keys each emits pass the other's store. Nothing in Kafka refuses that, so
// the stage watches for it: between its own records in the partition there
// is nothing but transaction markers, as long as it is the only writer.
//
// ownTail is where the stage's next record must land. A cycle's records
// landing anywhere else (sink.Span: a gap between two of the cycle's
// batches, or its first record past ownTail) show that something was
// appended in between. Not always another writer's records: a transaction
// coordinator that fails over while it writes a commit's markers writes
// them again (seen on three brokers when one was bounced: a second marker
// right after the first). So the stage reads the gap's batch headers
// (fetch.Fetcher.Heads, read_uncommitted): a record batch there that is
// not a marker and not of the stage's producer id is another writer's;
// the cycle is aborted before its commit and the job stops with
// ErrOtherWriter. Markers alone carry no keys and pass. Recovery sets ownTail to the
// partition's end when no transaction is open there (all that recovery
// restored is then the whole partition), a commit to one past the marker
// that follows its records, and the gap is read from that marker's slot
// on (another writer's record can take it: see ownTail); an abort, or a
// cycle whose last offset the broker did not say, leaves it unknown until
// the next commit.
//
// It detects a writer that appends between two of the stage's commits, so
// at the latest on the stage's second commit after that writer started.
// It cannot see writes to partitions the stage does not write, nor undo
// what both committed before it was noticed: the job stops, the operator
// stops the other writer, and the next start restores the keys of every
// record in the output since the stage's checkpoint, the other writer's
// included.

// ErrOtherWriter reports that another producer writes to the job's output
// partition. The CLI exits with the fenced code (3).
var ErrOtherWriter = errors.New("another producer writes to the output")

// ownTail is the offset where the stage's next output record must land,
// when known (the zero value knows nothing), and where a gap before it
// is read from: the slot of the last commit's marker. The marker's
// offset is not told to the producer; a record another writer appends
// after the cycle's last batch and before its marker takes that slot and
// pushes the marker one further, so that the next cycle's gap holds the
// marker and the foreign record sits just before it (seen on three
// brokers: the hand-written record of TestOtherWriterStopsTheJob at the
// slot, the marker after it).
type ownTail struct {
	next  int64
	from  int64
	known bool
}

// recovered sets the tail after recovery from the output's offsets, read
// after the stage took its transactional id over (which settled its own
// open transaction): with no transaction open, the partition ends there.
func (t *ownTail) recovered(offs fetch.Offsets) {
	t.next, t.from, t.known = offs.Latest, offs.Latest, offs.Latest == offs.LastStable
}

// forget makes the tail unknown: after an abort, whose marker and
// records are not counted.
func (t *ownTail) forget() { t.known = false }

// check returns the first run of offsets [from, to) of the cycle's span
// that the stage did not take (a gap: checkGap says whose), ok false when
// there is none.
func (t *ownTail) check(s sink.Span) (from, to int64, ok bool) {
	switch {
	case s.ForeignFrom >= 0:
		return s.ForeignFrom, s.ForeignTo, true
	case t.known && s.First > t.next:
		return t.from, s.First, true
	}
	return 0, 0, false
}

// committed moves the tail past a committed cycle that wrote span s to
// the partition (wrote: false when it wrote nothing there, so no marker
// follows either).
func (t *ownTail) committed(s sink.Span, wrote bool) {
	if wrote {
		t.next, t.from, t.known = s.Next+1, s.Next, s.Exact // +1: the commit marker
	}
}

// checkGap reads the batch headers of [from, to), offsets of the stage's
// output partition between its own records, and returns ErrOtherWriter
// when another producer's records lie there. A gap that cannot be read is
// logged and let pass: only records prove another writer.
func (r *runner) checkGap(ctx context.Context, from, to int64) error {
	heads, err := r.out.Heads(ctx, from, to)
	if err != nil {
		r.log.Warn("could not read the offsets between the stage's own output records", "from", from, "to", to, "err", err)
		return nil
	}
	pid, _ := r.prod.ProducerID()
	if h, ok := foreignBatch(heads, pid); ok {
		return r.otherWriter(max(from, h.BaseOffset), min(to, h.LastOffset+1))
	}
	r.log.Info("only transaction markers between the stage's own output records (a transaction coordinator wrote a commit's markers again)", "from", from, "to", to, "batches", len(heads))
	return nil
}

// foreignBatch returns the first record batch of heads that is neither a
// transaction marker nor producer pid's.
func foreignBatch(heads []fetch.BatchHead, pid int64) (fetch.BatchHead, bool) {
	for _, h := range heads {
		if !h.Control && h.ProducerID != pid {
			return h, true
		}
	}
	return fetch.BatchHead{}, false
}

// otherWriter is the error a stage stops with when another producer's
// records lie at [from, to) of its output partition.
func (r *runner) otherWriter(from, to int64) error {
	id := r.j.cfg.Job.ID
	return fatalf("%w: output %s/%d holds records at offsets %d to %d that stage %d of job %q did not write, between records it did: "+
		"another producer writes to this partition (another job with a different job.id and the same output topic, for example "+
		"a rolling update that changed job.id while instances under the old id still run), so keys emitted by both repeat. "+
		"The open cycle was aborted. Stop every other writer of %q (instances under another job.id: all of them), then start this job again: "+
		"it restores the keys of those records from the output",
		ErrOtherWriter, r.j.cfg.Output.Topic, r.p, from, to-1, r.p, id, r.j.cfg.Output.Topic)
}
