package job

import (
	"math"
	"strconv"
	"strings"

	"github.com/dedupstream/dedupstream/pipeline"
)

// Generation marks: where in the output the stage clock entered each live
// generation. The committed input offsets carry them in their metadata
// (offsetMeta), in the transaction that carries the output, so the output
// and its marks are committed together; the store's checkpoint keeps a
// copy (Checkpoint.Marks), which a recovery takes when the offsets carry
// none (storeMarks).
//
// Why: on record time the stage clock is the largest timestamp of the
// records decided so far, those dead-lettered and those dropped as repeats
// included, and a key is remembered from the clock's generation when it was
// emitted. A restore that knows only the output files each key by the clock
// the output's own timestamps show, which misses the moves of records not
// in it: a late record (stamped before the clock) emitted after such a move
// was filed generations too early, or left out of a new store's restore
// altogether (it lies before the first record stamped inside the window),
// and its replay passed (TestRestoreWindowLateRecords,
// TestRestoreTailLateRecords). With the marks a restore starts at the
// first output record of the oldest live generation and moves the clock to
// each mark's generation as it reads past it.
//
// A mark is taken per record: the first output record emitted in a newer
// generation than the last mark's (pipeline.Stage.GenStarts) marks its own
// offset, the cycle's first offset plus its index among the cycle's output
// (known once the produce is acknowledged, or before when the stage knows
// where its records land, ownTail). Every output record at or after it was
// emitted in that generation or a later one, every record before it in an
// older one, so each record was emitted in the generation of the newest
// mark at or before it (a cycle whose first offset is not known and that
// entered a generation is run again rather than left unmarked). A restore
// files each read batch at the generation of its newest mark (and of its
// newest timestamp, as before, but never past the end of its mark's
// generation: emitTimes), as it always filed a batch at its newest clock. A mark per cycle was not enough: a backlog's
// cycle spans many generations, and its whole output then counted as
// emitted in the last one, keys long expired in the store restored live
// (TestRestoreWindow, "restored 4000 output records, want the 3000 inside
// the window"). Marks of generations no longer live are dropped: at most
// Generations + 1 remain.
//
// The copy in the store's checkpoint is for offsets committed without
// metadata: reset with the Kafka tooling to replay the input
// (docs/scaling.md), or lost with the group's offsets
// (offsets.retention.minutes). Without it the marks were gone from then
// on: a replay run that emits nothing has no marks of its own to commit,
// and a store rebuilt later (a disk lost) restored by the output's
// timestamps alone and left a late key out (TestOffsetResetLateRecords).
// With it the recovery takes the store's marks and the next commit writes
// them back with the offsets.

// GenMark says that the output records from offset Offset on were emitted
// with the stage clock in generation Gen or later.
type GenMark struct {
	Gen    uint64
	Offset int64
}

// genMarks are the marks of the live generations, oldest first: both
// generations and offsets increase.
type genMarks []GenMark

// note returns m with a mark of gen at off added if gen is newer than the
// last mark's generation (m is not modified).
func (m genMarks) note(gen uint64, off int64) genMarks {
	if n := len(m); n > 0 && gen <= m[n-1].Gen {
		return m
	}
	return append(m[:len(m):len(m)], GenMark{gen, off})
}

// live returns the marks of generations oldest and newer: every mark
// before the first of them names output emitted in generations that have
// expired. (m shares its array with the result.)
func (m genMarks) live(oldest uint64) genMarks {
	for i, k := range m {
		if k.Gen >= oldest {
			return m[i:]
		}
	}
	return nil
}

// genAt returns the generation the output record at offset off was
// emitted in at the earliest, from the newest mark at or before it; false
// when off is before every mark.
func (m genMarks) genAt(off int64) (uint64, bool) {
	for i := len(m) - 1; i >= 0; i-- {
		if m[i].Offset <= off {
			return m[i].Gen, true
		}
	}
	return 0, false
}

// inSpan returns m, of generations fromMs long, as marks of generations
// toMs long (m itself when the spans agree; nil when a generation's start
// does not fit in Unix milliseconds, which no mark this build wrote has).
// A mark of generation g says that the output from its offset on was
// emitted with the clock at g × fromMs or later; the generation of that
// time in the new span, rounded down, says no more than that. Read as they
// stand, the old numbers would name another time, and moving the clock
// there could move it far ahead of every record; dropped, a store rebuilt
// under the new span (dedup.window / dedup.generations changed: the old
// stores are removed) forgot the late keys the marks exist for
// (TestSpanChangeLateRecords). Marks that fall into one new generation
// keep the first: its offset is where that generation's output begins.
func (m genMarks) inSpan(fromMs, toMs int64) genMarks {
	if fromMs == toMs || len(m) == 0 {
		return m
	}
	var out genMarks
	for _, k := range m {
		if fromMs <= 0 || toMs <= 0 || k.Gen > uint64(math.MaxInt64/fromMs) {
			return nil
		}
		out = out.note(uint64(int64(k.Gen)*fromMs/toMs), k.Offset)
	}
	return out
}

