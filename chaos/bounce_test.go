package chaos

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/internal/kafkatest"
	"github.com/dedupstream/dedupstream/job/jobtest"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// leader returns the broker id leading topic's partition p.
func (r *run) leader(cl *kgo.Client, topic string, p int32) int32 {
	r.t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	res, err := req.RequestWith(r.ctx(10*time.Second), cl)
	if err != nil {
		r.t.Fatalf("metadata of %s: %v", topic, err)
	}
	for _, part := range res.Topics[0].Partitions {
		if part.Partition == p && part.Leader >= 0 {
			return part.Leader
		}
	}
	r.t.Fatalf("%s/%d has no leader", topic, p)
	return -1
}

// bounce stops broker id (cleanly or with SIGKILL) and restarts it with
// testenv/kafka.sh, which returns once it is back in every ISR.
func (r *run) bounce(id int32, kill bool) {
	r.t.Helper()
	args := []string{"bounce", strconv.Itoa(int(id))}
	if kill {
		args = append(args, "--kill")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "../testenv/kafka.sh", args...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("kafka.sh %v: %v\n%s", args, err, out)
	}
}

// feedPaced produces recs in slices of 200, 50ms apart, so that input
// arrives while a fault is under way.
func feedPaced(ctx context.Context, prod *jobtest.Producer, recs []*kgo.Record) error {
	for part := range slices.Chunk(recs, 200) {
		if err := prod.Produce(ctx, part); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// TestBrokerBounce bounces the leader of a seeded partition of the output
// or raw topic while the job runs and input arrives, alternating a clean
// stop and SIGKILL; every bounce waits until the broker is back in sync.
func TestBrokerBounce(t *testing.T) {
	r := begin(t)
	bounces := r.n(2, 6)
	w := r.workload(r.n(8_000, 20_000))
	prod := r.producer()
	admin := kafkatest.NewClient(t, r.brokers)
	ctx := r.ctx(30 * time.Minute)
	j := r.startJob(nil)
	chunks := splitN(w.Records, bounces+1)
	for i := range bounces {
		fed := make(chan error, 1)
		go func() { fed <- feedPaced(ctx, prod, chunks[i]) }()
		time.Sleep(r.between(200*time.Millisecond, 2*time.Second))
		topic := []string{r.out, r.raw}[r.intn(2)]
		p := int32(r.intn(parts))
		kill := i%2 == 1
		id := r.leader(admin, topic, p)
		how := "clean stop"
		if kill {
			how = "SIGKILL"
		}
		r.event("bounce %d/%d: broker %d (leader of %s/%d), %s", i+1, bounces, id, topic, p, how)
		start := time.Now()
		r.bounce(id, kill)
		if err := <-fed; err != nil {
			t.Fatalf("produce input during bounce %d: %v", i+1, err)
		}
		r.event("bounce %d/%d: broker %d back in sync after %v; job: %+v", i+1, bounces, id, time.Since(start).Round(time.Millisecond), j.job.Stats())
		select {
		case err := <-j.done:
			j.done <- err
			t.Fatalf("job exited during bounce %d: %v", i+1, err)
		default:
		}
	}
	if err := feedPaced(ctx, prod, slices.Concat(chunks[bounces:]...)); err != nil {
		t.Fatal(err)
	}
	r.waitCaught(prod, j.done, 5*time.Minute)
	r.finish(j)
	st := j.job.Stats()
	r.event("job stopped: %d recoveries, %d cycles", st.Recoveries, st.Cycles)
	r.verify(w, &st)
}

// splitN cuts recs into n parts of nearly equal length.
func splitN(recs []*kgo.Record, n int) [][]*kgo.Record {
	parts := make([][]*kgo.Record, 0, n)
	for i := range n {
		parts = append(parts, recs[i*len(recs)/n:(i+1)*len(recs)/n])
	}
	return parts
}
