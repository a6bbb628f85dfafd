package job

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

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
	bal := &copartitioned{}
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
		parts := assignedPartitions(gen.Assignments, j.topics)
		bal.setOwned(parts)
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

// assignedPartitions returns the partition numbers a member owns: those
// assigned on every raw topic (a stage reads partition p of each), sorted.
func assignedPartitions(as map[string][]kafka.PartitionAssignment, topics []string) []int {
	count := map[int]int{}
	for _, t := range topics {
		for _, pa := range as[t] {
			count[pa.ID]++
		}
	}
	var parts []int
	for p, n := range count {
		if n == len(topics) {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	return parts
}

// copartitioned is the group balancer of the job. A stage owns partition p
// of every raw topic, so it assigns partition numbers, not topic
// partitions: a member gets partition p of all topics or of none. It is
// sticky, because a partition that moves costs a state restore: each member
// reports the partitions it owns in its user data, keeps as many of them as
// its fair share allows, and only the rest are dealt out again. Shares
// differ by at most one partition.
type copartitioned struct {
	mu    sync.Mutex
	owned []int
}

func (b *copartitioned) ProtocolName() string { return "dedupstream-copartitioned" }

func (b *copartitioned) setOwned(parts []int) {
	b.mu.Lock()
	b.owned = slices.Clone(parts)
	b.mu.Unlock()
}

// UserData is the owned partitions as a uvarint count, then uvarints.
func (b *copartitioned) UserData() ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return encodeOwned(b.owned), nil
}

func encodeOwned(parts []int) []byte {
	buf := binary.AppendUvarint(nil, uint64(len(parts)))
	for _, p := range parts {
		buf = binary.AppendUvarint(buf, uint64(p))
	}
	return buf
}

// decodeOwned reads encodeOwned's format; anything else (another version,
// garbage) reads as owning nothing, which costs stickiness, not safety.
func decodeOwned(buf []byte) []int {
	n, k := binary.Uvarint(buf)
	if k <= 0 || n > uint64(len(buf)) {
		return nil
	}
	buf = buf[k:]
	parts := make([]int, 0, n)
	for range n {
		p, k := binary.Uvarint(buf)
		if k <= 0 || p > 1<<31 {
			return nil
		}
		parts = append(parts, int(p))
		buf = buf[k:]
	}
	return parts
}

func (b *copartitioned) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
	out := kafka.GroupMemberAssignments{}
	if len(members) == 0 {
		return out
	}
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b kafka.GroupMember) int { return strings.Compare(a.ID, b.ID) })

	// Partition numbers that exist on every subscribed topic.
	topics := map[string]bool{}
	for _, m := range members {
		for _, t := range m.Topics {
			topics[t] = true
		}
	}
	count := map[int]int{}
	for _, p := range partitions {
		if topics[p.Topic] {
			count[p.ID]++
		}
	}
	free := map[int]bool{}
	for p, n := range count {
		if n == len(topics) {
			free[p] = true
		}
	}
	total := len(free)

	// Previous owners keep their partitions first; a partition two
	// members claim (a zombie's stale report) goes to the first in ID
	// order.
	prev := make([][]int, len(members))
	for i, m := range members {
		for _, p := range decodeOwned(m.UserData) {
			if free[p] {
				prev[i] = append(prev[i], p)
				delete(free, p)
			}
		}
	}
	// Fair shares: total/len each, one more for total%len members, given
	// to those that owned the most so fewer partitions move.
	order := make([]int, len(members))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return len(prev[b]) - len(prev[a]) })
	quota := make([]int, len(members))
	for rank, i := range order {
		quota[i] = total / len(members)
		if rank < total%len(members) {
			quota[i]++
		}
	}
	owned := make([][]int, len(members))
	for i := range members {
		slices.Sort(prev[i])
		keep := min(quota[i], len(prev[i]))
		owned[i] = prev[i][:keep]
		for _, p := range prev[i][keep:] {
			free[p] = true
		}
	}
	rest := make([]int, 0, len(free))
	for p := range free {
		rest = append(rest, p)
	}
	slices.Sort(rest)
	for i := range members {
		for len(owned[i]) < quota[i] && len(rest) > 0 {
			owned[i] = append(owned[i], rest[0])
			rest = rest[1:]
		}
		slices.Sort(owned[i])
	}
	for i, m := range members {
		as := map[string][]int{}
		for _, t := range m.Topics {
			if topics[t] {
				as[t] = slices.Clone(owned[i])
			}
		}
		out[m.ID] = as
	}
	return out
}
