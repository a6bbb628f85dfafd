package job

import (
	"context"
	"errors"
	"fmt"

	"github.com/dedupstream/dedupstream/job/balance"
	"github.com/dedupstream/dedupstream/sink"
	"github.com/segmentio/kafka-go"
)

// runGroup is assignment mode group: kafka-go's ConsumerGroup hands out
// partitions in generations, and each generation runs the stages of its
// partitions until the group rebalances. A stage that takes a partition
// over runs the recovery protocol first (InitProducerID fences the previous
// owner, the store catches up from the committed output), so the state
// follows the partition through the output topic.
//
// Losing a partition to fencing is not fatal here: the member rejoins and
// the group decides again. Only a fatal stage failure (a failed store, a
// broker answer that retrying cannot fix) ends Run.
func (j *Job) runGroup(ctx context.Context, lay layout) error {
	a := j.cfg.Assignment
	bal := &balance.Copartitioned{}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                j.cfg.Job.ID,
		Brokers:           j.cfg.Kafka.Brokers,
		Dialer:            j.opts.Dialer,
		Topics:            j.topics,
		GroupBalancers:    []kafka.GroupBalancer{bal},
		SessionTimeout:    a.SessionTimeout,
		HeartbeatInterval: a.HeartbeatInterval,
		RebalanceTimeout:  a.RebalanceTimeout,
		JoinGroupBackoff:  j.opts.Backoff,
		StartOffset:       kafka.FirstOffset,
		Logger: kafka.LoggerFunc(func(format string, args ...any) {
			j.log.Debug(fmt.Sprintf(format, args...), "group", j.cfg.Job.ID)
		}),
		ErrorLogger: kafka.LoggerFunc(func(format string, args ...any) {
			j.log.Warn(fmt.Sprintf(format, args...), "group", j.cfg.Job.ID)
		}),
	})
	if err != nil {
		return fmt.Errorf("job: consumer group %q: %w", j.cfg.Job.ID, err)
	}
	defer cg.Close() // leaves the group, so its partitions move at once
	for {
		gen, err := cg.Next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			// The group retries joining on its own, after a backoff.
			j.log.Warn("joining the consumer group failed; retrying", "group", j.cfg.Job.ID, "err", err)
			continue
		}
		parts := balance.Assigned(gen.Assignments, j.topics)
		bal.SetOwned(parts)
		j.log.Info("joined a consumer group generation", "group", j.cfg.Job.ID, "generation", gen.ID, "member", gen.MemberID, "partitions", parts)
		if err := j.runGeneration(ctx, gen, parts, lay); err != nil {
			return err
		}
	}
}

// runGeneration runs the stages of one generation until the generation ends
// (a rebalance: each stage commits or aborts its open cycle first), ctx
// ends, or a stage fails. It returns only fatal failures.
func (j *Job) runGeneration(ctx context.Context, gen *kafka.Generation, parts []int, lay layout) error {
	group := sink.Group{ID: j.cfg.Job.ID, MemberID: gen.MemberID, GenerationID: gen.ID}
	j.addStats(func(s *Stats) { s.Assigned, s.Assignment = len(parts), true; s.Generations++ })
	defer j.addStats(func(s *Stats) { s.Assigned, s.Assignment = 0, false })

	done := make(chan error, 1)
	// The group waits for this function before it joins the next
	// generation, and ends the generation when it returns: it must not
	// return before the generation or ctx ends, even with no partitions.
	gen.Start(func(genCtx context.Context) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(genCtx, cancel)()
		if len(parts) == 0 {
			<-ctx.Done()
			done <- nil
			return
		}
		done <- j.runStages(ctx, parts, lay, group)
	})
	err := <-done
	if err == nil {
		return nil
	}
	if onlyFenced(err) {
		j.log.Warn("fenced: another member took partitions of this generation over; rejoining the group",
			"generation", gen.ID, "err", err)
		return nil
	}
	return err
}

// onlyFenced reports whether every error joined in err is a fencing.
func onlyFenced(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyFenced(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, sink.ErrFenced)
}
