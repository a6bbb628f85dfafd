package balance

import (
	"encoding/binary"
	"slices"
	"strings"
	"sync"

	"github.com/segmentio/kafka-go"
)

// Assigned returns the partition numbers a member owns: those
// assigned on every raw topic (a stage reads partition p of each), sorted.
func Assigned(as map[string][]kafka.PartitionAssignment, topics []string) []int {
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

// Copartitioned is the group balancer of the job (a kafka-go
// GroupBalancer); the zero value owns nothing. A stage owns partition p
// of every raw topic, so it assigns partition numbers, not topic
// partitions: a member gets partition p of all topics or of none. It is
// sticky, because a partition that moves costs a state restore: each member
// reports the partitions it owns in its user data, keeps as many of them as
// its fair share allows, and only the rest are dealt out again. Shares
// differ by at most one partition.
type Copartitioned struct {
	mu    sync.Mutex
	owned []int
}

// ProtocolName is the name members agree on when they join.
func (b *Copartitioned) ProtocolName() string { return "dedupstream-Copartitioned" }

// SetOwned records the partitions this member owns now, reported to the
// group leader in UserData at the next join.
func (b *Copartitioned) SetOwned(parts []int) {
	b.mu.Lock()
	b.owned = slices.Clone(parts)
	b.mu.Unlock()
}

// UserData is the owned partitions as a uvarint count, then uvarints.
func (b *Copartitioned) UserData() ([]byte, error) {
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

// AssignGroups deals out the partition numbers that exist on every
// subscribed topic (run by the group leader): sticky, fair within one
// partition, a number on all topics of a member or on none.
func (b *Copartitioned) AssignGroups(members []kafka.GroupMember, partitions []kafka.Partition) kafka.GroupMemberAssignments {
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
