package job

import (
	"slices"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/partition"
	"github.com/dedupstream/dedupstream/pipeline"
)

// fromFetched is the fetched record as a stage or a route step's keyer
// sees it; key, value and headers alias the fetch buffer (no copies).
func fromFetched(fr *fetch.Record) pipeline.Record {
	return pipeline.Record{
		Record:      partition.Record{Key: fr.Key, Value: fr.Value, Headers: fr.Headers},
		TimestampMs: fr.Timestamp.UnixMilli(),
	}
}

// convert points dst's records at a fetched batch (no copies) and returns
// it; the stage's input.
func convert(dst []pipeline.Record, b *fetch.Batch) []pipeline.Record {
	dst = slices.Grow(dst[:0], len(b.Records)) // one allocation when the batch outgrew it
	for i := range b.Records {
		dst = append(dst, fromFetched(&b.Records[i]))
	}
	return dst
}

// convertRouted is convert that also counts the records whose Kafka key
// partFn sends to another of partitions than p (len(key) > 0; see
// runner.checkRoute). Hashing each key in the same pass that converts its
// record reads the record once: a separate pass over a large batch after
// the stage met each record and its key bytes again out of the caches.
func convertRouted(dst []pipeline.Record, b *fetch.Batch, partFn func([]byte, int) int, partitions, p int) ([]pipeline.Record, uint64) {
	dst = slices.Grow(dst[:0], len(b.Records))
	var misrouted uint64
	for i := range b.Records {
		fr := &b.Records[i]
		if len(fr.Key) > 0 && partFn(fr.Key, partitions) != p {
			misrouted++
		}
		dst = append(dst, fromFetched(fr))
	}
	return dst, misrouted
}
