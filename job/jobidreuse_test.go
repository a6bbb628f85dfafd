package job_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/job"
)

// TestJobIDReused: a second job, with its own input and output topics,
// is given the job.id of one that runs (a copied config). Both would
// share transactional ids, the consumer group and the partitions topic,
// so the second must be refused (ErrTopics: exit 2, naming the output
// topic the id records and a new job.id as a way out) before it takes any
// of them over: the running job is not fenced, goes on with new input, and
// kgo finds every key of its workload once.
func TestJobIDReused(t *testing.T) {
	for _, parts := range []int32{partitions, 6} {
		t.Run(map[int32]string{partitions: "same partition count", 6: "other partition count"}[parts], func(t *testing.T) {
			e := newEnv(t)
			w := e.workload(23, 2_000, 500)
			half := len(w.Records) / 2
			e.produce(w.Records[:half])
			cfg := e.config("0, 1, 2, 3")
			r := e.start(cfg)
			e.waitCommitted(r, 1, 60*time.Second)

			other := e.config("0, 1, 2, 3")
			other.Input.Topics = []string{e.topic("payments-raw", parts)}
			other.Output.Topic, other.Output.DLQTopic = e.topic("payments", parts), e.topic("payments-dlq", 1)
			other.State.Dir = t.TempDir()
			r2 := e.start(other)
			err := r2.wait(t, 60*time.Second)
			// Whichever refusal comes first, one line says that the id
			// belongs to the job writing the other output.
			if !errors.Is(err, job.ErrTopics) || !strings.Contains(err.Error(), "\njob.id: topic ") && !strings.Contains(err.Error(), "or start under a new job.id") ||
				!strings.Contains(err.Error(), `writes output topic "`+e.out+`"`) {
				t.Fatalf("the second job under the same job.id: want ErrTopics naming the output the id writes and a job.id of its own, got %v", err)
			}
			t.Logf("refused: %v", err)
			if st := r2.job.Stats(); st.Recoveries != 0 {
				t.Errorf("the refused job ran %d recoveries", st.Recoveries)
			}

			e.produce(w.Records[half:])
			e.waitCommitted(r, 1, 60*time.Second)
			e.stop(r)
			e.verify(w, r.job.Stats())
		})
	}
}
