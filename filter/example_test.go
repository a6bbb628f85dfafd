package filter_test

import (
	"fmt"
	"time"

	"github.com/dedupstream/dedupstream/filter"
	"github.com/dedupstream/dedupstream/partition"
)

// A stage checks each new key against the filter and reads only the store
// buckets the filter names.
func Example() {
	const span = 15 * time.Minute // dedup window 1h over 4 generations
	gen := func(t time.Time) uint64 { return uint64(t.UnixNano()) / uint64(span) }

	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f, err := filter.New(filter.Config{KeysPerGeneration: 100_000, FalsePositiveRate: 0.01, Generations: 4}, gen(start))
	if err != nil {
		panic(err)
	}
	seen := func(now time.Time, key string) string {
		f.Advance(gen(now))
		h := partition.HashKey([]byte(key))
		var buf [4]uint64
		candidates := f.Candidates(h, buf[:0])
		if len(candidates) == 0 {
			f.Add(h) // definitely new: skip the store
			return "new"
		}
		// Confirm in the store buckets of these generations; here it is there.
		return fmt.Sprintf("maybe, %d generation(s) to check", len(candidates))
	}
	fmt.Println(seen(start, "order-1"))
	fmt.Println(seen(start.Add(20*time.Minute), "order-1"))
	fmt.Println(seen(start.Add(2*time.Hour), "order-1"))
	// Output:
	// new
	// maybe, 1 generation(s) to check
	// new
}
