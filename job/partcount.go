package job

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The partition count N of a job is fixed per job id (docs/scaling.md):
// a key's partition, and so the store that remembers it, depends on N. Every
// input offset a stage commits carries N in its metadata; Run refuses to
// start when the committed offsets name another N than the topics have now,
// and Migrate is the way to change it.

// offsetMetaPrefix starts the metadata committed with every input offset.
const offsetMetaPrefix = "dedupstream partitions="

// offsetMeta is the metadata committed with the input offsets of a job
// whose stages' topics have n partitions and which writes output topic
// output, whose partition holds the stage's output up to next (exclusive;
// -1: not known, as after a migration), with the stage's generation marks
// (marks.go, of generations spanMs long; none on processing time, kept by
// a migration): "dedupstream partitions=N output=TOPIC@NEXT
// marks=SPAN:G@O,G@O". Topic names hold neither spaces nor '@'.
func offsetMeta(n int, output string, next int64, marks genMarks, spanMs int64) string {
	s := offsetMetaPrefix + strconv.Itoa(n) + " output=" + output
	if next >= 0 {
		s += "@" + strconv.FormatInt(next, 10)
	}
	// Kafka's default offset.metadata.max.bytes is 4096: 65 marks (64
	// generations) of the largest numbers and a 249-byte topic stay under
	// it, this only guards the bound (the oldest marks go first; a restore
	// then reads the oldest generations by their timestamps, as before the
	// marks).
	for len(marks) > 1 && len(s)+marks.fieldLen(spanMs) > maxOffsetMetaLen {
		marks = marks[1:]
	}
	return marks.appendField(s, spanMs)
}

// maxOffsetMetaLen bounds the metadata offsetMeta writes.
const maxOffsetMetaLen = 4000

// offsetMetadata is what the metadata of a committed input offset says.
type offsetMetadata struct {
	partitions int      // 0: none recorded (an older build, another tool)
	output     string   // "": not recorded (an older build)
	outputNext int64    // -1: not recorded
	marks      genMarks // nil: not recorded (an older build, a migration before it kept them)
	marksSpan  int64    // the marks' generation span, ms
}

// parseOffsetMeta reads the metadata of a committed input offset.
func parseOffsetMeta(s string) offsetMetadata {
	m := offsetMetadata{outputNext: -1}
	rest, ok := strings.CutPrefix(s, offsetMetaPrefix)
	if !ok {
		return m
	}
	count, out, _ := strings.Cut(rest, " ")
	if n, err := strconv.Atoi(count); err == nil && n > 0 {
		m.partitions = n
	}
	out, more, _ := strings.Cut(out, " ")
	if v, ok := strings.CutPrefix(more, marksField); ok {
		m.marks, m.marksSpan = parseMarks(v)
	}
	if out, ok = strings.CutPrefix(out, "output="); ok {
		topic, next, hasNext := strings.Cut(out, "@")
		m.output = topic
		if n, err := strconv.ParseInt(next, 10, 64); hasNext && err == nil && n >= 0 {
			m.outputNext = n
		}
	}
	return m
}

// ErrPartitionCount reports that the topics' partition count differs from
// the one the job's committed offsets were recorded with. It wraps
// ErrTopics: the CLI exits 2.
var ErrPartitionCount = fmt.Errorf("%w: the partition count changed", ErrTopics)

// recordedPartitions returns the partition count recorded with the group's
// committed offsets of the stages' input topics, reading partitions
// [0, n); 0 when none is recorded. Offsets recording different counts are
// an error (a migration interrupted half-way).
func (j *Job) recordedPartitions(ctx context.Context, n int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	topics, err := j.groupOffsets(ctx, n)
	if err != nil {
		return 0, fmt.Errorf("job: %w", err)
	}
	recorded := 0
	for t, ps := range topics {
		for _, op := range ps {
			if op.Error != nil || op.CommittedOffset < 0 {
				continue
			}
			m := parseOffsetMeta(op.Metadata).partitions
			if m == 0 {
				continue
			}
			if recorded != 0 && m != recorded {
				return 0, fmt.Errorf("%w: the committed offsets of group %q record both %d and %d partitions (%s/%d): a migration did not finish; run dedupstream migrate again",
					ErrPartitionCount, j.cfg.Job.ID, recorded, m, t, op.Partition)
			}
			recorded = m
		}
	}
	return recorded, nil
}

