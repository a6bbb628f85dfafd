package harness

import (
	"math"
	"testing"
)

func TestPerRecord(t *testing.T) {
	for _, tc := range []struct {
		name              string
		a, b              usage
		n                 int64
		us, faults, alloc float64
	}{
		{"two seconds over a million", usage{cpu: 1, minflt: 100, alloc: 1000}, usage{cpu: 3, minflt: 600, alloc: 3_001_000}, 1_000_000, 2, 0.0005, 3},
		{"no records", usage{cpu: 1}, usage{cpu: 3}, 0, 0, 0, 0},
		{"nothing spent", usage{cpu: 5, minflt: 7, alloc: 9}, usage{cpu: 5, minflt: 7, alloc: 9}, 10, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			us, faults, alloc := perRecord(tc.a, tc.b, tc.n)
			if math.Abs(us-tc.us) > 1e-9 || math.Abs(faults-tc.faults) > 1e-12 || alloc != tc.alloc {
				t.Fatalf("perRecord = %v us, %v faults, %v bytes; want %v, %v, %v", us, faults, alloc, tc.us, tc.faults, tc.alloc)
			}
		})
	}
}

// TestSpanUsageHalf: the second half is measured from the usage and the
// records committed when half was called.
func TestSpanUsageHalf(t *testing.T) {
	s := startSpanUsage()
	if s.midRecords != 0 {
		t.Fatalf("a new span has a half: %d", s.midRecords)
	}
	s.half(600)
	if s.midRecords != 600 || s.mid.cpu < s.start.cpu || s.mid.at.Before(s.start.at) {
		t.Fatalf("half(600): midRecords %d, mid cpu %v at %v before start %v at %v", s.midRecords, s.mid.cpu, s.mid.at, s.start.cpu, s.start.at)
	}
}
