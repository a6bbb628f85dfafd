package job_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
	"github.com/dedupstream/dedupstream/statestore"
	"github.com/twmb/franz-go/pkg/kgo"
)

// groupConfig is the test config in assignment mode group, with its own
// state directory per instance name and timeouts short enough for a test.
func (e *env) groupConfig(name string, topics ...string) *config.Config {
	e.t.Helper()
	cfg := e.config("0", topics...)
	cfg.Assignment.Mode = "group"
	cfg.Assignment.Partitions = nil
	cfg.Assignment.SessionTimeout = 6 * time.Second
	cfg.Assignment.HeartbeatInterval = 300 * time.Millisecond
	cfg.Assignment.RebalanceTimeout = 15 * time.Second
	cfg.State.Dir += "-" + name
	// Memtables derived per generation: 256MiB / 6 / partitions owned.
	cfg.State.Memory, cfg.State.MemTableSize = 256<<20, 0
	return cfg
}

// checkMemTable checks that r's stores got the memtable size planned for
// the partitions its current generation owns.
func (e *env) checkMemTable(r *running) {
	e.t.Helper()
	n := r.job.Stats().Assigned
	want, _ := statestore.PlanMemTable(256<<20, 0, n)
	if got := gather(e.t, r.job.Collector()).get(e.t, "dedupstream_state_memtable_size_bytes"); got != float64(want) {
		e.t.Errorf("%d partitions owned: memtable size %v, want %d", n, got, want)
	}
}

// waitAssigned waits until the instances own all partitions between them,
// each owns at least one, and every stage is ready.
func (e *env) waitAssigned(timeout time.Duration, rs ...*running) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		total, ok := 0, true
		for _, r := range rs {
			s := r.job.Stats()
			total += s.Assigned
			ok = ok && s.Assigned > 0 && r.job.Ready()
		}
		if ok && total == partitions {
			return
		}
		if time.Now().After(deadline) {
			var st []string
			for _, r := range rs {
				s := r.job.Stats()
				st = append(st, fmt.Sprintf("%d assigned, %d ready", s.Assigned, s.Ready))
			}
			e.t.Fatalf("instances did not share the %d partitions within %v: %v", partitions, timeout, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGroupRebalance runs the job in group mode while instances join and
// leave: one instance, then two sharing the partitions, then the first
// leaves and the second takes everything over, restoring the moved
// partitions' state from the committed output. The output must stay
// exactly once throughout.
func TestGroupRebalance(t *testing.T) {
	e := newEnv(t)
	w := e.workload(11, 9_000, 2_500)
	chunks := slices.Collect(slices.Chunk(w.Records, 500))
	third := len(chunks) / 3
	feed := func(cs [][]*kgo.Record) {
		for _, c := range cs {
			e.produce(c)
			time.Sleep(10 * time.Millisecond)
		}
	}

	a := e.start(e.groupConfig("a"))
	e.waitAssigned(20*time.Second, a)
	feed(chunks[:third])
	e.waitCommitted(a, 0.5, 30*time.Second)

	b := e.start(e.groupConfig("b"))
	e.waitAssigned(30*time.Second, a, b)
	e.checkMemTable(b) // 2 of 4 partitions: 21 MiB memtables
	feed(chunks[third : 2*third])
	e.waitCommitted(b, 0.6, 30*time.Second)

	e.stop(a) // leaves the group: b takes a's partitions over
	e.waitAssigned(30*time.Second, b)
	e.checkMemTable(b) // all 4: 10.6 MiB
	feed(chunks[2*third:])
	e.waitCommitted(b, 1, 45*time.Second)
	e.stop(b)

	sa, sb := a.job.Stats(), b.job.Stats()
	if sa.In == 0 || sb.In == 0 {
		t.Errorf("both instances should have processed input: a %d, b %d records", sa.In, sb.In)
	}
	if sb.Generations < 2 {
		t.Errorf("instance b joined %d generations, want at least 2 (shared, then alone)", sb.Generations)
	}
	if sb.Restored == 0 {
		t.Errorf("instance b restored nothing when it took a's partitions over: %+v", sb)
	}
	e.verify(w, sum(sa, sb))
}
