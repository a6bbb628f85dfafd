package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/dedupstream/dedupstream/fetch"
)

// An operator may grow a topic while the job runs (kafka-topics --alter
// --partitions). The start-up checks (partcount.go, partrecord.go) cannot
// see that, and producers that learn the new count route keys to other
// partitions at once: a key emitted on partition p arrives again on q,
// whose store never saw it, and the replay passes. So the partition counts
// the job started with are a condition of every commit: before a stage
// ends a transaction with EndTxn(commit), a Metadata request sent after
// the cycle's last fetch (so after any record in it was written) must
// still find them. A changed count aborts the cycle and stops the job with
// ErrPartitionCount (exit 2) naming `dedupstream migrate`; nothing routed
// under the new count is committed. The checks of concurrent stages share
// one request, and a watcher repeats it between commits so that an idle
// job stops too. The only window left is the brokers' own metadata
// propagation: a broker that has not yet learnt the new count (KRaft:
// milliseconds) answers with the old one.
//
// Why an answer is never reused from before the cycle's last fetch, not
// even for a few milliseconds: a check that started at time S and found
// the old counts proves only that records written before S were routed
// under them. A producer may learn of a topic grown just after S and write
// a key to its new partition before this stage's last fetch; an answer
// older than that fetch would commit the record, the repeat the guard
// exists to refuse. Any cache bound B > 0 opens exactly that window (B plus
// the propagation above). Nor is there much to save: the request costs the
// client 70-90 us of CPU (BenchmarkPartitionCounts, three topics, load
// ~20), one per commit shared by the stages that commit together and sent
// while the produces are flushed; in the e2e profiles it took no sample
// (under 10 ms in three 400k-record runs of about 100 cycles each), while
// the same runs spent 3.2-4.2 s in the job. See docs/benchmarks.md,
// "Fetch buffers sized once".

// The DLQ topic is watched too, for another reason: stage p writes its DLQ
// records to DLQ partition p modulo the count found at start. A DLQ topic
// deleted and created again with fewer partitions (a tool's default of one)
// left the stages whose DLQ partition was gone retrying AddPartitionsToTxn
// for good, their input stalled behind the next bad record with no word of
// why, until someone restarted the job. A DLQ that lost partitions stops
// the job (exit 1) naming the counts; the next start spreads the DLQ
// records over the new count. A DLQ missing from the metadata is left to
// the producer, as before: the partitions without bad records go on
// (TestDLQDeletedWhileRunning), and one grown changes nothing.

// defaultTopicWatchEvery is how often a running job reads its topics'
// partition counts when no commit asked.
const defaultTopicWatchEvery = 30 * time.Second

// topicGuard holds the partition counts a job started with and checks that
// they still hold.
type topicGuard struct {
	j     *Job
	want  map[string]int // topic -> partitions at start
	names []string
	dlq   string // the DLQ topic, watched only for partitions lost

	mu       sync.Mutex
	okSince  time.Time   // start of the newest check that found want
	inflight *guardCheck // nil when none runs
	failed   error       // a changed count: final
}

type guardCheck struct {
	start time.Time
	done  chan struct{}
	err   error
}

// newTopicGuard guards the counts of lay: the stages' input topics and the
// output topic (lay.partitions), and in repartition mode the raw topics.
func newTopicGuard(j *Job, lay layout) *topicGuard {
	g := &topicGuard{j: j, want: map[string]int{j.cfg.Output.Topic: lay.partitions}}
	for _, t := range j.topics {
		g.want[t] = lay.partitions
	}
	for t, n := range lay.raw {
		g.want[t] = n
	}
	if _, ok := g.want[j.cfg.Output.DLQTopic]; !ok && lay.dlqPartitions > 0 {
		g.dlq, g.want[j.cfg.Output.DLQTopic] = j.cfg.Output.DLQTopic, lay.dlqPartitions
	}
	for t := range g.want {
		g.names = append(g.names, t)
	}
	slices.Sort(g.names)
	return g
}

// confirm returns nil once a check that started at or after since found the
// counts unchanged; the error of a changed count (fatal, wrapping
// ErrPartitionCount in input mode) or of a failed request (transient)
// otherwise. A nil guard confirms everything.
func (g *topicGuard) confirm(ctx context.Context, since time.Time) error {
	if g == nil {
		return nil
	}
	for {
		g.mu.Lock()
		if g.failed != nil {
			g.mu.Unlock()
			return g.failed
		}
		if !g.okSince.Before(since) {
			g.mu.Unlock()
			return nil
		}
		c := g.inflight
		if c == nil {
			c = &guardCheck{start: time.Now(), done: make(chan struct{})}
			g.inflight = c
			go g.run(ctx, c)
		}
		g.mu.Unlock()
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.err != nil && !c.start.Before(since) {
			return c.err // the check this call waited for failed
		}
		// A check begun before since ended: loop to begin a new one.
	}
}

// begin starts, without waiting, the check a later confirm(ctx, since)
// needs, so that its round trip overlaps the caller's own requests.
func (g *topicGuard) begin(ctx context.Context, since time.Time) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed == nil && g.okSince.Before(since) && g.inflight == nil {
		c := &guardCheck{start: time.Now(), done: make(chan struct{})}
		g.inflight = c
		go g.run(ctx, c)
	}
}

