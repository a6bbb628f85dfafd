package job_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/internal/testhook"
	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kgo"
)

// barrier lets n goroutines pass only together, or after timeout.
type barrier struct {
	wg      sync.WaitGroup
	timeout time.Duration
}

func newBarrier(n int, timeout time.Duration) *barrier {
	b := &barrier{timeout: timeout}
	b.wg.Add(n)
	return b
}

func (b *barrier) arrive() {
	b.wg.Done()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(b.timeout):
	}
}

// TestFirstStartRace: two instances of a new job start at the same moment,
// one seeing 4 partitions, the other 6 (an operator grew the topics in
// between). Both find the partitions topic empty (a barrier holds each
// until the other has read it) and both write their claim, again held
// together. Exactly one may run; the other must refuse (exit 2), and the
// first claim, read with kgo, must hold the runner's layout. Writers that
// trust their own claim without reading the topic back both run.
func TestFirstStartRace(t *testing.T) {
	e := newEnv(t)
	raw6, out6 := e.topic("orders-raw6", 6), e.topic("orders6", 6)
	cfg4 := e.config("0, 1, 2, 3")
	cfg6 := e.config("0, 1, 2, 3, 4, 5")
	cfg6.Input.Topics, cfg6.Output.Topic = []string{raw6}, out6
	cfg6.State.Dir += "-6"

	missing, claim := newBarrier(2, 20*time.Second), newBarrier(2, 5*time.Second)
	hooks := func() func(*job.Options) {
		var m, c sync.Once
		return func(o *job.Options) {
			testhook.Set(o, testhook.Hooks{Failpoint: func(name string) {
				switch name {
				case testhook.JobRecordMissing:
					m.Do(missing.arrive)
				case testhook.JobRecordClaim:
					c.Do(claim.arrive)
				}
			}})
		}
	}
	r4, r6 := e.start(cfg4, hooks()), e.start(cfg6, hooks())

	var refusedN, runningN int
	var running *running
	select {
	case err := <-r4.done:
		r4.done <- err
		refusedN, runningN, running = 4, 6, r6
		checkRaceRefusal(t, err)
	case err := <-r6.done:
		r6.done <- err
		refusedN, runningN, running = 6, 4, r4
		checkRaceRefusal(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("both instances run the job, one under 4 partitions and one under 6")
	}
	// The other runs: it must not exit with an error of its own.
	select {
	case err := <-running.done:
		running.done <- err
		t.Fatalf("the instance with %d partitions exited too: %v", runningN, err)
	case <-time.After(3 * time.Second):
	}
	e.stop(running)
	t.Logf("the instance with %d partitions runs, the one with %d refused", runningN, refusedN)

	// The layout in force, read independently: the first claim in the
	// log (no plain record precedes it in a new job's topic) must hold the
	// runner's count and output topic, the two together.
	cl := kafkatest.NewClient(t, e.brokers, append(e.clientOpts[:len(e.clientOpts):len(e.clientOpts)],
		kgo.ConsumeTopics(job.PartitionsTopic(e.jobID)), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	var first *kgo.Record
	ctx := e.ctx(30 * time.Second)
	for first == nil {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("read the partitions topic: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case first != nil:
			case strings.HasPrefix(string(r.Key), "claim-"):
				first = r
			default:
				t.Errorf("offset %d: record %q=%q before any claim in a new job's topic", r.Offset, r.Key, r.Value)
			}
		})
	}
	claimed := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(first.Value)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		claimed[k] = v
	}
	wantOut := map[int]string{4: cfg4.Output.Topic, 6: cfg6.Output.Topic}[runningN]
	if want := strconv.Itoa(runningN); claimed["partitions"] != want || claimed["output"] != wantOut {
		t.Errorf("the first claim (offset %d) records %q, the running instance runs with %s partitions and output %q",
			first.Offset, first.Value, want, wantOut)
	}
}

func checkRaceRefusal(t *testing.T, err error) {
	t.Helper()
	// The two instances differ in partition count and in output topic (one
	// per count), so the loser may meet either record of the winner first:
	// on a real cluster it met the output record (CI, 3 brokers); both are
	// the partitions topic's refusal (exit 2).
	countRefused := errors.Is(err, job.ErrPartitionCount)
	outputRefused := errors.Is(err, job.ErrTopics) && strings.Contains(err.Error(), "output.topic:")
	if !(countRefused || outputRefused) || !strings.Contains(err.Error(), "records that job") {
		t.Fatalf("want the partitions topic's refusal (partition count or output), got %v", err)
	}
	t.Logf("refused with: %v", err)
}