// checkPartitionCount refuses to run when the committed offsets record
// another partition count than the topics have (n).
func (j *Job) checkPartitionCount(ctx context.Context, n int) error {
	recorded, err := j.recordedPartitions(ctx, n)
	if err != nil || recorded == 0 || recorded == n {
		return err
	}
	return fmt.Errorf("%w: input.topics: job %q committed its offsets with %d partitions, the topics %v now have %d: "+
		"keys moved to other partitions and their state did not, so repeats would pass. Stop every instance and run "+
		"`dedupstream migrate --config FILE` (it builds each partition's state from the output's window under %d partitions; see docs/scaling.md), "+
		"give the topics %d partitions again, or start under a new job.id",
		ErrPartitionCount, j.cfg.Job.ID, recorded, j.topics, n, n, recorded)
}

// checkStatePartitions refuses a store laid out for another partition count
// than the topics have: its keys belong to other partitions now.
func (r *runner) checkStatePartitions(ck Checkpoint) error {
	if err := r.checkStateOwner(ck); err != nil {
		return err
	}
	if ck.Partitions == 0 || ck.Partitions == r.lay.partitions {
		return nil
	}
	return fatalf("%w: state %s was built for %d partitions, the topics now have %d: run `dedupstream migrate --config FILE` "+
		"with every instance stopped (it rebuilds the state under %d partitions; see docs/scaling.md), or remove the state directory and start under a new job.id",
		ErrPartitionCount, r.j.stateDir(r.p), ck.Partitions, r.lay.partitions, r.lay.partitions)
}

// checkOpenedState refuses, right after the stage opened, a store built
// for another partition count (the check recover repeats for stages that
// start later, after a rebalance) or one a migrate did not finish
// (statedir.go).
func (r *runner) checkOpenedState() error {
	if err := checkNotMigrating(r.j.cfg.State.Dir, r.p); err != nil {
		return err
	}
	ck, err := DecodeCheckpoint(r.stage.State().Checkpoint)
	if err != nil {
		return fatalf("state %s: %w", r.j.stateDir(r.p), err)
	}
	return r.checkStatePartitions(ck)
}

// startGate holds the stages that start together back until every one of
// them has opened its state and checked the partition count it was built
// for. Without it, when one store refuses (it was built for another count
// and the group's offsets that would have refused first have expired),
// the stages of the new partitions, whose stores are empty and pass, could
// commit a cycle of replays as new keys before the refusal stops the job.
//
// A stage that failed is recorded before it counts as done: the context
// the failure cancels reaches the others later (runStages cancels it once
// the failed stage returned), so a stage released by the last pass would
// otherwise go on while the refusal is on its way (seen as recoveries of
// the new partitions in TestPartitionCountChange under load).
type startGate struct {
	wg     sync.WaitGroup
	failed atomic.Bool   // set before the failed stage's Done
	open   chan struct{} // closed once every stage passed or failed
}

func newStartGate(stages int) *startGate {
	g := &startGate{open: make(chan struct{})}
	g.wg.Add(stages)
	go func() {
		g.wg.Wait()
		close(g.open)
	}()
	return g
}

// pass reports one stage's check (ok false: it failed) and, when ok, waits
// for the others; it reports whether the stage may go on. A failing stage
// cancels ctx (runStages), which releases the others with false. A nil
// gate lets every stage go.
func (g *startGate) pass(ctx context.Context, ok bool) bool {
	if g == nil {
		return ok
	}
	if !ok {
		g.failed.Store(true)
	}
	g.wg.Done()
	if !ok {
		return false
	}
	select {
	case <-g.open:
		return ctx.Err() == nil && !g.failed.Load()
	case <-ctx.Done():
		return false
	}
}