// storeMarks returns the marks a store's checkpoint ck keeps, in
// generations spanMs long, for a recovery whose committed offsets carry
// none, and the output offset up to which they are known
// (runner.marksEnd; math.MaxInt64 with no marks).
//
// They are trusted as far as the keys beside them, which the stage uses
// as they stand: only a checkpoint of this output topic counts (a store of
// another is refused before, stateowner.go; one that names none holds no
// marks), the refusal of a store ahead of the output keeps them from
// naming offsets of another log, and only the marks of the output the
// store had seen are taken, those before its output offset: records after
// it (a crash between the transaction's commit and the store's; a
// checkpoint written during a restore carries committed marks of output
// it had not read yet) were emitted in generations the store cannot vouch
// for, so the restore reads them by their timestamps, as without marks,
// and notes marks for them from the same times (tailMarks), so that the
// marks written back claim nothing more for them than that. Marks of
// another span are read in the span in force (inSpan), as the offsets'
// are; those of expired generations go with the next commit (cycleMarks).
func storeMarks(ck Checkpoint, output string, spanMs int64) (genMarks, int64) {
	if ck.OutputTopic != output {
		return nil, math.MaxInt64
	}
	m := genMarks(ck.Marks)
	n := 0
	for n < len(m) && m[n].Offset < ck.Output {
		n++
	}
	if m = m[:n].inSpan(ck.MarksSpan, spanMs); len(m) == 0 {
		return nil, math.MaxInt64
	}
	return m, ck.Output
}

// committedMarks returns, among the metadata committed with a stage's
// input offsets (one per raw topic), the one with the newest marks; false
// when none carries marks. Every commit writes the same metadata with every
// input's offset, but an input taken out of input.topics keeps that of the
// last commit that included it: put back (first in the list, say), its
// older marks were read as covering the whole output, bounded the time of
// every record emitted since by the end of their newest generation, hours
// early, and a key emitted meanwhile expired at once in a store rebuilt
// from the output (TestRawTopicReadded). Marks grow only at their end, so
// the newest mark's offset orders them, then the output's end committed
// with them.
func committedMarks(meta []string) (offsetMetadata, bool) {
	var best offsetMetadata
	found := false
	for _, m := range meta {
		om := parseOffsetMeta(m)
		if len(om.marks) == 0 {
			continue
		}
		if !found || om.marks.newerThan(best.marks) ||
			!best.marks.newerThan(om.marks) && om.outputNext > best.outputNext {
			best, found = om, true
		}
	}
	return best, found
}

// liveStart returns the offset where the output of m's live generations
// (under pc's window) begins if that is before from, else from. It may be
// before the first record stamped inside the window: a late record
// emitted after a record that is not in the output moved the clock.
func (m genMarks) liveStart(pc *pipeline.Config, from int64) int64 {
	if n := len(m); n > 0 {
		if live := m.live(pc.OldestLive(m[n-1].Gen)); len(live) > 0 && live[0].Offset < from {
			return live[0].Offset
		}
	}
	return from
}

// newerThan reports whether m holds a newer mark than every mark of o
// (true when o has none): marks grow only at their end.
func (m genMarks) newerThan(o genMarks) bool {
	switch {
	case len(m) == 0:
		return false
	case len(o) == 0:
		return true
	}
	return m[len(m)-1].Offset > o[len(o)-1].Offset
}

// marksField is the metadata field holding the marks with the generation
// span they count in, in milliseconds: "marks=SPAN:G@O,G@O". Marks of
// another span (dedup.window / dedup.generations changed) are read in the
// span in force through inSpan.
const marksField = "marks="

// fieldLen is the length appendField adds for m with span spanMs.
func (m genMarks) fieldLen(spanMs int64) int {
	if len(m) == 0 {
		return 0
	}
	n := 1 + len(marksField) + len(strconv.FormatInt(spanMs, 10)) + 1 + len(m) - 1
	for _, k := range m {
		n += len(strconv.FormatUint(k.Gen, 10)) + 1 + len(strconv.FormatInt(k.Offset, 10))
	}
	return n
}

// appendField appends m, of generations spanMs long, as a metadata field
// (nothing when m is empty).
func (m genMarks) appendField(s string, spanMs int64) string {
	if len(m) == 0 {
		return s
	}
	b := []byte(s + " " + marksField)
	b = strconv.AppendInt(b, spanMs, 10)
	b = append(b, ':')
	for i, k := range m {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, k.Gen, 10)
		b = append(b, '@')
		b = strconv.AppendInt(b, k.Offset, 10)
	}
	return string(b)
}

// parseMarks reads the value of a marks field: the marks and their span;
// nil when it is not one this build wrote (a positive span, generations
// and offsets increasing), so that a restore then falls back to the
// output's timestamps.
func parseMarks(v string) (genMarks, int64) {
	sp, v, ok := strings.Cut(v, ":")
	span, err := strconv.ParseInt(sp, 10, 64)
	if !ok || err != nil || span <= 0 || v == "" {
		return nil, 0
	}
	var m genMarks
	for f := range strings.SplitSeq(v, ",") {
		g, o, ok := strings.Cut(f, "@")
		gen, err1 := strconv.ParseUint(g, 10, 64)
		off, err2 := strconv.ParseInt(o, 10, 64)
		if !ok || err1 != nil || err2 != nil || off < 0 {
			return nil, 0
		}
		if n := len(m); n > 0 && (gen <= m[n-1].Gen || off < m[n-1].Offset) {
			return nil, 0
		}
		m = append(m, GenMark{gen, off})
	}
	return m, span
}
