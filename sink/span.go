package sink

// Span is where the open transaction's records landed on one partition,
// from the offsets the broker acknowledged. Within one producer's
// transaction the batches of a partition are stored in sequence order, so
// each lands right after the one before unless another producer's records
// (or transaction markers) were appended in between: Foreign says where.
// The job uses it to notice a second writer in a partition it believes it
// writes alone (job/otherwriter.go).
type Span struct {
	// First is the offset of the transaction's first record on the
	// partition, -1 when the broker did not say (the first batch was a
	// resend of one it had stored, answered without its offset).
	First int64
	// Next is one past the last record acknowledged with its offset, -1
	// when none was.
	Next int64
	// Exact says Next ends the transaction's records: the last batch was
	// acknowledged with its offset.
	Exact bool
	// ForeignFrom and ForeignTo bound the first run of offsets inside the
	// span that no batch of this producer took: [ForeignFrom, ForeignTo).
	// Both are -1 when every batch landed right after the one before (or
	// when an offset was not said, so that this is not known).
	ForeignFrom, ForeignTo int64
}

// unknownSpan is the span of a partition the transaction has not written.
var unknownSpan = Span{First: -1, Next: -1, ForeignFrom: -1, ForeignTo: -1}

// Span returns where the open transaction's records landed on the
// partition; ok is false when the transaction has not written to it. Call
// it after Flush to cover every record produced.
func (p *Producer) Span(topic string, partition int32) (s Span, ok bool) {
	s, ok = p.txnSpans[topicPartition{topic, partition}]
	if !ok {
		return unknownSpan, false
	}
	return s, true
}

// landed records a batch of n records the broker stored at base (-1: a
// resent batch it had stored, whose offset it did not say). Batches of a
// partition land in sequence order (inflight.go).
func (p *Producer) landed(tp topicPartition, base int64, n int) {
	s, ok := p.txnSpans[tp]
	if !ok {
		s = unknownSpan
		s.First = base
	}
	if base >= 0 {
		if s.Exact && base > s.Next && s.ForeignFrom < 0 {
			s.ForeignFrom, s.ForeignTo = s.Next, base
		}
		s.Next, s.Exact = base+int64(n), true
	} else {
		s.Exact = false
	}
	p.txnSpans[tp] = s
}
