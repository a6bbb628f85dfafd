package balance

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segmentio/kafka-go"
)

func TestOwnedRoundTrip(t *testing.T) {
	for _, parts := range [][]int{nil, {0}, {3, 1, 200, 70000}} {
		got := decodeOwned(encodeOwned(parts))
		if len(parts) == 0 && len(got) == 0 {
			continue
		}
		if !slices.Equal(got, parts) {
			t.Errorf("round trip of %v gave %v", parts, got)
		}
	}
	for _, garbage := range [][]byte{nil, {0xff}, {5, 1}, {2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if got := decodeOwned(garbage); got != nil {
			t.Errorf("decodeOwned(%x) = %v, want nothing", garbage, got)
		}
	}
}

// TestCopartitionedAssignment checks the balancer on random groups: every
// partition number goes to exactly one member, on every topic at once;
// shares differ by at most one; and a member keeps its previous partitions
// up to its share, so a rebalance moves no more state than it must.
func TestCopartitionedAssignment(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 2000 {
		nTopics, nParts, nMembers := 1+rng.IntN(3), rng.IntN(13), 1+rng.IntN(6)
		var topics []string
		var partitions []kafka.Partition
		for i := range nTopics {
			topic := fmt.Sprintf("t%d", i)
			topics = append(topics, topic)
			for p := range nParts {
				partitions = append(partitions, kafka.Partition{Topic: topic, ID: p})
			}
		}
		// A partition that only one of several topics has, and a topic
		// nobody subscribes to: neither may be assigned.
		if nTopics > 1 {
			partitions = append(partitions, kafka.Partition{Topic: "t0", ID: nParts + 5})
		}
		partitions = append(partitions, kafka.Partition{Topic: "other", ID: nParts + 7})
		members := make([]kafka.GroupMember, nMembers)
		prev := map[string][]int{}
		for i := range members {
			id := fmt.Sprintf("m-%x", rng.Uint32())
			for p := range nParts + 2 { // also reports of partitions that are gone
				if rng.IntN(nMembers+1) == 0 {
					prev[id] = append(prev[id], p)
				}
			}
			members[i] = kafka.GroupMember{ID: id, Topics: topics, UserData: encodeOwned(prev[id])}
		}
		got := (&Copartitioned{}).AssignGroups(members, partitions)

		owner := map[int]string{}
		lo, hi := nParts, 0
		for _, m := range members {
			as := got[m.ID]
			mine := as[topics[0]]
			for _, topic := range topics {
				if !slices.Equal(as[topic], mine) {
					t.Fatalf("iter %d: member %s has %v on %s but %v on %s", iter, m.ID, as[topic], topic, mine, topics[0])
				}
			}
			for _, p := range mine {
				if p >= nParts {
					t.Fatalf("iter %d: member %s got partition %d of %d", iter, m.ID, p, nParts)
				}
				if o, dup := owner[p]; dup {
					t.Fatalf("iter %d: partition %d assigned to %s and %s", iter, p, o, m.ID)
				}
				owner[p] = m.ID
			}
			lo, hi = min(lo, len(mine)), max(hi, len(mine))
		}
		if len(owner) != nParts {
			t.Fatalf("iter %d: %d of %d partitions assigned: %v", iter, len(owner), nParts, got)
		}
		if hi-lo > 1 {
			t.Fatalf("iter %d: shares range from %d to %d: %v", iter, lo, hi, got)
		}
		// Stickiness: with a share of at least floor(n/m), a member keeps
		// that many of the partitions it alone reported.
		claims := map[int]int{}
		for _, ps := range prev {
			for _, p := range ps {
				claims[p]++
			}
		}
		for _, m := range members {
			var sole int
			for _, p := range prev[m.ID] {
				if p < nParts && claims[p] == 1 {
					sole++
				}
			}
			kept := 0
			for _, p := range got[m.ID][topics[0]] {
				if slices.Contains(prev[m.ID], p) {
					kept++
				}
			}
			if want := min(sole, nParts/nMembers); kept < want {
				t.Fatalf("iter %d: member %s kept %d of its %d partitions %v, want at least %d: got %v",
					iter, m.ID, kept, sole, prev[m.ID], want, got[m.ID][topics[0]])
			}
		}
	}
}

func TestAssignedPartitions(t *testing.T) {
	as := map[string][]kafka.PartitionAssignment{
		"a": {{ID: 2}, {ID: 0}, {ID: 5}},
		"b": {{ID: 0}, {ID: 2}},
	}
	if got := Assigned(as, []string{"a", "b"}); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("got %v, want [0 2]: only partitions assigned on every topic", got)
	}
	if got := Assigned(as, []string{"a"}); !slices.Equal(got, []int{0, 2, 5}) {
		t.Errorf("got %v, want [0 2 5]", got)
	}
}
