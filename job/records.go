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
