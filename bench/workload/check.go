package workload

import (
	"fmt"
	"math/bits"
)

// Checker counts what a system under test did wrong with a stream, from the
// keys it emitted: one bit per key id, nothing per record.
type Checker struct {
	seen    []uint64
	emitted uint64
	// Escaped counts emissions of a key already emitted: duplicates that
	// got through.
	Escaped uint64
	// Foreign counts emitted keys that are not keys of the stream (or ids
	// the stream never reached).
	Foreign uint64
}

// NewChecker returns a Checker for streams of up to keys distinct keys; it
// grows when a larger id is emitted. Its bits are resident when it
// returns (written once), so that a memory figure of the system under
// test taken after it (the harness's start RSS) does not count them: one
// bit per key, 0.13 bytes per key of a 100M-key sweep point that were
// counted as the stage's until session 10.
func NewChecker(keys uint64) *Checker {
	c := &Checker{seen: make([]uint64, (keys+63)/64)}
	for i := range c.seen {
		c.seen[i] = 0
	}
	return c
}

// Emit records that the key with id was emitted once.
func (c *Checker) Emit(id uint64) {
	w := id / 64
	if w >= uint64(len(c.seen)) {
		c.seen = append(c.seen, make([]uint64, w+1-uint64(len(c.seen)))...)
	}
	bit := uint64(1) << (id % 64)
	if c.seen[w]&bit != 0 {
		c.Escaped++
		return
	}
	c.seen[w] |= bit
	c.emitted++
}

// EmitKey parses key and records its emission; keys the generator cannot
// have made count as Foreign.
func (c *Checker) EmitKey(key []byte) {
	id, ok := ParseKey(key)
	if !ok {
		c.Foreign++
		return
	}
	c.Emit(id)
}

// Result compares the emissions with the ground truth of a stream that made
// counts: Lost is the number of keys never emitted; ids at or beyond
// counts.New count as Foreign.
func (c *Checker) Result(counts Counts) Verdict {
	v := Verdict{Expected: counts.New, Emitted: c.emitted + c.Escaped, Escaped: c.Escaped, Foreign: c.Foreign}
	var inRange uint64
	for w, word := range c.seen {
		for word != 0 {
			low := word & -word
			word ^= low
			id := uint64(w)*64 + uint64(bits.TrailingZeros64(low))
			if id < counts.New {
				inRange++
			} else {
				v.Foreign++
			}
		}
	}
	v.Lost = counts.New - inRange
	return v
}

// Verdict is the correctness of one run against the ground truth.
type Verdict struct {
	Expected uint64 `json:"expected"` // distinct keys: the records a correct run emits
	Emitted  uint64 `json:"emitted"`
	Escaped  uint64 `json:"escaped"` // duplicates emitted
	Lost     uint64 `json:"lost"`    // keys never emitted
	Foreign  uint64 `json:"foreign"` // emitted keys the stream never had
}

// OK reports whether nothing escaped, was lost or came from nowhere.
func (v Verdict) OK() bool { return v.Escaped == 0 && v.Lost == 0 && v.Foreign == 0 }

func (v Verdict) String() string {
	return fmt.Sprintf("expected %d emitted %d escaped %d lost %d foreign %d", v.Expected, v.Emitted, v.Escaped, v.Lost, v.Foreign)
}
