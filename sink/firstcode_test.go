package sink

import (
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/addpartitionstotxn"
)

// TestFirstCode: a per-partition response fails with its first non-zero
// partition code, wherever that partition is, and succeeds only when every
// partition did.
func TestFirstCode(t *testing.T) {
	parts := func(r *addpartitionstotxn.ResponseResult) []addpartitionstotxn.ResponsePartition { return r.Results }
	code := func(p *addpartitionstotxn.ResponsePartition) int16 { return p.ErrorCode }
	ok := []addpartitionstotxn.ResponseResult{{Name: "a", Results: []addpartitionstotxn.ResponsePartition{{PartitionIndex: 0}, {PartitionIndex: 1}}}, {Name: "b"}}
	if got := firstCode(ok, parts, code); got != 0 {
		t.Errorf("all partitions succeeded: got %v", got)
	}
	bad := []addpartitionstotxn.ResponseResult{
		{Name: "a", Results: []addpartitionstotxn.ResponsePartition{{PartitionIndex: 0}}},
		{Name: "b", Results: []addpartitionstotxn.ResponsePartition{{PartitionIndex: 0}, {PartitionIndex: 1, ErrorCode: int16(kafka.InvalidProducerEpoch)}, {PartitionIndex: 2, ErrorCode: int16(kafka.NotCoordinatorForGroup)}}},
	}
	if got := firstCode(bad, parts, code); got != kafka.InvalidProducerEpoch {
		t.Errorf("got %v, want the first failing partition's %v", got, kafka.InvalidProducerEpoch)
	}
}
