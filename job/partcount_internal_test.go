package job

import (
	"context"
	"reflect"
	"sync"
	"testing"
)

// TestStartGateHoldsBackAfterAFailure: when one stage of a start fails its
// check, no other stage may go on, even before the failure's cancellation
// reaches them (here it never does): every pass that waited returns
// false, whichever order the stages pass in.
func TestStartGateHoldsBackAfterAFailure(t *testing.T) {
	for failing := range 3 {
		g := newStartGate(3)
		var wg sync.WaitGroup
		went := make([]bool, 3)
		for i := range 3 {
			wg.Go(func() { went[i] = g.pass(context.Background(), i != failing) })
		}
		wg.Wait()
		for i, ok := range went {
			if ok {
				t.Errorf("stage %d failed its check, stage %d went on", failing, i)
			}
		}
	}
	g := newStartGate(2)
	var wg sync.WaitGroup
	went := make([]bool, 2)
	for i := range 2 {
		wg.Go(func() { went[i] = g.pass(context.Background(), true) })
	}
	wg.Wait()
	if !went[0] || !went[1] {
		t.Errorf("every stage passed, yet went on: %v", went)
	}
}

// TestOffsetMeta: the metadata committed with the input offsets round-trips
// its partition count, output topic, output end and generation marks, an
// older build's metadata (the count alone) or another tool's still reads,
// and marks that are not increasing, or not numbers, read as none.
func TestOffsetMeta(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want offsetMetadata
	}{
		{offsetMeta(6, "orders", 1234, nil, 900_000), offsetMetadata{6, "orders", 1234, nil, 0}},
		{offsetMeta(4, "orders.v2", 0, genMarks{{7, 0}, {9, 120}}, 900_000), offsetMetadata{4, "orders.v2", 0, genMarks{{7, 0}, {9, 120}}, 900_000}},
		{offsetMeta(4, "orders", -1, genMarks{{3, 5}}, 60_000), offsetMetadata{4, "orders", -1, genMarks{{3, 5}}, 60_000}},
		{"dedupstream partitions=8", offsetMetadata{8, "", -1, nil, 0}},
		{"dedupstream partitions=x output=o@1", offsetMetadata{0, "o", 1, nil, 0}},
		{"dedupstream partitions=4 output=o@1 marks=1000:5@10,4@20", offsetMetadata{4, "o", 1, nil, 0}},
		{"dedupstream partitions=4 output=o@1 marks=1000:5@10,6@9", offsetMetadata{4, "o", 1, nil, 0}},
		{"dedupstream partitions=4 output=o@1 marks=1000:5@x", offsetMetadata{4, "o", 1, nil, 0}},
		{"dedupstream partitions=4 output=o@1 marks=", offsetMetadata{4, "o", 1, nil, 0}},
		{"dedupstream partitions=4 output=o@1 marks=5@10", offsetMetadata{4, "o", 1, nil, 0}},
		{"dedupstream partitions=4 output=o@1 marks=0:5@10", offsetMetadata{4, "o", 1, nil, 0}},
		{"", offsetMetadata{0, "", -1, nil, 0}},
		{"some other tool", offsetMetadata{0, "", -1, nil, 0}},
	} {
		if got := parseOffsetMeta(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseOffsetMeta(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}
