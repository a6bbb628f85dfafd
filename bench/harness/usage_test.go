package harness

import (
	"math"
	"testing"
)

func TestPerRecord(t *testing.T) {
	for _, tc := range []struct {
		name       string
		a, b       usage
		n          int64
		us, faults float64
	}{
		{"two seconds over a million", usage{cpu: 1, minflt: 100}, usage{cpu: 3, minflt: 600}, 1_000_000, 2, 0.0005},
		{"no records", usage{cpu: 1}, usage{cpu: 3}, 0, 0, 0},
		{"nothing spent", usage{cpu: 5, minflt: 7}, usage{cpu: 5, minflt: 7}, 10, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			us, faults := perRecord(tc.a, tc.b, tc.n)
			if math.Abs(us-tc.us) > 1e-9 || math.Abs(faults-tc.faults) > 1e-12 {
				t.Fatalf("perRecord = %v us, %v faults; want %v, %v", us, faults, tc.us, tc.faults)
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
	if s.midRecords != 600 || s.mid.cpu < s.start.cpu {
		t.Fatalf("half(600): midRecords %d, mid cpu %v before start %v", s.midRecords, s.mid.cpu, s.start.cpu)
	}
}
