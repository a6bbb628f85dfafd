package sink

// SingleBatchSize is the size of a record batch holding only r, before
// compression, as a broker measures it against a topic's max.message.bytes.
// It is an upper bound: the record's timestamp and offset deltas are counted
// at their widest.
func SingleBatchSize(r *Record) int { return batchHeaderSize + recordSizeBound(r) }
