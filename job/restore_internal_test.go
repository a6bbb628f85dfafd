package job

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

// TestSplitKeyer: keying a batch on two goroutines gives exactly what one
// RestoreKeyer gives (hashes, versions, times, in order), for batches
// below and above splitKeyMin and reusing the batch; a record that cannot
// be keyed is marked as one keyer marks it, whichever half holds it.
func TestSplitKeyer(t *testing.T) {
	cfg := pipeline.Config{Window: time.Hour, Generations: 4, Key: []partition.Field{{Source: partition.SourceJSON, Name: "k"}}}
	cfg.ApplyDefaults()
	s, err := pipeline.Open(t.TempDir(), cfg, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := func(n, bad int) []pipeline.Record {
		out := make([]pipeline.Record, n)
		for i := range out {
			v := fmt.Appendf(nil, `{"k":"o-%d-%d"}`, n, i)
			if i == bad {
				v = []byte(`{"other":1}`)
			}
			out[i] = pipeline.Record{Record: partition.Record{Value: v}, TimestampMs: int64(1000 + i)}
		}
		return out
	}
	k := newSplitKeyer(s)
	defer k.close()
	one := s.NewRestoreKeyer()
	var got, want pipeline.Restored
	for _, n := range []int{1, splitKeyMin - 1, splitKeyMin, 5001, 300} {
		in := recs(n, -1)
		k.key(in, &got)
		one.Key(in, &want)
		if got.Len() != n || got.Unkeyed() != 0 || !reflect.DeepEqual(&got, &want) {
			t.Fatalf("%d records: the split keyer's batch (%d records) differs from one keyer's", n, got.Len())
		}
	}
	for _, bad := range []int{10, 4000} {
		in := recs(5001, bad)
		k.key(in, &got)
		one.Key(in, &want)
		if got.Unkeyed() != 1 || !reflect.DeepEqual(&got, &want) {
			t.Errorf("record %d unkeyable: the split keyer marked %d records unkeyed, or differs from one keyer", bad, got.Unkeyed())
		}
	}
}
