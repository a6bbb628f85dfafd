package statestore

import (
	"sync"
	"testing"
)

// TestHolds pins the lifetime rule runBlocks and memFilter share: the
// reservation returns once at the registry's drop, however often drop is
// called; the memory is freed exactly once, by whoever lets go last; no
// hold is taken after that.
func TestHolds(t *testing.T) {
	type step struct {
		op   string // acquire, unref, drop
		want bool   // acquire: taken; unref, drop: last holder
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"registry only", []step{{"drop", true}, {"drop", false}, {"acquire", false}}},
		{"reader outlives registry", []step{
			{"acquire", true}, {"drop", false}, {"drop", false}, {"acquire", true},
			{"unref", false}, {"unref", true}, {"acquire", false},
		}},
		{"registry outlives readers", []step{
			{"acquire", true}, {"acquire", true}, {"unref", false}, {"unref", false},
			{"drop", true}, {"acquire", false},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h holds
			h.init()
			released := 0
			h.release = func() { released++ }
			last := 0
			for i, s := range tc.steps {
				var got bool
				switch s.op {
				case "acquire":
					got = h.acquire()
				case "unref":
					got = h.unref()
				case "drop":
					got = h.drop()
				}
				if got != s.want {
					t.Fatalf("step %d %s: %v, want %v", i, s.op, got, s.want)
				}
				if got && s.op != "acquire" {
					last++
				}
				if s.op == "drop" && released != 1 {
					t.Fatalf("step %d: reservation released %d times after a drop, want 1", i, released)
				}
			}
			if last != 1 {
				t.Fatalf("%d last holders, want 1", last)
			}
		})
	}
}

// TestHoldsConcurrent: Readers acquiring and letting go while the
// registry drops: exactly one caller sees itself the last, and no acquire
// succeeds after it.
func TestHoldsConcurrent(t *testing.T) {
	for range 200 {
		var h holds
		h.init()
		var mu sync.Mutex
		lasts, late := 0, 0
		freed := false
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 50 {
					if !h.acquire() {
						mu.Lock()
						freedNow := freed
						mu.Unlock()
						if !freedNow {
							// Refused although nobody freed yet: only
							// possible between the last unref and its
							// free, which the holder does next.
							continue
						}
						return
					}
					mu.Lock()
					if freed {
						late++
					}
					mu.Unlock()
					if h.unref() {
						mu.Lock()
						lasts++
						freed = true
						mu.Unlock()
					}
				}
			})
		}
		wg.Go(func() {
			if h.drop() {
				mu.Lock()
				lasts++
				freed = true
				mu.Unlock()
			}
		})
		wg.Wait()
		if lasts != 1 || late != 0 {
			t.Fatalf("%d last holders (want 1), %d holds taken after the free (want 0)", lasts, late)
		}
	}
}
