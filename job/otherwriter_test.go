package job_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runningOn produces recs, starts the job on every partition and waits
// until it committed them.
func (e *env) runningOn(recs []*kgo.Record) (*config.Config, *running) {
	e.t.Helper()
	e.produce(recs)
	cfg := e.config("0, 1, 2, 3")
	r := e.start(cfg)
	e.waitCommitted(r, 1, 60*time.Second)
	return cfg, r
}

// freshKeys produces n records of new business keys (named after tag) to
// raw partition p: the stage that reads it must emit them, so it writes
// to its output partition again.
func (e *env) freshKeys(p int32, n int, tag string) {
	e.t.Helper()
	recs := make([]*kgo.Record, n)
	for i := range recs {
		id := fmt.Sprintf("fresh-%s-%d-%d", tag, p, i)
		recs[i] = &kgo.Record{Topic: e.raw, Partition: p, Key: []byte(id), Value: fmt.Appendf(nil, `{"order_id":%q}`, id)}
	}
	e.produce(recs)
}

// trickle produces recs in chunks of 200, 20ms apart, until they run out or
// the returned func is called, which waits for the producing to end (the
// test's cleanup calls it too).
func (e *env) trickle(recs []*kgo.Record) (end func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for len(recs) > 0 {
			n := min(200, len(recs))
			if err := e.prod.Produce(e.ctx(30*time.Second), recs[:n]); err != nil {
				e.t.Error(err)
				return
			}
			recs = recs[n:]
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	end = sync.OnceFunc(func() { close(stop); wg.Wait() })
	e.t.Cleanup(end)
	return end
}

// TestOtherWriterStopsTheJob: a record another producer appends to an
// output partition between the stage's own stops the job with
// ErrOtherWriter before its next commit, naming the foreign offsets, and
// nothing of the cycle that found it is committed. The foreign record's
// offset comes from kgo's acknowledgement, the committed output from an
// independent read_committed reader.
func TestOtherWriterStopsTheJob(t *testing.T) {
	e := newEnv(t)
	w := e.workload(41, 6_000, 2_000)
	third := len(w.Records) / 3
	_, r := e.runningOn(w.Records[:third])

	endFeed := e.trickle(w.Records[third:])
	time.Sleep(200 * time.Millisecond) // the job runs cycles
	cl := kafkatest.NewClient(t, e.brokers, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	foreign := &kgo.Record{Topic: e.out, Partition: 2, Key: []byte("hand-written"), Value: []byte(`{"order_id":"by-hand"}`)}
	if err := cl.ProduceSync(e.ctx(10*time.Second), foreign).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// Stage 2 must write again to meet the gap, whatever the trickle
	// still holds for it (its last records are replays, which emit
	// nothing).
	e.freshKeys(2, 50, "after")
	err := r.wait(t, 60*time.Second)
	if !errors.Is(err, job.ErrOtherWriter) {
		t.Fatalf("job stopped with %v, want ErrOtherWriter", err)
	}
	// The foreign offset lies in the named range of partition 2.
	var from, to int64
	msg := err.Error()
	i := strings.Index(msg, fmt.Sprintf("output %s/2 holds records at offsets ", e.out))
	if i < 0 {
		t.Fatalf("error does not name output partition 2: %v", err)
	}
	if _, serr := fmt.Sscanf(msg[i+len(fmt.Sprintf("output %s/2 holds records at offsets ", e.out)):], "%d to %d", &from, &to); serr != nil {
		t.Fatalf("error has no offset range: %v (%v)", err, serr)
	}
	if foreign.Offset < from || foreign.Offset > to {
		t.Errorf("foreign record at offset %d, the error names %d to %d", foreign.Offset, from, to)
	}
	endFeed()

	// No record of the job committed after the foreign one in its
	// partition: the cycle that met it was aborted, and the job stopped.
	out, _ := e.readOutput()
	for _, rec := range out {
		if rec.Partition == 2 && rec.Offset > foreign.Offset {
			t.Errorf("job record committed at %d/%d, after the foreign record at %d", rec.Partition, rec.Offset, foreign.Offset)
		}
	}
	t.Logf("stopped with: %v", err)
}

// TestTwoJobIDsOneOutput: a second job with another job.id and the same
// input and output (a rolling update that changed job.id while the old
// instances run) is noticed by one of the two within a few cycles of both
// writing: it stops with ErrOtherWriter.
func TestTwoJobIDsOneOutput(t *testing.T) {
	e := newEnv(t)
	w := e.workload(43, 8_000, 2_000)
	quarter := len(w.Records) / 4
	_, a := e.runningOn(w.Records[:quarter])

	e.jobID = kafkatest.TopicName("orders-dedup-renamed")
	cfgB := e.config("0, 1, 2, 3")
	cfgB.State.Dir += "-renamed"
	b := e.start(cfgB)

	e.trickle(w.Records[quarter:])
	var errA, errB error
	deadline := time.After(90 * time.Second)
	for errA == nil && errB == nil {
		select {
		case errA = <-a.done:
			a.done <- errA
		case errB = <-b.done:
			b.done <- errB
		case <-time.After(2 * time.Second):
			// Keep both writing until one meets the other's records.
			for p := range int32(partitions) {
				e.freshKeys(p, 20, fmt.Sprint(time.Now().UnixNano()))
			}
		case <-deadline:
			t.Fatalf("two jobs wrote %s for 90s and neither stopped (stats A %+v, B %+v)", e.out, a.job.Stats(), b.job.Stats())
		}
	}
	for name, err := range map[string]error{"A": errA, "B": errB} {
		if err != nil && !errors.Is(err, job.ErrOtherWriter) {
			t.Errorf("job %s stopped with %v, want ErrOtherWriter", name, err)
		}
	}
	t.Logf("A: %v; B: %v", errA, errB)
}
