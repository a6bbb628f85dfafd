package workload

import (
	"math"
	"testing"
	"time"
)

func mustGen(t *testing.T, s Spec) *Generator {
	t.Helper()
	g, err := NewGenerator(s)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDeterministicBySeed(t *testing.T) {
	spec := Spec{Seed: 42, KeysPerWindow: 20_000, DupRatio: 0.3, Zipf: 1.3, Topics: 3, Partitions: 6, PayloadBytes: 50}
	a, b := mustGen(t, spec), mustGen(t, spec)
	spec.Seed = 43
	c := mustGen(t, spec)
	differ := 0
	for range 20 {
		ra, rb, rc := a.Fill(5_000), b.Fill(5_000), c.Fill(5_000)
		for i := range ra {
			x, y := ra[i], rb[i]
			if x.ID != y.ID || string(x.Key) != string(y.Key) || string(x.Value) != string(y.Value) ||
				x.TimestampMs != y.TimestampMs || x.Topic != y.Topic || x.Partition != y.Partition || x.Class != y.Class {
				t.Fatalf("record %d differs between two generators of one seed: %+v vs %+v", i, x, y)
			}
			if x.ID != rc[i].ID || x.Topic != rc[i].Topic {
				differ++
			}
		}
	}
	if a.Counts() != b.Counts() {
		t.Fatalf("counts differ: %+v vs %+v", a.Counts(), b.Counts())
	}
	if differ < 10_000 {
		t.Fatalf("seed 43 repeats seed 42: only %d of 100000 records differ", differ)
	}
}

// TestDistancesAndGroundTruth replays the stream against a model: a key's
// first record is New with the next id (record time steps once per new
// key, so a repeat of the newest key is at distance 0), every repeat is of a key first seen
// within its class's distance and well inside the window.
func TestDistancesAndGroundTruth(t *testing.T) {
	for _, zipf := range []float64{0, 1.5} {
		spec := Spec{Seed: 7, KeysPerWindow: 50_000, Window: 24 * time.Hour, DupRatio: 0.25, Zipf: zipf}
		g := mustGen(t, spec)
		step := g.Spec().StepMs()
		windowMs := float64(spec.Window.Milliseconds())
		first := map[uint64]int64{}
		var classes [numClasses]uint64
		for range 40 {
			for _, r := range g.Fill(5_000) {
				classes[r.Class]++
				ts, seen := first[r.ID]
				if !seen {
					if r.Class != New || r.ID != uint64(len(first)) {
						t.Fatalf("zipf %v: key %d first appears as %v (want new with id %d)", zipf, r.ID, r.Class, len(first))
					}
					first[r.ID] = r.TimestampMs
					if r.TimestampMs != g.FirstTimestampMs(r.ID) {
						t.Fatalf("key %d: timestamp %d, FirstTimestampMs %d", r.ID, r.TimestampMs, g.FirstTimestampMs(r.ID))
					}
					continue
				}
				if r.Class == New {
					t.Fatalf("key %d repeated but classed new", r.ID)
				}
				d := float64(r.TimestampMs - ts)
				lo, hi := 0.0, 0.0
				switch r.Class {
				case Immediate:
					lo, hi = 0, (ImmediateKeys-1)*step
				case Minutes:
					lo, hi = float64(time.Minute.Milliseconds())-2*step, float64(30*time.Minute.Milliseconds())+step
				case Hours:
					lo, hi = float64(time.Hour.Milliseconds())-2*step, maxReach*windowMs+step
				}
				if d < lo-1 || d > hi+1 || d >= windowMs {
					t.Fatalf("zipf %v: %v repeat of key %d at distance %.0f ms, want [%.0f, %.0f] and < window", zipf, r.Class, r.ID, d, lo, hi)
				}
			}
		}
		c := g.Counts()
		if c.New != uint64(len(first)) || c.Records != 200_000 || c.Duplicates() != classes[Immediate]+classes[Minutes]+classes[Hours] {
			t.Fatalf("counts %+v disagree with the model (%d keys, classes %v)", c, len(first), classes)
		}
		for cl := Immediate; cl <= Hours; cl++ {
			if c.Dups[cl] != classes[cl] {
				t.Fatalf("counts say %d %v repeats, saw %d", c.Dups[cl], cl, classes[cl])
			}
		}
	}
}

func TestDupRatioAndMix(t *testing.T) {
	spec := Spec{Seed: 3, KeysPerWindow: 10_000, DupRatio: 0.2, Mix: Mix{Immediate: 0.5, Minutes: 0.3, Hours: 0.2}}
	g := mustGen(t, spec)
	g.SetDupRatio(0)
	g.Fill(10_000) // a full window first, so every class can reach back
	if g.Counts().New != 10_000 {
		t.Fatalf("with dup ratio 0: %d new of 10000", g.Counts().New)
	}
	g.SetDupRatio(spec.DupRatio)
	before := g.Counts()
	for range 40 {
		g.Fill(10_000)
	}
	c := g.Counts()
	n := float64(c.Records - before.Records)
	dups := float64(c.Duplicates() - before.Duplicates())
	if got := dups / n; math.Abs(got-0.2) > 0.005 {
		t.Fatalf("duplicate ratio %.4f, want 0.2", got)
	}
	for cl, want := range map[Class]float64{Immediate: 0.5, Minutes: 0.3, Hours: 0.2} {
		if got := float64(c.Dups[cl]) / dups; math.Abs(got-want) > 0.01 {
			t.Errorf("%v share of duplicates %.4f, want %.2f", cl, got, want)
		}
	}
}

func TestZipfMakesHotKeys(t *testing.T) {
	top := func(zipf float64) float64 {
		g := mustGen(t, Spec{Seed: 9, KeysPerWindow: 100_000, DupRatio: 0.5, Mix: Mix{Hours: 1}, Zipf: zipf})
		g.SetDupRatio(0)
		g.Fill(100_000)
		g.SetDupRatio(0.5)
		hits := map[uint64]int{}
		n := 0
		for _, r := range g.Fill(20_000) {
			if r.Class == Hours {
				hits[r.ID]++
				n++
			}
		}
		best := 0
		for _, h := range hits {
			best = max(best, h)
		}
		return float64(best) / float64(n)
	}
	uniform, skewed := top(0), top(1.2)
	if skewed < 0.05 || skewed < 20*uniform {
		t.Fatalf("hottest key takes %.4f of replays with zipf 1.2, %.4f uniform: no hot keys", skewed, uniform)
	}
}

func TestKeysRoundTrip(t *testing.T) {
	for _, id := range []uint64{0, 1, 7, 70, 20, 21, 999_999_999_999, 123_456_789} {
		k := AppendKey(nil, id)
		if len(k) < 16 || len(k) > 36 {
			t.Errorf("key of %d is %d bytes, want 16..36", id, len(k))
		}
		got, ok := ParseKey(k)
		if !ok || got != id {
			t.Errorf("ParseKey(%q) = %d, %v; want %d", k, got, ok, id)
		}
	}
	if string(AppendKey(nil, 7)) == string(AppendKey(nil, 70)) {
		t.Fatal("keys 7 and 70 collide")
	}
	for _, bad := range []string{"", "ord-", "ord-00000000000x", "xrd-000000000001-", "ord-000000000001", "ord-000000000001-a"} {
		if _, ok := ParseKey([]byte(bad)); ok {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
}

func TestChecker(t *testing.T) {
	g := mustGen(t, Spec{Seed: 1, KeysPerWindow: 5_000, DupRatio: 0.3})
	recs := g.Fill(20_000)
	right, escaped, lost := NewChecker(0), NewChecker(0), NewChecker(0)
	skipped := false
	for _, r := range recs {
		if r.Class == New {
			right.EmitKey(r.Key)
			escaped.EmitKey(r.Key)
			if !skipped {
				skipped = true
				continue
			}
			lost.EmitKey(r.Key)
		} else {
			escaped.EmitKey(r.Key)
		}
	}
	c := g.Counts()
	if v := right.Result(c); !v.OK() || v.Emitted != c.New {
		t.Fatalf("correct emission judged %v", v)
	}
	if v := escaped.Result(c); v.Escaped != c.Duplicates() || v.Lost != 0 {
		t.Fatalf("emitting every record: %v, want %d escaped", v, c.Duplicates())
	}
	if v := lost.Result(c); v.Lost != 1 || v.Escaped != 0 || v.OK() {
		t.Fatalf("one key skipped: %v", v)
	}
	f := NewChecker(0)
	f.EmitKey([]byte("nope"))
	f.Emit(c.New + 5)
	if v := f.Result(c); v.Foreign != 2 {
		t.Fatalf("foreign keys: %v", v)
	}
}

func TestFillAllocatesNothing(t *testing.T) {
	g := mustGen(t, Spec{Seed: 5, KeysPerWindow: 10_000, DupRatio: 0.2, Zipf: 1.1, Partitions: 4, Topics: 2})
	g.Fill(1_000)
	if n := testing.AllocsPerRun(20, func() { g.Fill(1_000) }); n != 0 {
		t.Fatalf("Fill allocates %v times per batch", n)
	}
}

func TestSpecValidate(t *testing.T) {
	for _, s := range []Spec{{DupRatio: 1}, {DupRatio: -0.1}, {Zipf: 0.5}, {Mix: Mix{Immediate: -1, Hours: 1}}, {PayloadBytes: -1}} {
		if _, err := NewGenerator(s); err == nil {
			t.Errorf("spec %+v accepted", s)
		}
	}
}