// run performs check c and publishes its outcome.
func (g *topicGuard) run(ctx context.Context, c *guardCheck) {
	// A broker that does not answer (a restart, a moving leader) is asked
	// again a few times before the commit waiting for it gives up.
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(g.j.opts.RequestTimeout, 5*time.Second))
		var counts map[string]int
		counts, err = fetch.PartitionCounts(rctx, g.j.client, g.names, g.j.cfg.Kafka.ClientID)
		cancel()
		if err != nil {
			err = fmt.Errorf("check the topics' partition counts: %w", err)
			continue
		}
		if err = g.compare(counts); err == nil || errors.As(err, new(*fatalError)) {
			break
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c.err = err
	g.inflight = nil
	var fe *fatalError
	switch {
	case err == nil:
		if c.start.After(g.okSince) {
			g.okSince = c.start
		}
	case errors.As(err, &fe):
		g.failed = err
	}
	close(c.done)
}

// compare returns the fatal error of a count that differs from the one at
// start; a topic missing from the answer is left to the fetchers and the
// producer (a deleted topic fails them), and counted as transient here.
func (g *topicGuard) compare(counts map[string]int) error {
	j := g.j
	var (
		missing []error
		grown   []string // "topic a -> b" of a stage input or the output
		raw     []string // the same of a raw topic in repartition mode
		dlqLost string   // the same of the DLQ topic with fewer partitions
	)
	for _, t := range g.names {
		n, ok := counts[t]
		switch {
		case t == g.dlq:
			if ok && n < g.want[t] {
				dlqLost = fmt.Sprintf("%q %d -> %d", t, g.want[t], n)
			}
		case !ok:
			missing = append(missing, fmt.Errorf("check the topics' partition counts: topic %q is not in the metadata", t))
		case n == g.want[t]:
		case j.cfg.Input.Partitioning == "repartition" && t != j.cfg.Output.Topic && t != j.topics[0]:
			raw = append(raw, fmt.Sprintf("%q %d -> %d", t, g.want[t], n))
		default:
			grown = append(grown, fmt.Sprintf("%q %d -> %d", t, g.want[t], n))
		}
	}
	switch {
	case len(grown) > 0:
		return fatalf("%w: partition counts changed while job %q ran (%s): producers now route keys to other partitions and their state "+
			"did not follow, so repeats would pass; the job stopped before committing any record read since. Stop every instance, give the raw topics, "+
			"the output topic %q (and in repartition mode %q) the same count, and run `dedupstream migrate --config FILE` on every instance (docs/scaling.md), "+
			"or keep the old count under a new job.id",
			ErrPartitionCount, j.cfg.Job.ID, strings.Join(grown, ", "), j.cfg.Output.Topic, RepartitionTopic(j.cfg))
	case len(raw) > 0:
		return fatalf("input.topics: raw topics grew while job %q ran (%s): the route step reads only the partitions it found at start; "+
			"start the job again to route the new ones (in repartition mode raw topics need no migration)", j.cfg.Job.ID, strings.Join(raw, ", "))
	case dlqLost != "":
		return fatalf("output.dlq_topic: the DLQ topic lost partitions while job %q ran (%s): the stages whose DLQ partition is gone cannot commit a cycle with a bad record; "+
			"the job stopped with nothing of such a cycle committed, and its next start spreads the DLQ records over the partitions the topic has now", j.cfg.Job.ID, dlqLost)
	}
	return errors.Join(missing...)
}

// watch checks the counts every interval until ctx ends, and calls stop
// with the error when one changed.
func (g *topicGuard) watch(ctx context.Context, every time.Duration, stop func(error)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := g.confirm(ctx, time.Now())
		var fe *fatalError
		if errors.As(err, &fe) {
			g.j.log.Error("stopping: a topic's partition count changed while the job ran", "err", err)
			stop(err)
			return
		}
		if err != nil && ctx.Err() == nil {
			g.j.log.Warn("checking the topics' partition counts failed; the next commit or check tries again", "err", err)
		}
	}
}

// topicWatchEvery is the watcher's interval.
func (o *Options) topicWatchEvery() time.Duration {
	if o.hooks.TopicWatchEvery > 0 {
		return o.hooks.TopicWatchEvery
	}
	return defaultTopicWatchEvery
}

// guardTopics makes the guard of lay's counts and starts its watcher: the
// returned context ends, with the guard's error as its cause, when a count
// changes.
func (j *Job) guardTopics(ctx context.Context, lay layout) (context.Context, context.CancelCauseFunc) {
	j.guard = newTopicGuard(j, lay)
	ctx, stop := context.WithCancelCause(ctx)
	go j.guard.watch(ctx, j.opts.topicWatchEvery(), stop)
	return ctx, stop
}

// guardStopped returns err, or when the run ended without one because the
// guard stopped it, the guard's error.
func guardStopped(ctx context.Context, err error) error {
	var fe *fatalError
	if cause := context.Cause(ctx); err == nil && errors.As(cause, &fe) {
		return cause
	}
	return err
}

// reported tells whether err is the guard's error of a changed count and
// one of errs already carries it.
func (g *topicGuard) reported(err error, errs []error) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	failed := g.failed
	g.mu.Unlock()
	if failed == nil || !errors.Is(err, failed) {
		return false
	}
	return slices.ContainsFunc(errs, func(e error) bool { return errors.Is(e, failed) })
}
