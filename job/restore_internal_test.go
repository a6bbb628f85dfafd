package job

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

// TestSplitKeyer: keying a batch on two goroutines gives exactly what one
// RestoreKeyer gives (hashes, versions, times, in order), for batches
// below and above splitKeyMin and reusing the batch; a record that cannot
// be keyed fails the batch whichever half holds it, naming its index in
// the batch.
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
		if err := k.key(in, &got); err != nil {
			t.Fatal(err)
		}
		if err := one.Key(in, &want); err != nil {
			t.Fatal(err)
		}
		if got.Len() != n || !reflect.DeepEqual(got, want) {
			t.Fatalf("%d records: the split keyer's batch (%d records) differs from one keyer's", n, got.Len())
		}
	}
	for _, bad := range []int{10, 4000} {
		err := k.key(recs(5001, bad), &got)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("output record %d:", bad)) {
			t.Errorf("record %d unkeyable: error %v, want one naming record %d", bad, err, bad)
		}
		if got.Len() != 0 {
			t.Errorf("record %d unkeyable: the failed batch holds %d records", bad, got.Len())
		}
	}
}
