package pipeline

import (
	"fmt"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
)

func TestClockTime(t *testing.T) {
	c := Config{}
	c.ApplyDefaults() // max_future_skew 5m
	const wall = 1_700_000_000_000
	skew := c.MaxFutureSkew.Milliseconds()
	for _, tc := range []struct{ ts, want int64 }{
		{wall - 3_600_000, wall - 3_600_000},
		{wall, wall},
		{wall + skew, wall + skew},
		{wall + skew + 1, wall},         // ahead by more than the skew: now
		{wall + 55*60_000, wall},        // Kafka accepts an hour ahead by default
		{wall + 10*3_600_000_000, wall}, // absurd
	} {
		if got := c.ClockTime(tc.ts, wall); got != tc.want {
			t.Errorf("ClockTime(wall%+dms) = wall%+dms, want wall%+dms", tc.ts-wall, got-wall, tc.want-wall)
		}
	}
}

// TestRestoreSpanCoversMemory ties RestoreFrom to what the stage really
// remembers: a key emitted at time e is repeated at a later time d (both
// on the stage clock). Whenever the stage drops the repeat, e must be at
// or after RestoreFrom(d), or a store rebuilt from the output at clock d
// would not hold the key and emit it again. A repeat within the window
// must always be dropped. A span of window/2 fails here.
func TestRestoreSpanCoversMemory(t *testing.T) {
	const windowMs = 60_000
	cfg := Config{Window: windowMs * time.Millisecond, Generations: 4, MaxFutureSkew: time.Second,
		Key: []partition.Field{{Source: partition.SourceJSON, Name: "k"}}}
	cfg.ApplyDefaults()
	base := int64(1_700_000_000_000)
	dropped := 0
	for _, phase := range []int64{0, 3_700, 11_000} { // where in a generation e falls
		e := base + phase
		wall := e
		s := openTestStage(t, cfg, func() time.Time { return time.UnixMilli(wall) })
		rec := func(ts, age int64, msg string) []Record {
			return []Record{{Record: partition.Record{Value: fmt.Appendf(nil, `{"k":"a-%d","m":%q}`, age, msg)}, TimestampMs: ts}}
		}
		var ages []int64
		for age := int64(0); age <= 2*windowMs; age += 500 {
			ages = append(ages, age)
		}
		for _, age := range ages {
			if _, _, err := s.Process(rec(e, age, "first"), nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Commit(nil); err != nil {
			t.Fatal(err)
		}
		for _, age := range ages {
			d := e + age
			wall = d
			got, _, err := s.Process(rec(d, age, "repeat"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(nil); err != nil {
				t.Fatal(err)
			}
			drop := got[0].Verdict == DropHistory
			if drop {
				dropped++
				if e < cfg.RestoreFrom(d) {
					t.Errorf("age %dms: the stage remembers a key emitted %dms before the restore span starts", age, cfg.RestoreFrom(d)-e)
				}
			}
			if age <= windowMs && !drop {
				t.Errorf("age %dms (phase %dms): a repeat inside the window was not dropped: %+v", age, phase, got[0])
			}
		}
	}
	if dropped == 0 {
		t.Fatal("no repeat was dropped; the test proves nothing")
	}
}
