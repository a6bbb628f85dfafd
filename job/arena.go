package job

import (
	"strconv"

	"github.com/dedupstream/dedupstream/fetch"
	"github.com/dedupstream/dedupstream/sink"
)

// arena holds the headers and decimal texts of one fetched batch's outgoing
// records. reset sizes it first, so that appends never move what earlier
// records point to, and reuses the memory batch after batch.
type arena struct {
	headers []sink.Header
	text    []byte
	// dlqLimit is the DLQ topic's max.message.bytes: larger DLQ records
	// are cut down (fitDLQ); cut counts them since reset.
	dlqLimit int
	cut      uint64
}

// dlqHeaders is the number of headers a DLQ record gets on top of its own.
const dlqHeaders = 4

// reset makes room for the records of b, dead of them dead-lettered.
func (a *arena) reset(b *fetch.Batch, dead int) {
	nh := 0
	for i := range b.Records {
		nh += len(b.Records[i].Headers)
	}
	if need := nh + dlqHeaders*dead; cap(a.headers) < need {
		a.headers = make([]sink.Header, 0, need)
	}
	if need := 40 * dead; cap(a.text) < need {
		a.text = make([]byte, 0, need)
	}
	a.headers, a.text = a.headers[:0], a.text[:0]
	a.cut = 0
}

// record returns fr as a record to produce: key, value, headers and
// timestamp unchanged. With a reason it is a DLQ record and also carries
// the reason and its source (topic, partition, offset) in headers.
func (a *arena) record(fr *fetch.Record, reason string, topic []byte, partition int) sink.Record {
	h0 := len(a.headers)
	a.headers = append(a.headers, fr.Headers...)
	if reason != "" {
		t0 := len(a.text)
		a.text = append(a.text, reason...)
		t1 := len(a.text)
		a.text = strconv.AppendInt(a.text, int64(partition), 10)
		t2 := len(a.text)
		a.text = strconv.AppendInt(a.text, fr.Offset, 10)
		t3 := len(a.text)
		a.headers = append(a.headers,
			sink.Header{Key: HeaderReason, Value: a.text[t0:t1:t1]},
			sink.Header{Key: HeaderSourceTopic, Value: topic},
			sink.Header{Key: HeaderSourcePartition, Value: a.text[t1:t2:t2]},
			sink.Header{Key: HeaderSourceOffset, Value: a.text[t2:t3:t3]},
		)
	}
	n := len(a.headers)
	rec := sink.Record{Key: fr.Key, Value: fr.Value, Time: fr.Timestamp, Headers: a.headers[h0:n:n]}
	if reason != "" {
		var cut bool
		if rec, cut = fitDLQ(rec, a.dlqLimit); cut {
			a.cut++
		}
	}
	return rec
}
