package job_test

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/config"
)

// TestRepartition feeds two raw topics of different partition counts whose
// producers place records anywhere: a third of the orders arrive on a
// 3-partition topic, a third on a random partition of the 4-partition one.
// In repartition mode the route step must bring every business key to one
// stage, so each key is emitted once however it arrived; two instances
// split the stages and with them the raw partitions to route.
func TestRepartition(t *testing.T) {
	t.Run("static", func(t *testing.T) { testRepartition(t, false) })
	t.Run("group", func(t *testing.T) { testRepartition(t, true) })
}

func testRepartition(t *testing.T, group bool) {
	e := newEnv(t)
	clicks := e.topic("clicks-raw", 3)
	w := e.workload(21, 6_000, 1_500)
	rng := rand.New(rand.NewPCG(21, 1))
	w.Unordered = true
	moved := 0
	for _, r := range w.Records {
		if !strings.Contains(string(r.Value), `"order_id"`) {
			continue // poison stays put: its DLQ source is checked
		}
		switch rng.IntN(3) {
		case 0:
			r.Topic, r.Partition = clicks, int32(rng.IntN(3))
			moved++
		case 1:
			r.Partition = int32(rng.IntN(partitions))
		}
	}
	if moved == 0 {
		t.Fatal("no record moved to the second raw topic")
	}
	cfg := func(parts, name string) *config.Config {
		c := e.config(parts, clicks)
		if group {
			c = e.groupConfig(name, clicks)
		} else {
			c.State.Dir += "-" + name
		}
		c.Input.Partitioning = "repartition"
		return c
	}
	a := e.start(cfg("0, 1", "a"))
	b := e.start(cfg("2, 3", "b"))
	if group {
		e.waitAssigned(30*time.Second, a, b)
	}
	e.produce(w.Records)

	deadline := time.Now().Add(60 * time.Second)
	for {
		sa, sb := a.job.Stats(), b.job.Stats()
		if sa.RouteIn+sb.RouteIn == uint64(len(w.Records)) && sa.In+sb.In == sa.Routed+sb.Routed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done within 60s: routed %d+%d of %d raw records, stages decided %d+%d",
				sa.RouteIn, sb.RouteIn, len(w.Records), sa.In, sb.In)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e.stop(a)
	e.stop(b)
	sa, sb := a.job.Stats(), b.job.Stats()
	if sa.RouteIn == 0 || sb.RouteIn == 0 {
		t.Errorf("both instances should route: a %d, b %d raw records", sa.RouteIn, sb.RouteIn)
	}
	// The accounting identity over the raw input: in = out + dropped + dlq.
	st := sum(sa, sb)
	st.In = sa.RouteIn + sb.RouteIn
	e.verify(w, st)
	if m := sa.Misrouted + sb.Misrouted; m != 0 {
		t.Errorf("%d records on the repartition topic are not where murmur2 of their key puts them", m)
	}
}
